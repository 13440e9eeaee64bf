#!/usr/bin/env bash
# Installs what ropelab needs from Debian (only the packages that are missing; quiet when all
# are there) and builds it into build/. Safe to run again: it only does what is left to do.
#
#   bash scripts/setup.sh            # install + build (preset "release", or $ROPELAB_PRESET:
#                                    # dev = Debug with -Werror in build-dev/, asan in build-asan/)
#   ROPELAB_SKIP_APT=1 bash scripts/setup.sh   # build only (any system: see docs/platform-notes.md)
#   On a machine with an NVIDIA GPU and a CUDA PyTorch it builds against that libtorch (CUDA);
#   ROPELAB_CUDA=0 keeps the CPU build.
#   ROPELAB_BUILD_TARGETS="ropelab ropelab_gpu_tests" builds only those targets (and what they
#   need), e.g. for a short GPU lease (scripts/check_gpu.sh).
#
# The package set depends on the release read from /etc/os-release: Debian 12 (bookworm,
# libtorch 1.13) and Debian 13 (trixie, libtorch 2.6). Anywhere else it stops and prints the
# manual recipe (which libraries, which CMake variables), e.g. for the libtorch of a PyTorch wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

os_release=${ROPELAB_OS_RELEASE:-/etc/os-release}
os_id="" os_version="" os_name="an unknown system"
if [[ -r "$os_release" ]]; then
  os_id=$(. "$os_release" && echo "${ID:-}")
  os_version=$(. "$os_release" && echo "${VERSION_ID:-}")
  os_name=$(. "$os_release" && echo "${PRETTY_NAME:-${ID:-unknown} ${VERSION_ID:-}}")
fi

# What differs between the releases: the clang runtime of the fuzz tier is versioned.
case "$os_id:$os_version" in
  debian:12) clang_rt=libclang-rt-14-dev ;;
  debian:13) clang_rt=libclang-rt-19-dev ;;
  *) clang_rt="" ;;
esac

manual_recipe() {
  cat >&2 <<MSG
setup: $os_name is not a platform this script knows (it installs packages on Debian 12 and 13).
Install these yourself, then run: ROPELAB_SKIP_APT=1 bash scripts/setup.sh
  - a C++17 compiler, CMake >= 3.25, Ninja
  - libtorch: 1.13 or 2.x. Debian's libtorch-dev, or the one inside a PyTorch 2.x wheel (CPU or
    CUDA), which CMake finds through python3 -c 'import torch; print(torch.utils.cmake_prefix_path)'
    or -DTorch_DIR=<dir holding TorchConfig.cmake> (pass CMake variables as ROPELAB_CMAKE_ARGS)
  - libgloo headers (Debian: libgloo-dev; a PyTorch wheel ships its own)
  - SentencePiece (library + spm_train), HDF5 (C library + h5dump), spdlog/fmt, yaml-cpp,
    GoogleTest, CLI11, xxHash, nlohmann-json
  - python3 with h5py and matplotlib (plots), torch (the golden tests' reference) and protobuf
    (the test that reads TensorBoard event files back)
  - python3-markdown and Chart.js (libjs-chart.js) for report.html, and headless Chromium
    (chromium-headless-shell) for its test
  - the SWORD Bible modules KJV, WEB and SpaRV1909 with diatheke (the built-in corpora)
See docs/platform-notes.md for the details per platform.
MSG
}

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang-format
  # libFuzzer targets of the parsers (tests/fuzz)
  clang "$clang_rt"
  # libraries (docs/platform-notes.md)
  libtorch-dev libgloo-dev libopenblas0-pthread libsentencepiece-dev sentencepiece libhdf5-dev hdf5-tools
  libspdlog-dev libyaml-cpp-dev libgtest-dev libcli11-dev libxxhash-dev nlohmann-json3-dev
  zlib1g-dev libzstd-dev
  # the zstd command: tests/e2e/corpora.sh and scripts/bench_corpus.sh compress their shards
  zstd
  # plots, and the independent Python reference used by the golden tests; python3-protobuf
  # reads the TensorBoard event files in tests/e2e/tensorboard.sh
  python3-h5py python3-matplotlib python3-torch python3-sentencepiece python3-protobuf
  # report.html (scripts/report_html.py): Chart.js inlined, compare.md rendered; its browser
  # check (tests/e2e/report.sh) runs headless Chromium
  libjs-chart.js python3-markdown chromium-headless-shell
  # the built-in corpora: public-domain Bibles exported with diatheke
  diatheke sword-text-kjv sword-text-web sword-text-sparv
)

if [[ -z "${ROPELAB_SKIP_APT:-}" ]]; then
  if [[ -z "$clang_rt" ]]; then
    manual_recipe
    exit 2
  fi
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: $os_name: installing ${#missing[@]} Debian package(s): ${missing[*]}" >&2
    SUDO=()
    [[ "$(id -u)" -ne 0 ]] && SUDO=(sudo)
    "${SUDO[@]}" apt-get update -qq
    DEBIAN_FRONTEND=noninteractive "${SUDO[@]}" apt-get install -y -qq --no-install-recommends \
      "${missing[@]}" >/dev/null
  fi
fi

# Both README commands build the same tree with the same flags (preset "release" into build/),
# so the test command after the main job only builds the tests. The build's output is kept in
# build/last-build.log: scripts/test.sh fails on any compiler warning in our code.
preset="${ROPELAB_PRESET:-release}"
start=$(date +%s)
read -r -a extra_cmake_args <<<"${ROPELAB_CMAKE_ARGS:-}"
# A machine with an NVIDIA GPU and a CUDA PyTorch builds against that PyTorch's libtorch (the
# CUDA build) even where Debian's CPU libtorch is installed too. Opt out: ROPELAB_CUDA=0.
if [[ "${ROPELAB_CUDA:-auto}" != 0 ]] && nvidia-smi -L >/dev/null 2>&1 &&
  python3 -c 'import sys, torch; sys.exit(0 if torch.version.cuda else 1)' >/dev/null 2>&1; then
  echo "setup: NVIDIA GPU and CUDA PyTorch $(python3 -c 'import torch; print(torch.__version__)'):" \
    "the CUDA build (ROPELAB_CUDA=0 builds for the CPU)" >&2
  extra_cmake_args+=(-DROPELAB_TORCH_FROM_PYTHON=ON "-DROPELAB_PYTHON=$(command -v python3)")
fi
case "$preset" in
  dev) binary_dir=build-dev ;;
  asan) binary_dir=build-asan ;;
  *) binary_dir=build ;;
esac
mkdir -p "$binary_dir"
# CMake's report (which libtorch, CUDA, NCCL, Gloo) is kept in last-configure.log.
cmake --preset "$preset" "${extra_cmake_args[@]}" >"$binary_dir/last-configure.log"
set -o pipefail
read -r -a targets <<<"${ROPELAB_BUILD_TARGETS:-}"
cmake --build --preset "$preset" -j "$(nproc)" ${targets[@]+--target "${targets[@]}"} 2>&1 |
  tee "$binary_dir/last-build.log"
echo "setup: build ($preset) finished in $(($(date +%s) - start)) s" >&2
