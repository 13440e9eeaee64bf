# TensorBoard event files (run/tensorboard.h, util/tfevents.h), read back by an independent
# reader (tfevents_read.py: its own CRC-32C, python3-protobuf with a schema of TensorBoard's
# fields, TensorBoard's purge of a restarted run's rows):
# - a run's event files hold every train and valid row of metrics.h5, exactly (float64), the
#   config as text, the hparams and the end of the session;
# - a run killed (SIGKILL) after rows past its checkpoint and resumed: after the purge, the same
#   scalars as metrics.h5 (the rows logged twice count once, as in metrics.h5);
# - `eval` adds its numbers at the checkpoint's step; `export-tensorboard` writes the same
#   scalars from the run's files;
# - run.tensorboard=false writes none; export of a directory that is not a run exits 2 with one
#   line.
source "$(dirname "$0")/lib.sh"
PY=/usr/bin/python3
HERE=$(cd "$(dirname "$0")" && pwd)
READ="$PY $HERE/tfevents_read.py"
cd "$WORK"
$PY -c "import google.protobuf" 2>/dev/null || { echo "SKIP: no python3-protobuf"; exit 77; }

# 240 steps (long enough for the kill below to land mid-run), validation and a checkpoint every 8.
$PY "$HERE/tensorboard_fixture.py" "$WORK" 240 8

# same_scalars RUN [EXTRA_PREFIX]: the event files' scalars equal metrics.h5 row for row; the
# only other tags start with EXTRA_PREFIX.
same_scalars() {
  $READ "$1" >"$1.tb.json" || fail "reading $1's event files"
  $PY - "$1" "${2:-}" <<'PY' || fail "$1: the event files differ from metrics.h5"
import json, math, sys, h5py
run, extra = sys.argv[1], sys.argv[2]
tb = json.load(open(run + ".tb.json"))
want = {}
with h5py.File(run + "/metrics.h5", "r") as f:
    for g in ("train", "valid"):
        steps = f[g]["step"][()]
        for k in f[g]:
            if k != "step":
                want[f"{g}/{k}"] = {str(int(s)): float(v) for s, v in zip(steps, f[g][k][()])}
got = {t: d for t, d in tb["scalars"].items() if not (extra and t.startswith(extra))}
assert got.keys() == want.keys(), (sorted(got), sorted(want))
for t in want:
    assert got[t].keys() == want[t].keys(), (t, sorted(got[t]), sorted(want[t]))
    for s, v in want[t].items():
        g = got[t][s]
        assert g == v or (math.isnan(g) and math.isnan(v)), (t, s, g, v)
n = sum(len(d) for d in want.values())
assert "position:" in tb["texts"]["config"]["0"], tb["texts"]["config"]
hp = tb["hparams"]
assert hp["model.position.type"] == "rope" and hp["train.max_steps"] == 240, hp
assert tb["session_end"] == 1, tb["session_end"]
print(f"{run}: {n} scalars equal to metrics.h5 ({tb['files']} file(s), {tb['records']} records)")
PY
}

"$ROPELAB" train tb.yaml run.name=whole >whole.log 2>&1 || fail "train: $(tail -3 whole.log)"
same_scalars runs/whole

# Killed after rows past the step-8 checkpoint, then resumed.
"$ROPELAB" train tb.yaml run.name=killed >killed.log 2>&1 &
pid=$!
for _ in $(seq 6000); do
  grep -q '"step":11' runs/killed/metrics.jsonl 2>/dev/null && break
  running $pid || break
  sleep 0.05
done
kill -KILL $pid 2>/dev/null || fail "the run finished before the kill"
wait $pid 2>/dev/null || true
grep -q '"step":11' runs/killed/metrics.jsonl || fail "no row past the checkpoint before the kill"
"$ROPELAB" train tb.yaml run.name=killed >>killed.log 2>&1 || fail "resume: $(tail -3 killed.log)"
same_scalars runs/killed
$PY -c "
import json; tb = json.load(open('runs/killed.tb.json'))
assert tb['files'] == 2, tb['files']" || fail "a resumed run should add one event file"

# eval adds its numbers; export writes the same scalars again.
"$ROPELAB" eval runs/whole --split valid >eval.log 2>&1 || fail "eval: $(tail -3 eval.log)"
same_scalars runs/whole eval/
$PY - <<'PY' || fail "eval's numbers are not in the event files"
import json
tb = json.load(open("runs/whole.tb.json"))
ev = json.load(open("runs/whole/eval-valid.json"))
step = str(ev["step"])
assert tb["scalars"]["eval/eval-valid/metrics/loss"][step] == ev["metrics"]["loss"]
PY
cp runs/whole.tb.json live.tb.json
expect_exit 0 "$ROPELAB" export-tensorboard runs/whole
expect_in "the old event files replaced"
same_scalars runs/whole eval/
$PY - <<'PY' || fail "export-tensorboard differs from the live event files"
import json
a, b = json.load(open("live.tb.json")), json.load(open("runs/whole.tb.json"))
assert a["scalars"] == b["scalars"] and a["hparams"] == b["hparams"], "scalars or hparams"
assert b["files"] == 1
PY

"$ROPELAB" train tb.yaml run.name=off run.tensorboard=false train.max_steps=4 >off.log 2>&1 ||
  fail "train: $(tail -3 off.log)"
[[ ! -e runs/off/tensorboard ]] || fail "run.tensorboard=false wrote event files"
mkdir notarun
expect_exit 2 "$ROPELAB" export-tensorboard notarun
expect_in "notarun: not a ropelab run"
expect_not_in "terminate called"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
echo "tensorboard: ok"
