#!/usr/bin/env bash
# Builds a minimal Debian root with another release's PyTorch, for the PyTorch columns of
# `ropelab bench --compare-pytorch --pytorch-root DIR` (e.g. PyTorch 2.6 of Debian 13 next to
# ropelab on Debian 12, on the same cores, in one interleaved run). The root has python3-torch
# with OpenBLAS (without it Debian's libtorch falls back to the reference BLAS, many times
# slower), and g++ with python3-dev, python3-setuptools and libtorch-dev (ATen headers) so that torch.compile's CPU backend (inductor) can compile
# its kernels. The bench runs it with /proc, /sys and /dev bound in a private mount namespace.
#
#   sudo bash scripts/pytorch_root.sh                       # Debian 13 in /var/tmp/ropelab-roots/pytorch-trixie
#   sudo bash scripts/pytorch_root.sh --suite trixie --root DIR
#
# Needs root (debootstrap, chroot), about 3 GiB of disk and the Debian mirror. Safe to run again:
# an existing root is completed, not rebuilt.
set -euo pipefail
suite=trixie root=""
while (($#)); do
  case "$1" in
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    --suite) suite="$2"; shift 2 ;;
    --root) root="$2"; shift 2 ;;
    *) echo "pytorch_root: unknown argument $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ "$suite" =~ ^[a-z]+$ ]] || { echo "pytorch_root: '$suite' is not a Debian suite name" >&2; exit 2; }
[[ "$(id -u)" -eq 0 ]] || { echo "pytorch_root: needs root (debootstrap, chroot): run it with sudo" >&2; exit 2; }
root=${root:-/var/tmp/ropelab-roots/pytorch-$suite}
mirror=$(grep -hs -E '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
  /etc/apt/sources.list 2>/dev/null | grep -v -E 'security|updates' | grep -o -m1 -E 'https?://[^ ]*debian/?' || true)
mirror=${mirror:-http://deb.debian.org/debian}
command -v debootstrap >/dev/null || {
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
}
if [[ ! -x "$root/usr/bin/apt-get" ]]; then
  echo "pytorch_root: debootstrap --variant=minbase $suite $root" >&2
  mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase "$suite" "$root" "$mirror" >"$root.debootstrap.log" 2>&1 ||
    { echo "pytorch_root: debootstrap failed (log: $root.debootstrap.log)" >&2; exit 1; }
fi
cp /etc/resolv.conf "$root/etc/resolv.conf"
mounted=()
cleanup() { local m; for m in "${mounted[@]}"; do umount -l "$m" 2>/dev/null || true; done; }
trap cleanup EXIT
for d in proc sys dev; do mount --bind "/$d" "$root/$d"; mounted+=("$root/$d"); done
echo "pytorch_root: installing python3-torch, OpenBLAS, g++ and python3-dev in $root" >&2
chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive \
  bash -c "apt-get update -qq && apt-get install -y -qq --no-install-recommends python3-torch libtorch-dev libopenblas0-pthread g++ python3-dev python3-setuptools >/dev/null"
version=$(chroot "$root" /usr/bin/python3 -c 'import torch; print(torch.__version__)')
echo "pytorch_root: $root has PyTorch $version; use: ropelab bench --compare-pytorch --pytorch-root $root" >&2
