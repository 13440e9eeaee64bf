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

# ---- distributed runs (ropelab launch, 2 ranks on this machine)
# max_diff A B: the largest absolute difference between two checkpoints' parameters.
max_diff() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, torch
a = dict(torch.jit.load(sys.argv[1]).named_parameters())
b = dict(torch.jit.load(sys.argv[2]).named_parameters())
assert a.keys() == b.keys(), "different parameter names"
print(max((a[k] - b[k]).abs().max().item() for k in a))
PY
}
expect_close() {  # expect_close RUN_A RUN_B STEP TOL: runs/RUN_*'s checkpoints at STEP agree
  local ck=checkpoints/step-$(printf %09d "$3")/model.pt d
  d=$(max_diff "runs/$1/$ck" "runs/$2/$ck")
  python3 -c "import sys; sys.exit(0 if $d <= $4 else 1)" ||
    fail "$1 and $2 differ by $d at step $3 (tolerance $4)"
  echo "$1 vs $2 at step $3: max |diff| = $d"
}
rank_pid() {  # rank_pid LOG RANK: the pid launch reported for a rank
  for _ in $(seq 600); do
    grep -q "rank $2 is pid" "$1" 2>/dev/null && break
    sleep 0.05
  done
  grep -o "rank $2 is pid [0-9]*" "$1" | awk '{print $5}'
}
wait_for() { for _ in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return; sleep 0.05; done; }
# sigterm_resume CONFIG RUN REF STEPS ARGS...: 2 ranks train RUN (CONFIG with ARGS, which set
# train.max_steps=STEPS and no checkpoints); SIGTERM to rank 1 after the step-0 evaluation stops
# both ranks at one step with one checkpoint, and the resumed run ends with the parameters of
# REF, the same run uninterrupted.
sigterm_resume() {
  local cfg=$1 run=$2 ref=$3 last=$4 lpid pid1 steps; shift 4
  "$ROPELAB" launch --nproc 2 --timeout 30 -- train "$cfg" run.name="$run" "$@" >"$run.log" 2>&1 &
  lpid=$!
  pid1=$(rank_pid "$run.log" 1)
  wait_for "$run.log" "step 0 valid"
  sleep 1
  kill -TERM "$pid1"
  set +e; wait $lpid; CODE=$?; set -e
  [[ $CODE -eq 143 ]] || fail "launch after SIGTERM to rank 1 exited $CODE: $(cat "$run.log")"
  steps=$(grep -o "stopping on signal at step [0-9]*" "$run.log" | awk '{print $6}' | sort -u)
  [[ $(grep -c "stopping on signal" "$run.log") -eq 2 && $(wc -w <<<"$steps") -eq 1 ]] ||
    fail "the ranks did not stop at one step: $(grep stopping "$run.log")"
  (( steps < last )) || fail "the run finished before the signal"
  [[ $(ls "runs/$run/checkpoints" | grep -c step-) -eq 1 ]] ||
    fail "want one checkpoint: $(ls "runs/$run/checkpoints")"
  expect_exit 0 "$ROPELAB" launch --nproc 2 --timeout 30 -- train "$cfg" run.name="$run" "$@"
  expect_in "resuming $WORK/runs/$run from step $steps"
  expect_close "$ref" "$run" "$last" 0
  echo "stopped at step $steps; resumed run identical to the uninterrupted one"
}
# sigkill_named CONFIG RUN ARGS...: SIGKILL of rank 1 after the step-0 evaluation makes rank 0
# exit 3 within the timeout (20 s), naming rank 1.
sigkill_named() {
  local cfg=$1 run=$2 lpid pid1 t0 took; shift 2
  "$ROPELAB" launch --nproc 2 --timeout 20 -- train "$cfg" run.name="$run" "$@" >"$run.log" 2>&1 &
  lpid=$!
  pid1=$(rank_pid "$run.log" 1)
  wait_for "$run.log" "step 0 valid"
  t0=$(date +%s)
  kill -KILL "$pid1"
  set +e; wait $lpid; CODE=$?; set -e
  took=$(($(date +%s) - t0))
  [[ $CODE -ne 0 ]] || fail "launch exited 0 after a rank was killed"
  grep -q "launch: rank 1 was killed by signal 9" "$run.log" ||
    fail "launch did not report the kill: $(cat "$run.log")"
  grep -q "error: distributed run, rank 0 of 2: .* failed: rank 1 is gone" "$run.log" ||
    fail "rank 0 did not name the lost rank: $(cat "$run.log")"
  grep -q "launch: rank 0 exited with code 3" "$run.log" ||
    fail "rank 0 exit code: $(cat "$run.log")"
  (( took < 20 )) || fail "rank 0 took $took s to notice (timeout 20)"
  echo "rank 0 reported the killed rank after $took s"
}
