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
