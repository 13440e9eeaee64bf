#!/usr/bin/env bash
# Installs what ropelab needs from Debian (only the packages that are missing; quiet when all
# are there) and builds it into build/. Safe to run again: it only does what is left to do.
#
#   bash scripts/setup.sh            # install + build (preset "release", or $ROPELAB_PRESET:
#                                    # dev = Debug with -Werror in build-dev/, asan in build-asan/)
#   ROPELAB_SKIP_APT=1 bash scripts/setup.sh   # build only
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  # toolchain
  build-essential cmake ninja-build pkg-config clang-format
  # libFuzzer targets of the parsers (tests/fuzz)
  clang libclang-rt-14-dev
  # libraries (docs/platform-notes.md)
  libtorch-dev libgloo-dev libopenblas0-pthread libsentencepiece-dev sentencepiece libhdf5-dev hdf5-tools
  libspdlog-dev libyaml-cpp-dev libgtest-dev libcli11-dev libxxhash-dev nlohmann-json3-dev
  # plots, and the independent Python reference used by the golden tests
  python3-h5py python3-matplotlib python3-torch python3-sentencepiece
  # the built-in corpora: public-domain Bibles exported with diatheke
  diatheke sword-text-kjv sword-text-web sword-text-sparv
)

if [[ -z "${ROPELAB_SKIP_APT:-}" ]]; then
  missing=()
  for p in "${PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if ((${#missing[@]})); then
    echo "setup: installing ${#missing[@]} Debian package(s): ${missing[*]}" >&2
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
cmake --preset "$preset" >/dev/null
case "$preset" in
  dev) binary_dir=build-dev ;;
  asan) binary_dir=build-asan ;;
  *) binary_dir=build ;;
esac
set -o pipefail
cmake --build --preset "$preset" -j "$(nproc)" 2>&1 | tee "$binary_dir/last-build.log"
echo "setup: build ($preset) finished in $(($(date +%s) - start)) s" >&2
