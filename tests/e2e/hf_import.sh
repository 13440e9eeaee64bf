# Hugging Face checkpoints through the real CLI: import a RoFormer MLM fixture (its run
# tokenizes with the checkpoint's vocab.txt) -> fine-tune it on bible-sst2 through
# task.init_from, with a config that inherits the imported run's -> eval the fine-tuned run ->
# export it as a Hugging Face checkpoint and import that: the same accuracy; a Llama-layout
# decoder trained here exported and imported again: the same loss;
# import a RoFormerForSequenceClassification naming its data, and eval it; a Llama-layout
# decoder with its byte-level BPE tokenizer, evaluated at two lengths, with and without YaRN,
# probed, and trained further; transformers 5's config layout, unknown keys and layouts that
# disagree; Qwen3 fine-tuned, exported and imported again, and evaluated on given ids; a
# ropelab GPT-style run through GPT-NeoX and back; an imported GPT-NeoX extended with YaRN and
# fine-tuned; a classification checkpoint without its data, and a damaged config.json, exit 2
# with one line.
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
expect_exit 0 "$ROPELAB" eval runs/sst2 --no-save
expect_in "acc"
tuned=$(grep -E '^ +acc' <<<"$OUT")

# The fine-tuned model out as a Hugging Face checkpoint, and in again: the same predictions.
expect_exit 0 "$ROPELAB" export runs/sst2 --format hf --out "$WORK/sst2-hf"
expect_in "exported RoFormerForSequenceClassification"
for f in config.json model.safetensors vocab.txt tokenizer_config.json; do
  [[ -f sst2-hf/$f ]] || fail "the export lacks $f"
done
expect_exit 0 "$ROPELAB" import-hf sst2-hf --out "$WORK/runs/sst2-again" \
  data.source=bible-sst2 data.prepared_dir="$WORK/prep"
expect_exit 0 "$ROPELAB" prepare runs/sst2-again/config.yaml
expect_exit 0 "$ROPELAB" eval runs/sst2-again --no-save
[[ $(grep -E '^ +acc' <<<"$OUT") == "$tuned" ]] || fail "the round trip changed the model: $tuned vs $OUT"
expect_exit 2 "$ROPELAB" export runs/sst2 --format hf --out "$WORK/sst2-hf"
expect_in "already exists"

# A decoder trained here in the Llama layout (RMSNorm, SwiGLU, grouped-query, half-split RoPE,
# ropelab's SentencePiece): out as LlamaForCausalLM with its tokenizer.model, in again, the
# same test loss.
python3 - <<'PY'
import random
random.seed(3)
words = "the a light day night god earth heaven water land good said let there be made".split()
for name, n in (("lm-train.txt", 400), ("lm-valid.txt", 40), ("lm-test.txt", 40)):
    with open(name, "w") as f:
        for _ in range(n):
            f.write(" ".join(random.choice(words) for _ in range(12)) + ".\n")
PY
cat >llama.yaml <<YAML
run: {name: tiny-llama, out_dir: $WORK/runs, seed: 3, threads: 2}
data: {source: text, train: $WORK/lm-train.txt, valid: $WORK/lm-valid.txt,
       test: $WORK/lm-test.txt, prepared_dir: $WORK/prep, tokenizer: {type: spm, vocab_size: 64}}
task: {type: clm, seq_len: 32}
model: {arch: decoder, d_model: 32, n_layers: 1, n_heads: 4, n_kv_heads: 2, d_ff: 48,
        norm_type: rmsnorm, activation: swiglu, bias: none, position: {type: rope, pairing: half}}
train: {max_steps: 10, batch_size: 8, eval_every: 0, log_every: 5, schedule: {warmup: 2}}
YAML
expect_exit 0 "$ROPELAB" train llama.yaml
expect_exit 0 "$ROPELAB" eval runs/tiny-llama --no-save
trained=$(grep -E '^ +acc' <<<"$OUT")
expect_exit 0 "$ROPELAB" export runs/tiny-llama --format hf --out "$WORK/llama-hf"
expect_in "exported LlamaForCausalLM"
[[ -f llama-hf/tokenizer.model ]] || fail "the export lacks tokenizer.model"
expect_exit 0 "$ROPELAB" import-hf llama-hf --out "$WORK/runs/llama-again" data.source=text \
  data.train="$WORK/lm-train.txt" data.valid="$WORK/lm-valid.txt" data.test="$WORK/lm-test.txt" \
  data.prepared_dir="$WORK/prep"
expect_exit 0 "$ROPELAB" prepare runs/llama-again/config.yaml
expect_exit 0 "$ROPELAB" eval runs/llama-again --no-save
[[ $(grep -E '^ +acc' <<<"$OUT") == "$trained" ]] || fail "the round trip changed the model: $trained vs $OUT"
# A GPT-style decoder of ropelab's own (LayerNorm, biases, GELU, RoPE on 4 of 8 channels, a
# parallel residual) is GPT-NeoX: exported, imported again with the run's SentencePiece model
# (GPTNeoXForCausalLM has no tokenizer for it), the same loss.
expect_exit 0 "$ROPELAB" train llama.yaml run.name=neox model.norm_type=layernorm \
  model.activation=gelu model.bias=all model.n_kv_heads=0 model.parallel_residual=true \
  model.position.rotary_dim=4
expect_exit 0 "$ROPELAB" eval runs/neox --no-save
neox=$(grep -E '^ +acc' <<<"$OUT")
expect_exit 0 "$ROPELAB" export runs/neox --format hf --out "$WORK/neox-hf"
expect_in "exported GPTNeoXForCausalLM"
expect_in "no tokenizer written"
grep -q '"use_parallel_residual": true' neox-hf/config.json || fail "the export lost the residual"
spm=$(find "$WORK/prep" -name '*.model' | head -1)
[[ -n $spm ]] || fail "no SentencePiece model under $WORK/prep"
expect_exit 0 "$ROPELAB" import-hf neox-hf --out "$WORK/runs/neox-again" data.source=text \
  data.train="$WORK/lm-train.txt" data.valid="$WORK/lm-valid.txt" data.test="$WORK/lm-test.txt" \
  data.prepared_dir="$WORK/prep" data.tokenizer.model="$spm"
expect_exit 0 "$ROPELAB" prepare runs/neox-again/config.yaml
expect_exit 0 "$ROPELAB" eval runs/neox-again --no-save
[[ $(grep -E '^ +acc' <<<"$OUT") == "$neox" ]] || fail "the round trip changed the model: $neox vs $OUT"
# With learned positions a parallel residual has no class: refused, naming why.
expect_exit 0 "$ROPELAB" train llama.yaml run.name=gpt model.norm_type=layernorm \
  model.activation=gelu model.bias=all model.n_kv_heads=0 model.parallel_residual=true \
  model.position.type=learned train.max_steps=2
expect_exit 2 "$ROPELAB" export runs/gpt --format hf --out "$WORK/gpt-hf"
expect_in "no Hugging Face class computes this model"
expect_in "GPT2LMHeadModel: a parallel residual"
[[ ! -e gpt-hf ]] || fail "a refused export left a directory"

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
expect_exit 0 "$ROPELAB" probe runs/llama --max-tokens 1024 --no-plots
[[ -f runs/llama/probe.md ]] || fail "no probe card for the imported run"
# Further training of the imported run: its checkpoint has no optimizer state.
expect_exit 0 "$ROPELAB" train runs/llama/config.yaml --allow-config-change \
  train.max_steps=6 train.schedule.warmup=2 train.eval_every=3 train.log_every=3
expect_in "the optimizer starts fresh"
[[ -d runs/llama/checkpoints/step-000000006 ]] || fail "no checkpoint after further training"

# transformers 5's layout (the issue's case: the base only inside rope_parameters) imports with
# that base; a key ropelab does not know, and v4 and v5 settings that disagree, exit 2 with one
# line naming them; --allow-unknown-keys imports anyway and lists what it ignored.
expect_exit 0 "$ROPELAB" import-hf "$FIX/llama-v5-yarn" --out "$WORK/runs/v5"
grep -qE "base: (500000|5e\+05)$" runs/v5/config.yaml || fail "the v5 base was not read: $(cat runs/v5/config.yaml)"
grep -q "type: yarn" runs/v5/config.yaml || fail "the v5 scaling was not read"
expect_exit 2 "$ROPELAB" import-hf "$FIX/llama-v5-unknown-key" --out "$WORK/runs/unknown"
expect_in "attn_logit_softcapping = 30.0"
expect_in "--allow-unknown-keys"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
[[ ! -e runs/unknown ]] || fail "a refused import left a run"
expect_exit 0 "$ROPELAB" import-hf "$FIX/llama-v5-unknown-key" --out "$WORK/runs/unknown" \
  --allow-unknown-keys
expect_in "ignored (--allow-unknown-keys): attn_logit_softcapping = 30.0"
expect_exit 2 "$ROPELAB" import-hf "$FIX/llama-v4-v5-disagree" --out "$WORK/runs/disagree"
expect_in "rope_theta = 10000.0 and rope_parameters.rope_theta = 500000.0 disagree"
# The export: transformers 5's form by default, 4's with --hf-v4; both import as the same model.
expect_exit 0 "$ROPELAB" export runs/v5 --format hf --out "$WORK/v5-hf"
grep -q '"rope_parameters"' v5-hf/config.json || fail "no rope_parameters in the v5 export"
expect_exit 0 "$ROPELAB" export runs/v5 --format hf --hf-v4 --out "$WORK/v4-hf"
grep -q '"rope_scaling"' v4-hf/config.json || fail "no rope_scaling in the v4 export"
! grep -q '"rope_parameters"' v4-hf/config.json || fail "rope_parameters in the v4 export"
expect_exit 0 "$ROPELAB" import-hf v4-hf --out "$WORK/runs/v4-again"
diff <(sed -n '/^model:/,/^[a-z]/p' runs/v5/config.yaml) \
  <(sed -n '/^model:/,/^[a-z]/p' runs/v4-again/config.yaml) || fail "the v4 export changed the model"

# Qwen3 (QK-norm; heads 16 wide in a model 32 wide) with its byte-level BPE tokenizer: imported,
# fine-tuned on bible-en through task.init_from, exported as Qwen3ForCausalLM and imported again:
# the same loss. Its next-token NLL and logits on given ids (eval --ids).
expect_exit 0 "$ROPELAB" import-hf "$FIX/qwen3-bpe" --out "$WORK/runs/qwen3"
expect_in "imported Qwen3ForCausalLM"
cat >qwen3-ft.yaml <<YAML
inherit: $WORK/runs/qwen3/config.yaml
run: {name: qwen3-ft, out_dir: $WORK/runs, seed: 5, threads: 2}
data: {source: bible-en, prepared_dir: $WORK/prep}
task: {type: clm, seq_len: 16, init_from: $WORK/runs/qwen3}
train: {lr: 0.001, max_steps: 20, batch_size: 8, eval_every: 10, eval_batches: 4,
        log_every: 10, checkpoint_every: 10, schedule: {type: linear, warmup: 2}}
YAML
expect_exit 0 "$ROPELAB" train qwen3-ft.yaml
expect_in "backbone from $WORK/runs/qwen3: loaded"
expect_exit 0 "$ROPELAB" eval runs/qwen3-ft --no-save
tuned=$(grep -E '^ +acc .* loss ' <<<"$OUT") || fail "no loss in: $OUT"
expect_exit 0 "$ROPELAB" export runs/qwen3-ft --format hf --out "$WORK/qwen3-hf"
expect_in "exported Qwen3ForCausalLM"
grep -q '"head_dim": 16' qwen3-hf/config.json || fail "the export lost head_dim"
[[ -f qwen3-hf/tokenizer.json ]] || fail "the export lacks tokenizer.json"
expect_exit 0 "$ROPELAB" import-hf qwen3-hf --out "$WORK/runs/qwen3-again" data.source=bible-en \
  data.prepared_dir="$WORK/prep" task.seq_len=16
expect_exit 0 "$ROPELAB" prepare runs/qwen3-again/config.yaml
expect_exit 0 "$ROPELAB" eval runs/qwen3-again --no-save
[[ $(grep -E '^ +acc .* loss ' <<<"$OUT") == "$tuned" ]] || fail "the round trip changed the model: $tuned vs $OUT"
# The imported model's long-context evaluation, and its context extended through init_from.
expect_exit 0 "$ROPELAB" perplexity runs/qwen3-again --split valid --windows 16,32 --stride 8 \
  --doc-tokens 32 --documents 4 --no-save
expect_in "the first 32 tokens of 4 of"
expect_exit 0 "$ROPELAB" passkey runs/qwen3 --lengths 256 --depths 0.5 --trials 2 --no-save
expect_in "zero-shot passkey accuracy"
expect_exit 0 "$ROPELAB" train qwen3-ft.yaml run.name=qwen3-yarn task.seq_len=32 \
  'model.position.scaling={type: yarn, factor: 2, original_len: 16}'
expect_in "positions changed: yarn x2.0 from $WORK/runs/qwen3"
printf '[5, 17, 42, 9, 300]\n{"input_ids": [7, 8, 9]}\n' >ids.jsonl
expect_exit 0 "$ROPELAB" eval runs/qwen3 --ids ids.jsonl --logits "$WORK/qwen3-logits.h5"
expect_in "mean NLL"
expect_in "over 6 predicted tokens (2 sequences)"
[[ -f qwen3-logits.h5 ]] || fail "no logits written"
plain=$(grep "^mean NLL" <<<"$OUT")
expect_exit 0 "$ROPELAB" eval runs/qwen3 --ids ids.jsonl --rope-scaling linear:4
[[ $(grep "^mean NLL" <<<"$OUT") != "$plain" ]] || fail "--rope-scaling changed nothing: $OUT"
expect_exit 2 "$ROPELAB" eval runs/qwen3 --ids ids.jsonl --logits "$WORK/qwen3-logits.h5"
expect_in "already exists"
expect_exit 2 "$ROPELAB" eval runs/qwen3 --logits "$WORK/other.h5"
expect_in "--ids"
printf '[5, 99999]\n' >bad-ids.jsonl
expect_exit 2 "$ROPELAB" eval runs/qwen3 --ids bad-ids.jsonl
expect_in "bad-ids.jsonl:1: id 99999 is outside"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"

# GPT-NeoX with Pythia's keys (RoPE on 4 of 16 channels, a parallel residual), imported: its
# context doubled with YaRN through task.init_from, fine-tuned on bible-en, measured on windows
# up to the new length.
expect_exit 0 "$ROPELAB" import-hf "$FIX/gpt-neox" --out "$WORK/runs/neox-hf"
expect_in "imported GPTNeoXForCausalLM"
cat >neox-ft.yaml <<YAML
inherit: $WORK/runs/neox-hf/config.yaml
run: {name: neox-yarn, out_dir: $WORK/runs, seed: 5, threads: 2}
data: {source: bible-en, prepared_dir: $WORK/prep}
task: {type: clm, seq_len: 96, init_from: $WORK/runs/neox-hf}
model: {position: {scaling: {type: yarn, factor: 2, original_len: 48}}}
train: {lr: 0.001, max_steps: 6, batch_size: 4, eval_every: 0, log_every: 3,
        checkpoint_every: 6, schedule: {type: linear, warmup: 1}}
YAML
expect_exit 0 "$ROPELAB" train neox-ft.yaml
expect_in "positions changed: yarn x2.0 from $WORK/runs/neox-hf"
expect_exit 0 "$ROPELAB" perplexity runs/neox-yarn --split valid --windows 48,96 --stride 24 \
  --doc-tokens 96 --documents 2 --no-save
expect_in "the first 96 tokens of 2 of"

# A damaged config.json: one line naming the file.
mkdir bad && cp "$FIX"/roformer-mlm/* bad/ && echo '{"architectures": ["RoFormerForMaskedLM"],' >bad/config.json
expect_exit 2 "$ROPELAB" import-hf bad --out "$WORK/runs/bad"
expect_in "bad/config.json"
[[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
echo "hf_import: ok"
