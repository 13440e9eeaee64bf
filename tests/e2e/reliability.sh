# Reliability through the real CLI:
# - one writer per run: while `train` runs, a second `train` of the run (also with
#   HDF5_USE_FILE_LOCKING=FALSE, the cluster setting), an `eval` that writes into it, a second
#   `ablate` of one experiment each exit 2 at once naming the holder's pid, and change nothing;
#   `compare` and `eval --no-save` work meanwhile; a lock left by a SIGKILLed run is taken over
#   with a warning;
# - two concurrent `prepare`s of the same data build it once;
# - config changes on resume: refused with each key's old and new value (nothing written), or,
#   for the keys that may change and with --allow-config-change, recorded in
#   config_history.yaml and train.log and marked by `compare`;
# - 2 ranks, 6 SIGKILLs of a random rank at random moments (a checkpoint every step, so some
#   land in a save; others in start-up, where the survivor waits out the 10 s timeout): each
#   time every rank exits non-zero within the timeout;
#   the resumed run's weights and metrics rows are bit-identical to an uninterrupted 2-rank
#   run's.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

/usr/bin/python3 - <<'PY'
import random
random.seed(4)
w = "in the beginning god created heaven and earth light darkness water day night".split()
for name, n in (("lm.txt", 600), ("valid.txt", 60)):
    with open(name, "w") as f:
        for _ in range(n):
            f.write(" ".join(random.choice(w) for _ in range(random.randint(5, 16))) + ".\n")
PY
cat >lm.yaml <<YAML
run: {name: one, out_dir: $WORK/runs, seed: 3, threads: 1}
data: {source: text, train: $WORK/lm.txt, valid: $WORK/valid.txt, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 64}}
task: {type: clm, seq_len: 24}
model: {arch: decoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, dropout: 0.1,
        position: {type: rope}}
train: {max_steps: 40, batch_size: 4, lr: 0.003, eval_every: 10, eval_batches: 2,
        checkpoint_every: 1, keep_last: 2, log_every: 3, schedule: {warmup: 2}}
YAML
files_of() { (cd "$1" && find . -type f ! -name .lock -exec md5sum {} + | sort -k2); }

# ---- two concurrent prepares of new data: the tokenizer and each split are built once.
"$ROPELAB" prepare lm.yaml >prep1.log 2>&1 &
p1=$!
"$ROPELAB" prepare lm.yaml >prep2.log 2>&1 || fail "the second prepare failed: $(cat prep2.log)"
wait $p1 || fail "the first prepare failed: $(cat prep1.log)"
[[ $(cat prep1.log prep2.log | grep -c "training SentencePiece") -eq 1 ]] ||
  fail "the tokenizer was trained twice: $(cat prep1.log prep2.log)"
for split in train valid; do
  [[ $(cat prep1.log prep2.log | grep -c "wrote .*/$split.h5") -eq 1 ]] ||
    fail "$split.h5 was written $(cat prep1.log prep2.log | grep -c "wrote .*/$split.h5") times"
done
echo "two prepares: built once ($(grep -l "waiting for" prep1.log prep2.log | wc -l) waited)"

# ---- one writer per run
long=(run.name=busy train.max_steps=200000 train.checkpoint_every=50 train.eval_every=0)
"$ROPELAB" train lm.yaml "${long[@]}" >busy.log 2>&1 &
bpid=$!
wait_for runs/busy/metrics.jsonl '"step":30,'
[[ -e runs/busy/checkpoints ]] || sleep 1
for locking in TRUE FALSE; do
  export HDF5_USE_FILE_LOCKING=$locking
  t0=$(date +%s%N)
  expect_exit 2 "$ROPELAB" train lm.yaml "${long[@]}"
  took=$((($(date +%s%N) - t0) / 1000000))
  expect_in "runs/busy: in use by pid $bpid on host $(hostname) (ropelab train lm.yaml"
  expect_in "train refused"
  expect_not_in "resuming"
  # Refused at once, not after waiting for the lock: the first writer is still training. (The
  # bound only catches a hang: under a loaded CI a prompt refusal has taken 5 s.)
  running "$bpid" || fail "the first writer stopped before the second was refused"
  (( took < 60000 )) || fail "the second writer took $took ms to be refused"
done
unset HDF5_USE_FILE_LOCKING
expect_exit 2 "$ROPELAB" eval runs/busy --split valid
expect_in "in use by pid $bpid"
expect_in "eval --no-save"
expect_exit 0 "$ROPELAB" eval runs/busy --split valid --no-save --latest
[[ ! -e runs/busy/eval-valid.json ]] || fail "eval --no-save wrote into the run"
expect_exit 0 "$ROPELAB" compare runs/busy --out cmp-live --no-plots
expect_in "busy (training)"
expect_in "being written by pid $bpid"
kill -TERM $bpid
set +e; wait $bpid; bcode=$?; set -e
[[ $bcode -eq 143 ]] || fail "the busy run exited $bcode on SIGTERM: $(tail -3 busy.log)"
/usr/bin/python3 - runs/busy/metrics.jsonl <<'PY' || fail "duplicated metrics rows"
import json, sys, collections
rows = [json.loads(l) for l in open(sys.argv[1])]
dup = [k for k, n in collections.Counter((r["split"], r["step"]) for r in rows).items() if n > 1]
assert not dup, dup[:5]
print(f"  {len(rows)} rows, no (split, step) twice")
PY
[[ ! -s runs/busy/.lock ]] || fail "a clean exit left its lock text: $(cat runs/busy/.lock)"
# The lock of a SIGKILLed run is taken over with a warning.
"$ROPELAB" train lm.yaml "${long[@]}" >busy2.log 2>&1 &
bpid=$!
wait_for runs/busy/.lock "\"pid\":$bpid"
kill -KILL $bpid
set +e; wait $bpid; set -e
expect_exit 2 "$ROPELAB" train lm.yaml "${long[@]}" train.lr=0.001
expect_in "taking over the lock left by pid $bpid on host $(hostname)"
expect_in "which is no longer running"
expect_in "train.lr: 0.003 -> 0.001"

# Two ablations of one experiment: the second exits 2 naming the first.
cat >abl.yaml <<YAML
name: abl
base: lm.yaml
out_dir: $WORK/runs
set: [train.max_steps=200000, train.checkpoint_every=500, train.eval_every=0]
variants:
  - {name: a}
  - {name: b, set: [model.position.type=t5]}
YAML
"$ROPELAB" ablate --no-plots abl.yaml >abl.log 2>&1 &
apid=$!
wait_for abl.log "info run .*/abl/a:"
expect_exit 2 "$ROPELAB" ablate --no-plots abl.yaml
expect_in "runs/abl: in use by pid $apid"
expect_in "ablate refused"
kill -TERM $apid
set +e; wait $apid; set -e

# ---- config changes on resume
expect_exit 0 "$ROPELAB" train lm.yaml run.name=cfg train.max_steps=12
cfg_before=$(md5sum <runs/cfg/config.yaml)
all_before=$(files_of runs/cfg)
expect_exit 2 "$ROPELAB" train lm.yaml run.name=cfg train.max_steps=12 train.batch_size=8 \
  train.lr=0.01
expect_in "runs/cfg: holds a run with a different configuration (train.batch_size: 4 -> 8; train.lr: 0.003 -> 0.01)"
expect_in "--allow-config-change"
expect_exit 2 "$ROPELAB" train lm.yaml run.name=cfg train.max_steps=10
expect_in "train.max_steps: 12 -> 10"
[[ $(files_of runs/cfg) == "$all_before" ]] || fail "a refused resume changed files of the run"
expect_exit 0 "$ROPELAB" train lm.yaml run.name=cfg train.max_steps=18 train.log_every=2
expect_in "config change from step 12: train.log_every: 3 -> 2 (may change on resume)"
expect_in "config change from step 12: train.max_steps: 12 -> 18 (may change on resume)"
grep -q "config change from step 12: train.max_steps: 12 -> 18" runs/cfg/train.log ||
  fail "train.log lacks the config change"
expect_exit 0 "$ROPELAB" train lm.yaml run.name=cfg train.max_steps=20 train.log_every=2 \
  train.lr=0.002 --allow-config-change
expect_in "config change from step 18: train.lr: 0.003 -> 0.002 (--allow-config-change)"
/usr/bin/python3 - runs/cfg <<'PY' || fail "config_history.yaml"
import sys, yaml
h = yaml.safe_load(open(sys.argv[1] + "/config_history.yaml"))
got = [(e["step"], e["key"], str(e["old"]), str(e["new"]), e["why"]) for e in h]
want = [(12, "train.log_every", "3", "2", "may change on resume"),
        (12, "train.max_steps", "12", "18", "may change on resume"),
        (18, "train.max_steps", "18", "20", "may change on resume"),
        (18, "train.lr", "0.003", "0.002", "--allow-config-change")]
assert sorted(got) == sorted(want), got
c = yaml.safe_load(open(sys.argv[1] + "/config.yaml"))
assert c["train"]["lr"] == 0.002 and c["train"]["max_steps"] == 20, c["train"]
PY
[[ $(md5sum <runs/cfg/config.yaml) != "$cfg_before" ]] || fail "config.yaml kept the old values"
expect_exit 0 "$ROPELAB" compare runs/cfg --out cmp --no-plots
expect_in "cfg †"
expect_in "† cfg: config changed on resume"
expect_in "step 18: train.lr: 0.003 -> 0.002"

# ---- 2 ranks: 6 SIGKILLs of a random rank at random moments, then a resume to the end.
launch() { "$ROPELAB" launch --nproc 2 --timeout 10 -- train lm.yaml "$@"; }
two=(train.batch_size=2 train.max_steps=400 train.eval_every=100)
expect_exit 0 launch run.name=ref2 "${two[@]}"
kills=0
for k in 1 2 3 4 5 6; do
  launch run.name=kill2 "${two[@]}" >k$k.log 2>&1 &
  lpid=$!
  wait_for k$k.log "rank 1 is pid"
  for _ in $(seq 600); do
    [[ -n $(ls runs/kill2/checkpoints 2>/dev/null) ]] && break
    sleep 0.05
  done
  # 0 to 1.5 s: during start-up or the resume's loading, a step, an evaluation or a save.
  sleep $((RANDOM % 2)).$((RANDOM % 10))$((RANDOM % 10))
  rank=$((RANDOM % 2))
  pid=$(grep -o "rank $rank is pid [0-9]*" k$k.log | awk '{print $5}')
  t0=$(date +%s)
  kill -KILL "$pid" 2>/dev/null && kills=$((kills + 1))
  set +e; wait $lpid; CODE=$?; set -e
  took=$(($(date +%s) - t0))
  pids=$(grep -o "rank [01] is pid [0-9]*" k$k.log | awk '{print $5}')
  for p in $pids; do
    ! kill -0 "$p" 2>/dev/null || fail "kill $k: rank pid $p still runs after launch exited"
  done
  if grep -q "^run: " k$k.log; then
    echo "  kill $k: the run had finished"
    break
  fi
  [[ $CODE -ne 0 ]] || fail "kill $k: launch exited 0 after rank $rank was killed: $(cat k$k.log)"
  grep -Eq "launch: rank $((1 - rank)) (exited with code [1-9]|was killed)" k$k.log ||
    fail "kill $k: the other rank did not exit non-zero: $(grep launch: k$k.log)"
  (( took < 20 )) ||
    fail "kill $k: the ranks took $took s to exit (timeout 10): $(grep -E 'launch:|error|rank' k$k.log | tail -8)"
  echo "  kill $k: rank $rank, launch exited $CODE after $took s"
done
(( kills >= 3 )) || fail "only $kills kills landed"
expect_exit 0 launch run.name=kill2 "${two[@]}"
same_run runs/ref2 runs/kill2
# ---- bf16 where its products have no fast kernel (no AVX-512, and no oneDNN sgemm to widen onto
# under ROPELAB_FP32_GEMM=blas): the run warns, in the log too, and names the way out.
slow_note="consider train.precision=fp32"
if ROPELAB_FP32_GEMM=blas "$ROPELAB" info | grep -qF "with no fast kernel for this CPU"; then
  expect_exit 0 env ROPELAB_FP32_GEMM=blas "$ROPELAB" train lm.yaml run.name=bf16slow \
    train.max_steps=2 train.eval_every=0 train.precision=bf16
  expect_in "$slow_note"
  grep -qF "$slow_note" runs/bf16slow/train.log || fail "train.log lacks the bf16 warning"
fi
if ! "$ROPELAB" info | grep -qF "with no fast kernel for this CPU"; then
  expect_exit 0 "$ROPELAB" train lm.yaml run.name=bf16 train.max_steps=2 train.eval_every=0 \
    train.precision=bf16
  expect_not_in "$slow_note"
fi
echo "reliability: OK"
