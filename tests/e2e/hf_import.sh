# Hugging Face checkpoints through the real CLI: import a RoFormer MLM fixture (its run
# tokenizes with the checkpoint's vocab.txt) -> fine-tune it on bible-sst2 through
# task.init_from, with a config that inherits the imported run's -> eval the fine-tuned run;
# import a RoFormerForSequenceClassification naming its data, and eval it; a Llama-layout
# decoder with its byte-level BPE tokenizer, evaluated at two lengths, with and without YaRN; a
# classification checkpoint without its data, and a damaged config.json, exit 2 with one line.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
FIX=$ROPELAB_SRC/tests/data/hf

expect_exit 0 "$ROPELAB" import-hf "$FIX/roformer-mlm" --out "$WORK/runs/roformer"
expect_in "imported RoFormerForMaskedLM"
grep -q "type: wordpiece" runs/roformer/config.yaml || fail "the imported run's tokenizer"

cat >ft.yaml <<YAML
inherit: $WORK/runs/roformer/config.yaml
run: {name: sst2, out_dir: $WORK/runs, seed: 5, threads: 2}
data: {source: bible-sst2, prepared_dir: $WORK/prep}
task: {type: glue, seq_len: 64, init_from: $WORK/runs/roformer}
train: {lr: 0.001, max_steps: 40, batch_size: 16, eval_every: 20, eval_batches: 4,
        log_every: 10, checkpoint_every: 20, schedule: {type: linear, warmup: 4}}
YAML
expect_exit 0 "$ROPELAB" train ft.yaml
expect_in "backbone from $WORK/runs/roformer: loaded 36 tensors"
expect_in "missing (left as initialised): head.classifier.bias"  # the new classification head
ls prep/bible-sst2/ | grep -q '^wordpiece-' || fail "bible-sst2 not tokenized with the vocab.txt"
expect_exit 0 "$ROPELAB" eval runs/sst2
expect_in "acc"

# A classification checkpoint: its data named on the command line; eval on that data.
expect_exit 2 "$ROPELAB" import-hf "$FIX/roformer-cls" --out "$WORK/runs/cls"
expect_in "needs the data its labels are for"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
[[ ! -e runs/cls ]] || fail "a refused import left a run"
expect_exit 0 "$ROPELAB" import-hf "$FIX/roformer-cls" --out "$WORK/runs/cls" \
  data.source=bible-sst2 data.prepared_dir="$WORK/prep"
expect_exit 0 "$ROPELAB" prepare runs/cls/config.yaml
expect_exit 0 "$ROPELAB" eval runs/cls
expect_in "acc"

# A Llama-layout decoder with its byte-level BPE tokenizer: prepare bible-en with it, evaluate
# at 1x and 2x its context, with and without a context-extension method.
expect_exit 0 "$ROPELAB" import-hf "$FIX/llama-bpe" --out "$WORK/runs/llama" \
  data.prepared_dir="$WORK/prep" train.batch_size=32
expect_in "imported LlamaForCausalLM"
expect_exit 0 "$ROPELAB" prepare runs/llama/config.yaml
ls prep/bible-en/ | grep -q '^bpe-' || fail "bible-en not tokenized with the tokenizer.json"
expect_exit 0 "$ROPELAB" eval runs/llama --lengths 16,32 --max-tokens 2048
expect_in "ppl"
expect_exit 0 "$ROPELAB" eval runs/llama --lengths 16,32 --max-tokens 2048 --rope-scaling yarn:2
[[ -f runs/llama/eval-test-rope-yarn-2.json ]] || fail "no yarn evaluation written"

# A damaged config.json: one line naming the file.
mkdir bad && cp "$FIX"/roformer-mlm/* bad/ && echo '{"architectures": ["RoFormerForMaskedLM"],' >bad/config.json
expect_exit 2 "$ROPELAB" import-hf bad --out "$WORK/runs/bad"
expect_in "bad/config.json"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
echo "hf_import: ok"
