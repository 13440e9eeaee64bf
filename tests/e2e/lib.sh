# Helpers for the end-to-end tests (sourced). $ROPELAB is the binary under test.
set -euo pipefail
: "${ROPELAB:?set by ctest}"
WORK=$(mktemp -d /tmp/ropelab-e2e.XXXXXX)
trap '[[ -n ${KEEP_WORK:-} ]] || rm -rf "$WORK"' EXIT
# A crashing ropelab writes its report to $TMPDIR/ropelab-crash-<pid>.txt: here, so that a
# failing test shows it (the backtrace says where an intermittent crash happened).
export TMPDIR=$WORK
fail() {
  echo "FAIL: $*" >&2
  for r in "$WORK"/ropelab-crash-*.txt; do [[ -e $r ]] && { echo "--- $r" && cat "$r"; } >&2; done
  exit 1
}
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
# waits (up to 5 minutes each) until the process catches SIG (ropelab installs its handlers after
# start-up, which may re-execute the binary) and until LOG matches PATTERN (empty: no pattern),
# sleeps DELAY seconds, sends SIG and waits for the exit; the exit code is in $CODE.
running() { [[ -e /proc/$1 ]] && ! grep -q '^State:.*Z' /proc/$1/status 2>/dev/null; }
signal_when() {
  local sig=$1 log=$2 pattern=$3 delay=$4; shift 4
  "$@" >"$log" 2>&1 &
  local pid=$! num mask
  num=$(kill -l "$sig")
  for _ in $(seq 6000); do
    running $pid || break
    mask=$(awk '/^SigCgt:/ {print $2}' /proc/$pid/status 2>/dev/null || true)
    [[ -n $mask ]] && (( (16#$mask >> (num - 1)) & 1 )) && break
    sleep 0.05
  done
  if [[ -n $pattern ]]; then
    # A loaded machine can take far longer than 30 s to reach a step-0 evaluation; never
    # signal at a moment the test did not ask for.
    local seen=0
    for _ in $(seq 6000); do
      grep -q -- "$pattern" "$log" 2>/dev/null && { seen=1; break; }
      running $pid || break
      sleep 0.05
    done
    if (( ! seen )); then
      kill -KILL $pid 2>/dev/null || true
      wait $pid 2>/dev/null || true
      fail "'$pattern' never appeared in $log before the signal was due: $(tail -3 "$log")"
    fi
  fi
  sleep "$delay"
  kill -"$sig" $pid
  set +e; wait $pid; CODE=$?; set -e
}
# same_run REF_DIR OTHER_DIR: the same weights (every tensor of the exported weights.h5) and
# the same metrics rows (metrics.h5 and metrics.jsonl, every column but the timings).
same_run() {  # same_run REF_DIR OTHER_DIR
  "$ROPELAB" export $1 --out $1.w.h5 >/dev/null 2>&1 || fail "export $1"
  "$ROPELAB" export $2 --out $2.w.h5 >/dev/null 2>&1 || fail "export $2"
  /usr/bin/python3 - $1 $2 <<'PY' || fail "$2 differs from $1"
import sys, h5py, numpy as np
a, b = sys.argv[1], sys.argv[2]
def tensors(path):
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda k, v: out.__setitem__(k, v[()]) if isinstance(v, h5py.Dataset) else None)
    return out
wa, wb = tensors(a + ".w.h5"), tensors(b + ".w.h5")
assert wa.keys() == wb.keys(), "different tensors"
bad = [k for k in wa if not np.array_equal(wa[k], wb[k])]
assert not bad, f"weights differ: {bad[:5]}"
with h5py.File(a + "/metrics.h5", "r") as fa, h5py.File(b + "/metrics.h5", "r") as fb:
    for g in ("train", "valid"):
        if g not in fa:
            continue
        cols = [c for c in fa[g] if c not in ("tokens_per_s", "time", "wall_s")]
        for c in cols:
            x, y = fa[g][c][()], fb[g][c][()]
            assert np.array_equal(x, y), f"{g}/{c}: {len(x)} vs {len(y)} rows, first difference " \
                f"{next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), None)}"
        print(f"  {g}: {len(fa[g]['step'])} rows equal ({len(cols)} columns)")
import json
def rows(run):
    out = []
    for line in open(run + "/metrics.jsonl"):
        r = json.loads(line)
        r.pop("tokens_per_s", None)
        out.append(r)
    return out
ja, jb = rows(a), rows(b)
assert ja == jb, f"metrics.jsonl differs: {len(ja)} vs {len(jb)} rows, first difference " \
    f"{next((x, y) for x, y in zip(ja + [None], jb + [None]) if x != y)}"
print(f"  metrics.jsonl: {len(ja)} rows equal")
print(f"  {len(wa)} tensors bit-identical")
PY
}

# word_corpus SEED LINES: LINES sentences of 5-20 words from a small Genesis vocabulary.
word_corpus() {
  python3 - "$1" "$2" <<'PY'
import random, sys
random.seed(int(sys.argv[1]))
words = "in the beginning god created heaven and earth light darkness water day night".split()
for i in range(int(sys.argv[2])):
    print(" ".join(random.choice(words) for _ in range(random.randint(5, 20))) + ".")
PY
}
