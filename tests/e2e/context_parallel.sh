# Context parallelism through the real CLI (train.context_parallel; docs/distributed.md), ranks
# on 127.0.0.1 over c10d Gloo:
#   - 2 ranks sharing each sequence train like 1 process on the same batches: the parameters
#     after 12 steps match, for a causal LM with RoPE, with T5 and a sliding-window layout over
#     packed documents, and for an MLM encoder; the validation loss matches too;
#   - 4 ranks as 2 data-parallel groups x 2 ranks a sequence match 1 process as well;
#   - SIGTERM to rank 1 stops both ranks at one step with one checkpoint, and the resumed run
#     ends bit-identical to an uninterrupted one; SIGKILL of rank 1 makes rank 0 exit 3 naming it;
#   - what cannot run is refused in one line: one process asked for 2 ranks a sequence, a
#     sequence that does not split evenly, CoPE's stored bias, linear attention.
# Tolerance of "match": 1e-4 absolute, as in distributed.sh (float32 sums in another order).
source "$(dirname "$0")/lib.sh"
cd "$WORK"

word_corpus 1 600 >train.txt
head -n 100 train.txt >valid.txt
cat >lm.yaml <<YAML
run: {name: one, out_dir: $WORK/runs, seed: 3, threads: 1}
data: {source: text, train: $WORK/train.txt, valid: $WORK/valid.txt, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 64}}
task: {type: clm, seq_len: 64}
model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, dropout: 0.0, position: {type: rope}}
train: {max_steps: 12, batch_size: 4, lr: 0.003, eval_every: 6, eval_batches: 4,
        checkpoint_every: 6, log_every: 3, schedule: {type: cosine, warmup: 2}}
YAML

max_diff() {  # max_diff A B: the largest absolute difference between two checkpoints' parameters
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys, torch
a = dict(torch.jit.load(sys.argv[1]).named_parameters())
b = dict(torch.jit.load(sys.argv[2]).named_parameters())
assert a.keys() == b.keys(), "different parameter names"
print(max((a[k] - b[k]).abs().max().item() for k in a))
PY
}
expect_close() {  # expect_close RUN_A RUN_B STEP TOL
  local ck=checkpoints/step-$(printf %09d "$3")/model.pt d
  d=$(max_diff "runs/$1/$ck" "runs/$2/$ck")
  python3 -c "import sys; sys.exit(0 if $d <= $4 else 1)" ||
    fail "$1 and $2 differ by $d at step $3 (tolerance $4)"
  echo "$1 vs $2 at step $3: max |diff| = $d"
}
same_valid() {  # same_valid RUN_A RUN_B: the validation losses agree
  python3 - runs/$1/metrics.jsonl runs/$2/metrics.jsonl <<'PY' || fail "valid loss of $2 differs"
import json, sys
rows = [[json.loads(l) for l in open(p) if '"split":"valid"' in l] for p in sys.argv[1:]]
assert len(rows[0]) == len(rows[1]) >= 2, rows
for a, b in zip(*rows):
    assert abs(a["loss"] - b["loss"]) < 1e-4, (a, b)
PY
}
launch() {  # launch NPROC CONFIG ARGS...
  local n=$1; shift
  "$ROPELAB" launch --nproc "$n" --timeout 30 -- train "$@"
}

# ---- 2 ranks a sequence == 1 process
expect_exit 0 "$ROPELAB" train lm.yaml
expect_exit 0 launch 2 lm.yaml run.name=cp2 train.context_parallel=2
expect_in "context parallel: 2 ranks a sequence"
expect_close one cp2 12 1e-4
same_valid one cp2
# 2 data-parallel groups of 2: each group's batch of 2 sequences, the same global batch.
expect_exit 0 launch 4 lm.yaml run.name=dp2cp2 train.context_parallel=2 train.batch_size=2
expect_close one dp2cp2 12 1e-4
same_valid one dp2cp2

# T5's relative bias, a sliding window on alternate layers, packed documents.
t5=(model.position.type=t5 task.packing=documents "model.layout.pattern=[local, global]"
    model.layout.kinds.local.window=9 model.layout.kinds.global.position.type=t5)
expect_exit 0 "$ROPELAB" train lm.yaml run.name=t5one "${t5[@]}"
expect_exit 0 launch 2 lm.yaml run.name=t5cp2 train.context_parallel=2 "${t5[@]}"
expect_close t5one t5cp2 12 1e-4
# A bidirectional MLM encoder.
mlm=(task.type=mlm model.arch=encoder)
expect_exit 0 "$ROPELAB" train lm.yaml run.name=mlm1 "${mlm[@]}"
expect_exit 0 launch 2 lm.yaml run.name=mlmcp2 train.context_parallel=2 "${mlm[@]}"
expect_close mlm1 mlmcp2 12 1e-4

# ---- what it cannot run, in one line each, before training
expect_exit 2 "$ROPELAB" train lm.yaml run.name=bad train.context_parallel=2
expect_in "start it with \`ropelab launch --nproc 2"
expect_exit 2 "$ROPELAB" train lm.yaml run.name=bad train.context_parallel=3
expect_in "task.seq_len (64) must be a multiple of 6"
expect_exit 2 "$ROPELAB" train lm.yaml run.name=bad train.context_parallel=2 model.position.type=cope
expect_in "cope builds a stored T x S score bias"
expect_exit 2 "$ROPELAB" train lm.yaml run.name=bad train.context_parallel=2 \
  model.attention.kernel=linear
expect_in "linear attention's running sums do not travel the ring"
expect_exit 2 launch 3 lm.yaml run.name=bad train.context_parallel=2
expect_in "this run has 3 ranks (not a multiple of 2)"

# ---- SIGTERM to one rank: both stop at one step, one checkpoint; the resume is exact.
long=(train.context_parallel=2 train.max_steps=600 train.checkpoint_every=0 train.eval_every=300)
expect_exit 0 launch 2 lm.yaml run.name=ref "${long[@]}"
rank_pid() {  # rank_pid LOG RANK: the pid launch reported for a rank
  for _ in $(seq 600); do
    grep -q "rank $2 is pid" "$1" 2>/dev/null && break
    sleep 0.05
  done
  grep -o "rank $2 is pid [0-9]*" "$1" | awk '{print $5}'
}
wait_for() { for _ in $(seq 600); do grep -q -- "$2" "$1" 2>/dev/null && return; sleep 0.05; done; }
launch 2 lm.yaml run.name=res "${long[@]}" >res.log 2>&1 &
lpid=$!
pid1=$(rank_pid res.log 1)
wait_for res.log "step 0 valid"
sleep 1
kill -TERM "$pid1"
set +e; wait $lpid; CODE=$?; set -e
[[ $CODE -eq 143 ]] || fail "launch after SIGTERM to rank 1 exited $CODE: $(cat res.log)"
steps=$(grep -o "stopping on signal at step [0-9]*" res.log | awk '{print $6}' | sort -u)
[[ $(grep -c "stopping on signal" res.log) -eq 2 && $(wc -w <<<"$steps") -eq 1 ]] ||
  fail "the ranks did not stop at one step: $(grep stopping res.log)"
(( steps < 600 )) || fail "the run finished before the signal"
expect_exit 0 launch 2 lm.yaml run.name=res "${long[@]}"
expect_in "resuming $WORK/runs/res from step $steps"
expect_close ref res 600 0
echo "stopped at step $steps; resumed run identical to the uninterrupted one"

# ---- SIGKILL of rank 1 in the middle of the ring: rank 0 names it and exits 3.
"$ROPELAB" launch --nproc 2 --timeout 20 -- train lm.yaml run.name=kill "${long[@]}" >kill.log 2>&1 &
lpid=$!
pid1=$(rank_pid kill.log 1)
wait_for kill.log "step 0 valid"
t0=$(date +%s)
kill -KILL "$pid1"
set +e; wait $lpid; CODE=$?; set -e
took=$(($(date +%s) - t0))
[[ $CODE -ne 0 ]] || fail "launch exited 0 after a rank was killed"
grep -q "error: distributed run, rank 0 of 2: .* failed: rank 1 is gone" kill.log ||
  fail "rank 0 did not name the lost rank: $(cat kill.log)"
grep -q "launch: rank 0 exited with code 3" kill.log || fail "rank 0 exit code: $(cat kill.log)"
(( took < 20 )) || fail "rank 0 took $took s to notice (timeout 20)"
echo "rank 0 reported the killed rank after $took s"
echo "context_parallel: OK"
