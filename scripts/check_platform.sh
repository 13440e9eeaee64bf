#!/usr/bin/env bash
# Checks ropelab on a fresh Debian release as a new user meets it: builds a minimal root of SUITE
# with debootstrap, clones this repository into it (its committed HEAD), and runs the README's
# two commands in order, the main job then the tests, each from that clone inside the root.
# Reports the wall time and exit code of each, and writes the report to
# runs/platform/SUITE-DATE.md (with each command's full log beside it).
#
#   sudo bash scripts/check_platform.sh bookworm      # Debian 12
#   sudo bash scripts/check_platform.sh trixie        # Debian 13
#
# Options:
#   --root DIR      where the root goes (default: /var/tmp/ropelab-roots/SUITE); must not exist
#                   unless --reuse is given
#   --reuse         use an existing root of an earlier check (skips debootstrap; not "fresh")
#   --keep          keep the root afterwards (default: removed when both commands passed)
#   --mirror URL    the Debian mirror (default: the one this machine's apt uses, else
#                   http://deb.debian.org/debian)
#   --rev REV       the commit to check (default: HEAD)
#   --only CMD      run only "main" or "test" (default: both, in order)
#
# Needs root (debootstrap and chroot), about 6 GiB of disk per root, and network access to the
# mirror. Takes about 45 minutes per suite on 2 cores (build, quickstart, test suite).
set -euo pipefail
usage() { sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'; }

suite="" root="" reuse=0 keep=0 mirror="" rev=HEAD only=""
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --root) root="$2"; shift 2 ;;
    --reuse) reuse=1; shift ;;
    --keep) keep=1; shift ;;
    --mirror) mirror="$2"; shift 2 ;;
    --rev) rev="$2"; shift 2 ;;
    --only) only="$2"; shift 2 ;;
    -*) echo "check_platform: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) [[ -z "$suite" ]] || { echo "check_platform: one SUITE only (see --help)" >&2; exit 2; }
       suite="$1"; shift ;;
  esac
done
[[ -n "$suite" ]] || { echo "check_platform: which suite? e.g. bookworm or trixie (see --help)" >&2; exit 2; }
[[ "$suite" =~ ^[a-z]+$ ]] || { echo "check_platform: '$suite' is not a Debian suite name" >&2; exit 2; }
[[ -z "$only" || "$only" == main || "$only" == test ]] || { echo "check_platform: --only takes main or test" >&2; exit 2; }
[[ "$(id -u)" -eq 0 ]] || { echo "check_platform: needs root (debootstrap, chroot): run it with sudo" >&2; exit 2; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
commit=$(git -C "$repo" rev-parse --verify "$rev^{commit}" 2>/dev/null) ||
  { echo "check_platform: $rev is not a commit of $repo" >&2; exit 2; }
if [[ -n "$(git -C "$repo" status --porcelain --untracked-files=no)" ]]; then
  echo "check_platform: note: uncommitted changes in $repo are not part of the check (it clones $rev)" >&2
fi
root=${root:-/var/tmp/ropelab-roots/$suite}
if [[ -e "$root" && $reuse -eq 0 ]]; then
  echo "check_platform: $root exists; remove it for a fresh root, or pass --reuse" >&2
  exit 2
fi
if [[ -z "$mirror" ]]; then
  mirror=$(grep -hs -E '^(URIs:|deb )' /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
    /etc/apt/sources.list 2>/dev/null | grep -v -E 'security|updates' | grep -o -m1 -E 'https?://[^ ]*debian/?' || true)
  mirror=${mirror:-http://deb.debian.org/debian}
fi

report_dir="$repo/runs/platform"
mkdir -p "$report_dir"
stamp=$(date -u +%Y-%m-%d)
report="$report_dir/$suite-$stamp.md"
log_prefix="$report_dir/$suite-$stamp"

mounted=()
cleanup() {
  local i
  for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[i]}" 2>/dev/null || true; done
}
trap cleanup EXIT

say() { echo "check_platform: $*" >&2; }

t0=$(date +%s)
if [[ $reuse -eq 0 || ! -d "$root" ]]; then
  command -v debootstrap >/dev/null || {
    say "installing debootstrap"
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
  }
  say "debootstrap --variant=minbase $suite $root $mirror"
  mkdir -p "$(dirname "$root")"
  debootstrap --variant=minbase --include=ca-certificates,git,sudo "$suite" "$root" "$mirror" \
    >"$log_prefix-debootstrap.log" 2>&1 ||
    { say "debootstrap failed (log: $log_prefix-debootstrap.log)"; exit 1; }
fi
boot_s=$(($(date +%s) - t0))
cp /etc/resolv.conf "$root/etc/resolv.conf"
# What the Debian installer writes and debootstrap does not: localhost and this machine's name.
# Without them torchrun --standalone (the distributed e2e test) cannot rendezvous on localhost,
# nor its ranks reach the agent at the machine's host name.
if ! grep -qs "[[:space:]]$(hostname)\([[:space:]]\|$\)" "$root/etc/hosts"; then
  printf '127.0.0.1\tlocalhost\n127.0.0.1\t%s\n::1\t\tlocalhost ip6-localhost ip6-loopback\n' \
    "$(hostname)" >"$root/etc/hosts"
fi
for d in proc sys dev dev/pts; do
  mount --bind "/$d" "$root/$d"
  mounted+=("$root/$d")
done

# The clone: what a user gets from `git clone`, at the commit under test.
rm -rf "$root/root/ropelab"
git clone -q --no-local "$repo" "$root/root/ropelab"
git -C "$root/root/ropelab" checkout -q "$commit"

os=$(. "$root/etc/os-release" && echo "$PRETTY_NAME")
say "$os root ready in ${boot_s} s; checking $(git -C "$repo" log -1 --format='%h %s' "$commit")"

# One README command inside the root, as root, with a login-like environment and no terminal.
declare -A rc secs
run_in_root() {
  local name="$1" cmd="$2" log="$log_prefix-$1.log" s
  say "[$name] $cmd  (log: $log)"
  s=$(date +%s)
  set +e
  chroot "$root" /usr/bin/env -i HOME=/root PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    LANG=C.UTF-8 TERM=dumb bash -c "cd /root/ropelab && $cmd" </dev/null >"$log" 2>&1
  rc[$name]=$?
  set -e
  secs[$name]=$(($(date +%s) - s))
  say "[$name] exit ${rc[$name]} after ${secs[$name]} s"
}
main_cmd="bash scripts/quickstart.sh"
test_cmd="bash scripts/test.sh"
[[ -z "$only" || "$only" == main ]] && run_in_root main "$main_cmd"
[[ -z "$only" || "$only" == test ]] && run_in_root test "$test_cmd"

libtorch=$(chroot "$root" dpkg-query -W -f='${Version}' libtorch-dev 2>/dev/null || echo "?")
fmt_time() { printf '%dm%02ds' $(($1 / 60)) $(($1 % 60)); }
{
  echo "# Platform check: $os"
  echo
  echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "- commit: $(git -C "$repo" log -1 --format='%h (%s)' "$commit")"
  echo "- root: debootstrap --variant=minbase $suite ($mirror)$([[ $reuse -eq 1 ]] && echo ', reused')"
  echo "- libtorch-dev: $libtorch; machine: $(nproc) cores, $(awk '/MemTotal/{printf "%.0f GiB", $2/1048576}' /proc/meminfo)"
  echo
  echo "| command | exit code | wall time |"
  echo "| --- | --: | --: |"
  for n in main test; do
    [[ -n "${rc[$n]:-}" ]] || continue
    c=$main_cmd; [[ $n == test ]] && c=$test_cmd
    echo "| \`$c\` | ${rc[$n]} | $(fmt_time "${secs[$n]}") |"
  done
  if [[ -n "${rc[main]:-}" ]]; then
    echo
    echo "## The main job's table"
    echo
    # The sweep table (mean ± std, intervals and paired tests against the baseline).
    awk '/^\| variant \| loss/ {p = 1; n = 0} p && /^$/ {p = 0} p {t[++n] = $0} END {for (i = 1; i <= n; i++) print t[i]}' \
      "$log_prefix-main.log"
  fi
  if [[ -n "${rc[test]:-}" ]]; then
    echo
    echo "## ctest"
    echo
    grep -E "tests passed|tests failed|Total Test time|\(Failed\)|\(Timeout\)|\*\*\*" "$log_prefix-test.log" | tail -20 | sed 's/^/    /'
  fi
} >"$report"
cat "$report"
say "report: $report"

ok=1
for n in main test; do [[ -z "${rc[$n]:-}" || "${rc[$n]}" -eq 0 ]] || ok=0; done
if [[ $ok -eq 1 && $keep -eq 0 ]]; then
  cleanup
  mounted=()
  rm -rf --one-file-system "$root"
  say "removed $root"
fi
[[ $ok -eq 1 ]]
