# The research workflow through the real CLI on a tiny config: prepare -> train -> resume ->
# eval --lengths -> compare -> export, plus a graceful SIGTERM and a refused config change.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

word_corpus 1 600 >train.txt
head -n 100 train.txt >valid.txt
cat >tiny.yaml <<YAML
run: {name: tiny-rope, out_dir: $WORK/runs, seed: 3, threads: 2}
data: {source: text, train: $WORK/train.txt, valid: $WORK/valid.txt, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 64}}
task: {type: clm, seq_len: 32}
model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, dropout: 0.0, scale_embeddings: true,
        position: {type: rope}}
train: {max_steps: 12, batch_size: 4, lr: 0.003, eval_every: 6, eval_batches: 4,
        checkpoint_every: 6, log_every: 3, schedule: {type: cosine, warmup: 2}}
YAML

expect_exit 0 "$ROPELAB" prepare tiny.yaml
expect_in "tokenizer"
h5ls -r "$WORK"/prep/text-train.txt-*/spm64-bpe/train.h5 | grep -q "/text/tokens" || fail "HDF5 layout"

expect_exit 0 "$ROPELAB" train tiny.yaml
R=runs/tiny-rope
for f in config.yaml train.log metrics.h5 metrics.jsonl; do [[ -s $R/$f ]] || fail "missing $R/$f"; done
ls $R/checkpoints/step-000000012/MANIFEST.json >/dev/null || fail "no final checkpoint"
grep -q '"split":"valid"' $R/metrics.jsonl || fail "no validation rows"
h5ls $R/metrics.h5/train | grep -q tokens_per_s || fail "metrics.h5 lacks tokens_per_s"

# Resume: more steps continue from the checkpoint.
expect_exit 0 "$ROPELAB" train tiny.yaml train.max_steps=15
expect_in "resuming"
ls $R/checkpoints/step-000000015 >/dev/null || fail "resume did not reach step 15"
# Running a finished run again (as ablate does to collect results) reports its final numbers
# from metrics.h5 and logs nothing twice.
rows=$(/usr/bin/python3 -c "import h5py; print(len(h5py.File('$R/metrics.h5')['valid/step']))")
expect_exit 0 "$ROPELAB" train tiny.yaml train.max_steps=15
expect_in "step 15 valid acc"
expect_in "(final, from metrics.h5)"
expect_in "tiny-rope already finished at step 15: nothing to train"
expect_not_in "resuming"
expect_not_in "step/s"  # no progress bar for a run with nothing left to do
[[ $(/usr/bin/python3 -c "import h5py; print(len(h5py.File('$R/metrics.h5')['valid/step']))") -eq $rows ]] ||
  fail "a finished run run again logged its final evaluation twice"
# A changed architecture is refused, naming what differs (tests/e2e/reliability.sh: the rest).
expect_exit 2 "$ROPELAB" train tiny.yaml model.d_model=64
expect_in "model.d_model: 32 -> 64"

# run.threads 0 takes the CPUs the process may use: under `taskset -c 0`, one thread, and the
# run's header says why (not the machine's core count).
if command -v taskset >/dev/null; then
  expect_exit 0 taskset -c 0 "$ROPELAB" train tiny.yaml run.name=tiny-1cpu run.threads=0 train.max_steps=2
  expect_in "1 thread (1 CPU of the affinity mask / 1 local rank)"
else
  echo "SKIP taskset: util-linux's taskset is not installed"
fi

# A second run with learned positions (table of 32): eval beyond it is n/a, not a crash.
expect_exit 0 "$ROPELAB" train tiny.yaml run.name=tiny-learned model.position.type=learned model.position.max_len=32
expect_exit 0 "$ROPELAB" eval runs/tiny-learned --split valid --lengths 16,32,64 --max-tokens 512
expect_in "n/a"
[[ -s runs/tiny-learned/eval-valid.json ]] || fail "no eval json"
expect_exit 0 "$ROPELAB" eval $R --split valid --lengths 16,32,64 --max-tokens 512
expect_in "length extrapolation"

# Evaluation-time RoPE scaling: a method switched on for a model trained without it.
expect_exit 0 "$ROPELAB" eval $R --split valid --lengths 32,64 --max-tokens 512 --rope-scaling yarn:2
expect_in "RoPE scaling yarn:2"
/usr/bin/python3 - "$R" <<'PY' || fail "eval --rope-scaling report"
import json, sys
plain = json.load(open(sys.argv[1] + "/eval-valid.json"))
yarn = json.load(open(sys.argv[1] + "/eval-valid-rope-yarn-2.json"))
assert yarn["rope_scaling"] == "yarn:2" and "rope_scaling" not in plain
loss = lambda rep, L: [r for r in rep["lengths"] if r["length"] == L][0]["metrics"]["loss"]
# (Evaluation is deterministic: without the method the two losses would be identical.)
assert abs(loss(plain, 64) - loss(yarn, 64)) > 1e-6, "yarn changed nothing"
PY
expect_exit 2 "$ROPELAB" eval runs/tiny-learned --rope-scaling yarn:2
expect_in "needs a RoPE model (its position module is learned)"
expect_exit 2 "$ROPELAB" eval $R --rope-scaling yarn
expect_in "expected METHOD:FACTOR"

# A length-generalisation experiment: every run at each length, RoPE also with evaluation-time
# methods; a table, a JSON, a plot, and the section in compare.md.
cat >lg.yaml <<YAML
name: lg
base: tiny.yaml
out_dir: $WORK/runs
set: [train.max_steps=6, train.eval_every=6, train.checkpoint_every=6]
eval_lengths: [32, 64]
eval_rope_scaling: [ntk:2, dynamic:2]
eval_tokens: 512
variants:
  - {name: rope, set: [model.position.type=rope]}
  - {name: kerple, set: [model.position.type=kerple]}
  - {name: fire, set: [model.position.type=fire]}
YAML
expect_exit 0 "$ROPELAB" ablate lg.yaml
expect_in "Length generalisation"
/usr/bin/python3 - runs/lg <<'PY' || fail "length-generalisation outputs"
import json, math, os, sys
d = sys.argv[1]
j = json.load(open(d + "/lengths.json"))
assert j["train_len"] == 32 and j["lengths"] == [32, 64], j
rows = {r["label"]: r["loss"] for r in j["rows"]}
assert list(rows) == ["rope", "rope + ntk:2", "rope + dynamic:2", "kerple", "fire"], list(rows)
assert all(len(v) == 2 and all(math.isfinite(x) for x in v) for v in rows.values()), rows
# Dynamic NTK is RoPE up to the training length and differs beyond it.
assert abs(rows["rope + dynamic:2"][0] - rows["rope"][0]) < 1e-9, rows
assert abs(rows["rope + dynamic:2"][1] - rows["rope"][1]) > 1e-6, rows
md = open(d + "/lengths.md").read()
assert "| run | 32 (1×, trained) | 64 (2×) |" in md, md
assert "Length generalisation" in open(d + "/compare.md").read()
assert os.path.getsize(d + "/loss_by_length.png") > 0
PY

# Seeds from the command line: two per variant, then intervals and a paired test against the
# named baseline in sweep.md.
cat >seeds.yaml <<YAML
name: seeds
base: tiny.yaml
out_dir: $WORK/runs
set: [train.max_steps=6, train.eval_every=6, train.checkpoint_every=6]
baseline: rope
variants:
  - {name: alibi, set: [model.position.type=alibi]}
  - {name: rope, set: [model.position.type=rope]}
YAML
expect_exit 0 "$ROPELAB" ablate --no-plots --seeds 2 seeds.yaml
for r in alibi.seed1 alibi.seed2 rope.seed1 rope.seed2; do
  [[ -d runs/seeds/$r ]] || fail "ablate --seeds 2: no run $r"
done
/usr/bin/python3 - runs/seeds/sweep.md <<'PY' || fail "seed statistics in sweep.md"
import re, sys
md = open(sys.argv[1]).read()
sec = md[md.index("## Seeds: 95% intervals and paired tests"):]
assert "| variant | loss (lower is better) | 95% interval | seeds | vs rope | 95% interval | p |" in sec, sec
assert re.search(r"\| rope \| [0-9.]+ ± [0-9.]+ \| \[[0-9.]+, [0-9.]+\] \| 2 \| \(baseline\)", sec), sec
assert re.search(r"\| alibi \| [0-9.]+ ± [0-9.]+ \| \[[0-9.]+, [0-9.]+\] \| 2 \| [+-][0-9.]+ \| \[[+-][0-9.]+, [+-][0-9.]+\] \| [0-9.e+-]+( \*)? \|", sec), sec
PY
/usr/bin/python3 - runs/seeds <<'PY' || fail "results.json of a seeded ablation"
import json, math, sys
j = json.load(open(sys.argv[1] + "/results.json"))
assert j["baseline"] == "rope", j
got = sorted((r["variant"], r["seed"], r["setting"], r["task"]) for r in j["runs"])
assert got == [("alibi", 1, "", ""), ("alibi", 2, "", ""), ("rope", 1, "", ""), ("rope", 2, "", "")], got
for r in j["runs"]:
    assert r["metric"] == "loss" and r["higher"] is False and math.isfinite(r["value"]), r
    assert r["run_dir"].endswith("/seeds/%s.seed%d" % (r["variant"], r["seed"])), r
    assert "test" not in r, r
PY
cat >badbase.yaml <<YAML
name: badbase
base: tiny.yaml
baseline: ropee
variants: [{name: rope, set: []}]
YAML
expect_exit 2 "$ROPELAB" ablate badbase.yaml
expect_in "baseline: 'ropee' is not one of the variants; did you mean 'rope'?"

expect_exit 0 "$ROPELAB" compare $R runs/tiny-learned --out cmp --target-loss 3.0
expect_in "tiny-learned"
[[ -s cmp/compare.md ]] || fail "no compare.md"
[[ -s cmp/loss_by_step.png && -s cmp/loss_by_tokens.png ]] || fail "no plots"

expect_exit 0 "$ROPELAB" export $R --out w.h5
h5ls -r w.h5 | grep -q "decoder/layers/0/self_attn/q_proj/weight" || fail "export layout"

# SIGTERM, and SIGHUP (a closed terminal or ssh session): a checkpoint is saved and the exit
# code is 143.
stop_with() {  # stop_with SIGNAL RUN_NAME
  "$ROPELAB" train tiny.yaml run.name=$2 train.max_steps=100000 train.checkpoint_every=0 train.eval_every=0 >$2.log 2>&1 &
  local pid=$!
  for _ in $(seq 100); do grep -q "train \[" $2.log 2>/dev/null && break; sleep 0.2; done
  sleep 1
  kill -$1 $pid
  set +e; wait $pid; local code=$?; set -e
  [[ $code -eq 143 ]] || fail "SIG$1 exit code $code: $(tail -5 $2.log)"
  ls runs/$2/checkpoints/step-* >/dev/null 2>&1 || fail "no checkpoint after SIG$1"
}
stop_with TERM long
stop_with HUP hup

# A crash (a bug; here SIGSEGV or SIGABRT sent from outside) says so in one line naming a report
# with the command line and the backtrace, and the process still dies of its signal.
for sig in SEGV ABRT; do
  signal_when $sig crash.log "info run " 0.5 \
    "$ROPELAB" train tiny.yaml run.name=crash-$sig train.max_steps=100000 train.checkpoint_every=0
  [[ $CODE -eq $((128 + $(kill -l $sig))) ]] || fail "SIG$sig exit code $CODE: $(tail -3 crash.log)"
  report=$(ls ropelab-crash-*.txt 2>/dev/null) || fail "SIG$sig left no crash report"
  grep -qx "ropelab: internal error: SIG$sig (a bug: please report it); details in $WORK/$report" \
    crash.log || fail "SIG$sig message: $(tail -3 crash.log)"
  grep -q "crashed: SIG$sig" $report && grep -q "^command: .* train tiny.yaml run.name=crash-$sig " \
    $report || fail "SIG$sig report: $(head -3 $report)"
  (($(grep -c '\[0x[0-9a-f]*\]$' $report) >= 3)) || fail "SIG$sig report has no backtrace: $(cat $report)"
  rm $report
done

# A run whose checkpoints are all damaged is not silently restarted: exit 2 naming each one,
# nothing changed; --restart starts over and keeps the old metrics and checkpoints renamed.
cp -r $R runs/dmg
for m in runs/dmg/checkpoints/step-*/model.pt; do
  printf '\x01' | dd of="$m" bs=1 seek=100 conv=notrunc status=none
done
before=$(md5sum runs/dmg/metrics.h5 runs/dmg/metrics.jsonl)
expect_exit 2 "$ROPELAB" train tiny.yaml run.name=dmg
expect_in "no checkpoint can be resumed (step-000000006: model.pt does not match its checksum"
expect_in "--restart"
[[ $(md5sum runs/dmg/metrics.h5 runs/dmg/metrics.jsonl) == "$before" ]] || fail "the refused run changed its metrics"
expect_exit 0 "$ROPELAB" train tiny.yaml run.name=dmg --restart
[[ -f runs/dmg/metrics.restart-1.h5 && -d runs/dmg/checkpoints.restart-1 ]] || fail "--restart kept nothing"
[[ $(md5sum <runs/dmg/metrics.restart-1.h5 | cut -d' ' -f1) == $(echo "$before" | head -1 | cut -d' ' -f1) ]] ||
  fail "the kept metrics differ from the old ones"
# Metrics but no checkpoint: refused too.
rm -rf runs/dmg/checkpoints
expect_exit 2 "$ROPELAB" train tiny.yaml run.name=dmg
expect_in "has results (metrics.h5) but no checkpoint"

# SIGKILL at any moment: metrics.h5 holds every training row up to the newest checkpoint
# (they are made durable before it commits), so a resumed run's curve has no holes.
# Each kill waits until the run has saved a checkpoint newer than the one it resumed from, so
# three kills leave at least three steps even on a loaded machine.
newest() { (ls -d runs/kill/checkpoints/step-* 2>/dev/null || true) | sort | tail -1; }
for k in 1 2 3; do
  before=$(newest)
  "$ROPELAB" train tiny.yaml run.name=kill train.max_steps=100000 train.checkpoint_every=1 \
    train.log_every=1 train.eval_every=0 >kill.log 2>&1 &
  pid=$!
  for _ in $(seq 600); do [[ -n $(newest) && $(newest) != "$before" ]] && break; sleep 0.1; done
  sleep 0.$((RANDOM % 9 + 1))
  kill -KILL $pid
  set +e; wait $pid; set -e
done
/usr/bin/python3 - runs/kill <<'PY' || fail "metrics rows missing before the newest checkpoint"
import glob, os, sys, h5py, json
d = sys.argv[1]
ok = [int(os.path.basename(p)[5:]) for p in glob.glob(d + "/checkpoints/step-*")
      if os.path.exists(p + "/MANIFEST.json")]
last = max(ok)
steps = set(int(s) for s in h5py.File(d + "/metrics.h5", "r")["train/step"][()])
missing = [s for s in range(1, last + 1) if s not in steps]
assert last >= 3 and not missing, (last, missing[:10])
print(f"after 3 SIGKILLs: checkpoint at step {last}, all {last} training rows in metrics.h5")
PY


# A file-size limit (ulimit -f) is a clean write error (exit 2, one line), not SIGXFSZ (153):
# a run with a checkpoint at step 2 continues under a limit (150 KiB) that metrics.h5 (~70 KiB)
# stays under and optim.pt (~200 KiB) does not; the step-2 checkpoint is kept intact (the
# next run resumes from it) and no partial checkpoint is left.
expect_exit 0 "$ROPELAB" train tiny.yaml run.name=fsz train.max_steps=2 train.checkpoint_every=2
set +e
(ulimit -f 150; exec "$ROPELAB" train tiny.yaml run.name=fsz train.max_steps=4 train.checkpoint_every=2 >fsz.log 2>&1)
code=$?
set -e
[[ $code -eq 2 ]] || fail "under ulimit -f: exit code $code: $(tail -3 fsz.log)"
tail -1 fsz.log | grep -q "^error: .*optim.pt: write failed (File too large)" ||
  fail "under ulimit -f, no clean error: $(tail -3 fsz.log)"
[[ $(ls -A runs/fsz/checkpoints) == "step-000000002" ]] || fail "checkpoints after the failed save: $(ls -A runs/fsz/checkpoints)"
expect_exit 0 "$ROPELAB" train tiny.yaml run.name=fsz train.max_steps=4 train.checkpoint_every=2
expect_in "resuming $WORK/runs/fsz from step 2"

# Bad input: one line, exit 2.
printf 'ok line\n\xff bad\n' >bad.txt
expect_exit 2 "$ROPELAB" prepare tiny.yaml data.train=$WORK/bad.txt
expect_in "bad.txt:2: invalid UTF-8"
expect_exit 2 "$ROPELAB" eval runs/nope
echo "train_eval_compare: OK"
