# Helpers for the end-to-end tests (sourced). $ROPELAB is the binary under test.
set -euo pipefail
: "${ROPELAB:?set by ctest}"
WORK=$(mktemp -d /tmp/ropelab-e2e.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }
# expect_exit CODE CMD...: runs CMD, captures output in $OUT, checks the exit code.
expect_exit() {
  local want=$1; shift
  set +e; OUT=$("$@" 2>&1); local got=$?; set -e
  [[ $got -eq $want ]] || fail "'$*' exited $got, expected $want. Output:
$OUT"
}
expect_in() { grep -qF -- "$1" <<<"$OUT" || fail "output lacks '$1'. Output:
$OUT"; }
expect_not_in() { ! grep -qF -- "$1" <<<"$OUT" || fail "output has '$1'. Output:
$OUT"; }
# signal_when SIG LOG PATTERN DELAY CMD...: runs CMD in the background with its output in LOG,
# waits (up to 30 s each) until the process catches SIG (ropelab installs its handlers after
# start-up, which may re-execute the binary) and until LOG matches PATTERN (empty: no pattern),
# sleeps DELAY seconds, sends SIG and waits for the exit; the exit code is in $CODE.
signal_when() {
  local sig=$1 log=$2 pattern=$3 delay=$4; shift 4
  "$@" >"$log" 2>&1 &
  local pid=$! num mask
  num=$(kill -l "$sig")
  for _ in $(seq 600); do
    mask=$(awk '/^SigCgt:/ {print $2}' /proc/$pid/status 2>/dev/null || true)
    [[ -n $mask ]] && (( (16#$mask >> (num - 1)) & 1 )) && break
    sleep 0.05
  done
  if [[ -n $pattern ]]; then
    for _ in $(seq 600); do grep -q -- "$pattern" "$log" 2>/dev/null && break; sleep 0.05; done
  fi
  sleep "$delay"
  kill -"$sig" $pid
  set +e; wait $pid; CODE=$?; set -e
}
