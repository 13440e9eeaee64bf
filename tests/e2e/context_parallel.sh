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
sigterm_resume lm.yaml res ref 600 "${long[@]}"

# ---- SIGKILL of rank 1 in the middle of the ring: rank 0 names it and exits 3.
sigkill_named lm.yaml kill "${long[@]}"
echo "context_parallel: OK"
