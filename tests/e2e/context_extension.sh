# Context extension on trained models through the real CLI: a RoPE run scaled (YaRN) and
# fine-tuned at 4x its length through task.init_from, with the change recorded and shown by
# compare; refusals that name their key; long documents (data.document_separator); sliding-window
# perplexity, zero-shot passkey and eval-time longrope and base changes; a three-stage
# progressive extension from one experiment file, killed during its second stage and resumed.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

# Long documents: 12 sentences each, separated by '---' lines.
word_corpus 3 1200 | awk 'NR > 1 && (NR - 1) % 12 == 0 {print "---"} {print}' >train.txt
word_corpus 4 240 | awk 'NR > 1 && (NR - 1) % 40 == 0 {print "---"} {print}' >valid.txt
cat >tiny.yaml <<YAML
run: {name: ref, out_dir: $WORK/runs, seed: 5, threads: 2}
data: {source: text, train: $WORK/train.txt, valid: $WORK/valid.txt, prepared_dir: $WORK/prep,
       document_separator: "---", tokenizer: {type: byte}}
task: {type: clm, seq_len: 32}
model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, dropout: 0.0, position: {type: rope}}
train: {max_steps: 8, batch_size: 4, lr: 0.003, eval_every: 8, eval_batches: 2,
        checkpoint_every: 8, log_every: 4, schedule: {type: cosine, warmup: 2}}
YAML
expect_exit 0 "$ROPELAB" train tiny.yaml

# The command the issue found refused: it trains, and records what changed and from where.
expect_exit 0 "$ROPELAB" train tiny.yaml run.name=ext task.init_from=runs/ref task.seq_len=128 \
  'model.position.scaling={type: yarn, factor: 4, original_len: 32}'
expect_in "positions changed: yarn x4.0 from runs/ref (step 8)"
grep -q '"key": "model.position.scaling.type"' runs/ext/init_from.json ||
  fail "init_from.json lacks the change: $(cat runs/ext/init_from.json)"
expect_exit 0 "$ROPELAB" compare runs/ref runs/ext --out cmp --no-plots
expect_in "rope; yarn x4.0 from runs/ref (step 8)"
# DroPE (no positions after pretraining) and a base change train too.
expect_exit 0 "$ROPELAB" train tiny.yaml run.name=drope task.init_from=runs/ref \
  model.position.type=none
expect_exit 0 "$ROPELAB" train tiny.yaml run.name=base task.init_from=runs/ref \
  model.position.base=500000
# Anything else stays strict, in one line naming the key; nothing is written.
expect_exit 2 "$ROPELAB" train tiny.yaml run.name=wide task.init_from=runs/ref model.d_ff=128
expect_in "model.d_ff: 64 (pretrained) vs 128"
[[ $(grep -c . <<<"$OUT") -eq 1 ]] || fail "more than one line: $OUT"
expect_exit 2 "$ROPELAB" train tiny.yaml run.name=t5 task.init_from=runs/ref model.position.type=t5
expect_in "adds parameters the pretrained model lacks"
[[ ! -e runs/wide && ! -e runs/t5 ]] || fail "a refused run left a directory"

# The documents are long: 12 sentences of 5-20 words, a few hundred bytes each.
expect_exit 0 "$ROPELAB" perplexity runs/ref --split valid --windows 32,64,128 --stride 16 \
  --doc-tokens 128
expect_in "sliding-window perplexity, stride 16, the first 128 tokens of"
[[ -s runs/ref/perplexity-valid.json ]] || fail "no perplexity-valid.json"
table=$(grep -E '^ +(32|64|128) ' <<<"$OUT")
# The same documents from the text file, tokenized by the run's tokenizer: the same table.
expect_exit 0 "$ROPELAB" perplexity runs/ref --text valid.txt --separator=--- --windows 32,64,128 \
  --stride 16 --doc-tokens 128
[[ "$(grep -E '^ +(32|64|128) ' <<<"$OUT")" == "$table" ]] ||
  fail "--text read other documents than the split: $table vs $OUT"
[[ -s runs/ref/perplexity-text-valid.json ]] || fail "no perplexity-text-valid.json"
expect_exit 2 "$ROPELAB" perplexity runs/ref --separator=--- --no-save
expect_in "give --text too"
expect_exit 0 "$ROPELAB" perplexity runs/ref --split valid --windows 32,128 --stride 16 \
  --doc-tokens 128 --rope-scaling longrope:4 --no-save
expect_exit 0 "$ROPELAB" perplexity runs/ref --split valid --windows 32,128 --stride 16 \
  --doc-tokens 128 --rope-scaling base:40000 --no-save
expect_exit 2 "$ROPELAB" perplexity runs/ref --split valid --windows 32 --stride 32
expect_in "must be less than the smallest window"
expect_exit 2 "$ROPELAB" perplexity runs/ref --split valid --windows 32 --doc-tokens 100000
expect_in "no document of split 'valid' has 100000 tokens"
expect_exit 0 "$ROPELAB" passkey runs/ref --lengths 320,512 --depths 0,1 --trials 2
expect_in "zero-shot passkey accuracy"
[[ -s runs/ref/passkey.json ]] || fail "no passkey.json"
expect_exit 0 "$ROPELAB" eval runs/ref --split valid --rope-scaling longrope:4 --no-save
expect_exit 2 "$ROPELAB" eval runs/ref --split valid --rope-scaling base:1 --no-save
expect_in "the base must be a number >= 2"

# A three-stage progressive extension 32 -> 64 -> 128, killed in stage 2, resumed.
cat >stages.yaml <<YAML
name: stages
base: tiny.yaml
out_dir: $WORK/runs
set: [train.max_steps=400, train.checkpoint_every=50, train.eval_every=100]
eval_windows: [32, 64, 128]
eval_stride: 16
eval_doc_tokens: 128
eval_passkey: 1
variants:
  - {name: s128, from: s64, set: [task.seq_len=128,
     "model.position.scaling={type: yarn, factor: 4, original_len: 32}"]}
  - {name: s32}
  - {name: s64, from: s32, set: [task.seq_len=64,
     "model.position.scaling={type: yarn, factor: 2, original_len: 32}"]}
YAML
signal_when TERM ablate.log "=== run 2/3: s64" 1 "$ROPELAB" ablate stages.yaml --no-plots
[[ $CODE -ne 0 ]] || fail "the ablation was not stopped: $(tail -3 ablate.log)"
[[ -e runs/stages/s32/checkpoints ]] || fail "stage 1 did not finish before the kill"
expect_exit 0 "$ROPELAB" ablate stages.yaml --no-plots
expect_in "=== run 3/3: s128"
grep -q '"source": ".*runs/stages/s64"' runs/stages/s128/init_from.json ||
  fail "stage 3 did not start from stage 2: $(cat runs/stages/s128/init_from.json)"
grep -q '"source": ".*runs/stages/s32"' runs/stages/s64/init_from.json ||
  fail "stage 2 did not start from stage 1"
expect_in "scaling.factor 2.0 -> 4.0 from"
# The stages' sliding-window perplexity, one row each, in perplexity.md and compare.md.
for v in s32 s64 s128; do
  grep -q "^| $v |" runs/stages/perplexity.md || fail "perplexity.md lacks $v: $(cat runs/stages/perplexity.md)"
done
grep -q "Sliding-window perplexity" runs/stages/compare.md || fail "compare.md lacks the perplexity"
# The passkey prompt needs more than 128 of these tokens: every cell n/a, the section there.
grep -q "^| s128 | n/a | n/a | n/a |" runs/stages/perplexity.md ||
  fail "perplexity.md lacks the passkey rows: $(cat runs/stages/perplexity.md)"
grep -v eval_windows stages.yaml | sed 's/^eval_stride: 16$/eval_stride: 0/' >bad-passkey.yaml
expect_exit 2 "$ROPELAB" ablate bad-passkey.yaml --no-plots
expect_in "eval_passkey: needs eval_windows"
sed 's/eval_stride: 16/eval_stride: 32/' stages.yaml >bad-stride.yaml
expect_exit 2 "$ROPELAB" ablate bad-stride.yaml --no-plots
expect_in "eval_stride: must be less than the smallest of eval_windows"
echo "context extension: ok"
