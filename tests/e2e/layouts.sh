# Hybrid layouts through the real CLI: a one-kind layout trains exactly as the same model
# without one (the same losses, digit for digit), and a layout of sliding-window RoPE layers and a
# global NoPE layer with sinks and QK-norm trains, evaluates at 2x its length and resumes.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

word_corpus 2 600 >train.txt
head -n 100 train.txt >valid.txt
# share_cpus: false: equal digits need a fixed thread count, and ctest runs other trainings
# beside this one (run.share_cpus would drop to 1 thread while they do, and sum in another order).
cat >tiny.yaml <<YAML
run: {name: plain, out_dir: $WORK/runs, seed: 5, threads: 2, share_cpus: false}
data: {source: text, train: $WORK/train.txt, valid: $WORK/valid.txt, prepared_dir: $WORK/prep,
       tokenizer: {type: byte}}
task: {type: clm, seq_len: 32}
model: {d_model: 32, n_layers: 4, n_heads: 2, d_ff: 64, dropout: 0.0, position: {type: rope}}
train: {max_steps: 12, batch_size: 4, lr: 0.003, eval_every: 6, eval_batches: 4,
        checkpoint_every: 6, log_every: 3, schedule: {type: cosine, warmup: 2}}
YAML

losses() { grep -o '"loss":[-0-9.e]*' "runs/$1/metrics.jsonl"; }
expect_exit 0 "$ROPELAB" train tiny.yaml model.position.type=t5
expect_exit 0 "$ROPELAB" train tiny.yaml model.position.type=t5 run.name=one-kind \
  "model.layout.kinds.all={}"
[[ -n "$(losses plain)" && "$(losses plain)" == "$(losses one-kind)" ]] ||
  fail "a one-kind layout changed the losses: $(losses plain) vs $(losses one-kind)"
# (Its parameters keep their names, decoder.position.table: LayoutModel.OneKindIsTodaysModel...)

# RNoPE-SWA with sinks and QK-norm: trains, evaluates beyond its length, resumes.
swa=("run.name=swa" "model.layout.pattern=[local, local, local, global]"
  "model.layout.kinds.local={window: 8}" "model.layout.kinds.global={position: {type: none}}"
  "model.attention.sinks=true" "model.attention.qk_norm=true")
expect_exit 0 "$ROPELAB" train tiny.yaml "${swa[@]}"
grep -q "window: 8" runs/swa/config.yaml || fail "the run's config lacks its layout"
expect_exit 0 "$ROPELAB" eval runs/swa --split valid --lengths 32,64 --no-save
expect_in "64"
# Context extension of the kinds named: the local RoPE layers, not the global NoPE one.
expect_exit 0 "$ROPELAB" eval runs/swa --split valid --rope-scaling yarn:2@local --no-save
expect_exit 2 "$ROPELAB" eval runs/swa --split valid --rope-scaling yarn:2@global --no-save
expect_in "layout kind 'global' has position none, not rope"
expect_exit 0 "$ROPELAB" train tiny.yaml "${swa[@]}" train.max_steps=15
expect_in "resuming"
# No exported class has sinks (nor SSMax; the Llama-layout classes take sliding windows of one
# size, and Qwen3's and OLMo 2's QK-norm): export refuses, one line.
expect_exit 2 "$ROPELAB" export runs/swa --format hf --out "$WORK/hf-swa"
expect_in "it has attention sinks (model.attention.sinks)"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
[[ ! -e "$WORK/hf-swa" ]] || fail "a refused export left $WORK/hf-swa"
echo "layouts: OK"
