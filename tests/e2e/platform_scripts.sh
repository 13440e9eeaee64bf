# The platform scripts' own contracts (the platform check itself runs by hand: it builds a
# Debian root and takes about 45 minutes): setup.sh stops with the manual recipe on a system it
# does not know, check_platform.sh validates its arguments, and the binary reports the libtorch
# it was built against, the same one as Debian's python3-torch on this machine.
source "$(dirname "$0")/lib.sh"
: "${ROPELAB_SRC:?set by ctest}"

# setup.sh on an unknown system: exit 2 before installing or building, with the recipe.
cat >"$WORK/os-release" <<'OS'
PRETTY_NAME="Ubuntu 24.04 LTS"
ID=ubuntu
VERSION_ID="24.04"
OS
expect_exit 2 env ROPELAB_OS_RELEASE="$WORK/os-release" bash "$ROPELAB_SRC/scripts/setup.sh"
expect_in "setup: Ubuntu 24.04 LTS is not a platform this script knows"
expect_in "ROPELAB_SKIP_APT=1 bash scripts/setup.sh"
expect_in "torch.utils.cmake_prefix_path"
expect_in "docs/platform-notes.md"
# Debian 14 is not known either (its package names are not checked yet).
printf 'PRETTY_NAME="Debian GNU/Linux 14 (forky)"\nID=debian\nVERSION_ID="14"\n' >"$WORK/os-release"
expect_exit 2 env ROPELAB_OS_RELEASE="$WORK/os-release" bash "$ROPELAB_SRC/scripts/setup.sh"
expect_in "Debian GNU/Linux 14 (forky) is not a platform"

# check_gpu.sh (runs on a GPU machine): help, and one-line refusals before it builds anything.
gpu_check="$ROPELAB_SRC/scripts/check_gpu.sh"
expect_exit 0 bash "$gpu_check" --help
expect_in "ctest -L gpu"
expect_in "--profile"
expect_exit 2 bash "$gpu_check" --frobnicate
expect_in "unknown argument --frobnicate"
expect_exit 2 bash "$gpu_check" --bench-steps 0
expect_in "--bench-steps takes a positive number"
expect_exit 2 bash "$gpu_check" --bench-models lm,gpt
expect_in "--bench-models: 'gpt' is not one of"
expect_exit 2 bash "$gpu_check" --bench-variants "compile jit"
expect_in "--bench-variants: 'jit' is not one of"
mkdir -p "$WORK/no-debs"
expect_exit 2 bash "$gpu_check" --deps "$WORK/no-debs"
expect_in "no .deb files there"

# check_platform.sh: help, and one-line refusals of bad arguments before it touches anything.
check="$ROPELAB_SRC/scripts/check_platform.sh"
expect_exit 0 bash "$check" --help
expect_in "debootstrap"
expect_in "--reuse"
expect_exit 2 bash "$check"
expect_in "which suite?"
expect_exit 2 bash "$check" 'trixie;rm'
expect_in "is not a Debian suite name"
expect_exit 2 bash "$check" trixie --only build
expect_in "--only takes main or test"
expect_exit 2 bash "$check" trixie --frobnicate
expect_in "unknown option --frobnicate"
expect_exit 2 bash "$check" trixie bookworm
expect_in "one SUITE only"
if [[ "$(id -u)" -eq 0 ]]; then
  mkdir -p "$WORK/root-exists"
  expect_exit 2 bash "$check" trixie --root "$WORK/root-exists"
  expect_in "exists; remove it for a fresh root, or pass --reuse"
  expect_exit 2 bash "$check" trixie --rev no-such-commit
  expect_in "no-such-commit is not a commit"
fi

# CMake's libtorch lookup through Python (how a PyTorch wheel is found): a stand-in interpreter
# answers torch.utils.cmake_prefix_path with a prefix whose Torch/ wraps this build's libtorch.
: "${ROPELAB_BUILD:?set by ctest}"
torch_dir=$(sed -n 's/^Torch_DIR:PATH=//p' "$ROPELAB_BUILD/CMakeCache.txt")
[[ -f "$torch_dir/TorchConfig.cmake" ]] || fail "no TorchConfig.cmake in '$torch_dir'"
mkdir -p "$WORK/prefix/Torch"
echo "include(\"$torch_dir/TorchConfig.cmake\")" >"$WORK/prefix/Torch/TorchConfig.cmake"
cp "$torch_dir/TorchConfigVersion.cmake" "$WORK/prefix/Torch/" 2>/dev/null || true
printf '#!/bin/sh\necho %s\n' "$WORK/prefix" >"$WORK/fakepy"
chmod +x "$WORK/fakepy"
configure() {
  rm -rf "$WORK/cfg"
  expect_exit "$1" cmake -S "$ROPELAB_SRC" -B "$WORK/cfg" -G Ninja -DROPELAB_TESTS=OFF \
    -DROPELAB_TORCH_FROM_PYTHON=ON -DROPELAB_PYTHON="$WORK/fakepy"
}
configure 0
expect_in "from $WORK/prefix/Torch"
# A wheel built with the pre-C++11 ABI (PyTorch before 2.7) is refused with the reason.
echo 'set(TORCH_CXX_FLAGS "-D_GLIBCXX_USE_CXX11_ABI=0")' >>"$WORK/prefix/Torch/TorchConfig.cmake"
configure 1
OUT=$(tr -s ' \n' '  ' <<<"$OUT")  # CMake wraps its messages
expect_in "was built with the pre-C++11 ABI"
expect_in "Use PyTorch 2.7 or newer"

# The binary names the libtorch it was built against; on Debian that is python3-torch's.
expect_exit 0 "$ROPELAB" info
expect_in "libtorch: "
built=$(grep -oE '^libtorch: [0-9]+\.[0-9]+' <<<"$OUT" | cut -d' ' -f2)
if py=$(/usr/bin/python3 -c 'import torch; print(".".join(torch.__version__.split(".")[:2]))' 2>/dev/null); then
  [[ "$built" == "$py" ]] || fail "ropelab was built against libtorch $built, python3-torch is $py"
fi
echo "platform scripts: OK (libtorch $built)"
