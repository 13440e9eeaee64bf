# Translation through the real CLI on a tiny parallel corpus: prepare -> train (validation
# BLEU, checkpoints) -> translate -> average -> translate the average -> bleu (TER, chrF++,
# sentence scores, paired tests) -> compare's paired tests on the test split, and the bad
# inputs: mismatched --ref/--hyp, an empty or invalid-UTF-8 source, a run that is not a
# translation model. Bad input exits 2 with one line and leaves no output file.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

python3 - <<'PY'
import random
random.seed(4)
en = "the a man woman dog sees likes has big small red house".split()
es = "el un hombre mujer perro ve gusta tiene grande pequeno rojo casa".split()
d = dict(zip(en, es))
def pairs(n, f_en, f_es):
    with open(f_en, "w") as a, open(f_es, "w") as b:
        for _ in range(n):
            s = [random.choice(en) for _ in range(random.randint(3, 7))]
            a.write(" ".join(s) + "\n"); b.write(" ".join(d[w] for w in s) + "\n")
pairs(400, "train.en", "train.es"); pairs(40, "valid.en", "valid.es"); pairs(20, "test.en", "test.es")
PY
cat >mt.yaml <<YAML
run: {name: mt, out_dir: $WORK/runs, seed: 5, threads: 2}
data: {source: parallel, train: $WORK/train, valid: $WORK/valid, test: $WORK/test,
       source_suffix: en, target_suffix: es, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 64}}
task: {type: translation, seq_len: 24, label_smoothing: 0.1, max_tokens: 256, beam: 3,
       valid_bleu_sentences: 20, best_by: bleu}
model: {arch: encdec, d_model: 32, n_layers: 1, n_decoder_layers: 1, n_heads: 2, d_ff: 64,
        dropout: 0.0, scale_embeddings: true, position: {type: rope}}
train: {optimizer: adam, lr: 0.003, max_steps: 24, eval_every: 12, eval_batches: 4,
        checkpoint_every: 6, keep_last: 5, log_every: 6, schedule: {type: inverse_sqrt, warmup: 4}}
YAML

expect_exit 0 "$ROPELAB" train mt.yaml
R=runs/mt
grep -q '"bleu"' $R/metrics.jsonl || fail "no validation BLEU in metrics.jsonl"
h5ls $R/metrics.h5/valid | grep -q chrf || fail "metrics.h5 lacks valid/chrf"
ls $R/checkpoints | grep -c step- | grep -qx 4 || fail "expected 4 kept checkpoints: $(ls $R/checkpoints)"

# translate: one line out per line in, in order; stdin and --input/--out agree.
expect_exit 0 "$ROPELAB" translate $R --beam 2 --out hyp.es --input test.en
[[ $(wc -l <hyp.es) -eq 20 ]] || fail "hyp.es has $(wc -l <hyp.es) lines, want 20"
"$ROPELAB" translate $R --beam 2 <test.en >hyp-stdin.es 2>/dev/null
cmp -s hyp.es hyp-stdin.es || fail "stdin and --input translations differ"
"$ROPELAB" translate $R --beam 2 --no-cache <test.en >hyp-nocache.es 2>/dev/null
cmp -s hyp.es hyp-nocache.es || fail "decoding without the cache differs"

# average the last 3 checkpoints into a new run directory, and use it.
expect_exit 0 "$ROPELAB" average $R --last 3 --out avg
expect_in "averaged 3 checkpoints"
[[ -s avg/config.yaml ]] && ls avg/checkpoints/*/MANIFEST.json >/dev/null || fail "average layout"
expect_exit 2 "$ROPELAB" average $R --last 3 --out avg
expect_in "already exists"
expect_exit 0 "$ROPELAB" translate avg --input test.en --out hyp-avg.es
[[ $(wc -l <hyp-avg.es) -eq 20 ]] || fail "averaged translation line count"

# bleu: sacreBLEU's text output with signatures; test-split BLEU through eval.
expect_exit 0 "$ROPELAB" bleu --ref test.es --hyp hyp.es
expect_in "BLEU|nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x = "
expect_in "chrF2|nrefs:1|"
expect_exit 0 "$ROPELAB" bleu --ref test.es --ref test.es --hyp hyp.es
expect_in "BLEU|nrefs:2|"
expect_exit 0 "$ROPELAB" eval $R --split test
expect_in "bleu"
grep -q '"chrf"' $R/eval-test.json || fail "eval-test.json lacks chrf"
T=$R/predictions/test
[[ $(wc -l <$T/translations.txt) -eq 20 && $(wc -l <$T/references.txt) -eq 20 ]] ||
  fail "eval --split test did not keep the 20 test translations and references"

# TER, chrF++, sentence scores; paired tests between two systems (the first is the baseline).
expect_exit 0 "$ROPELAB" bleu --ref test.es --hyp hyp.es -m ter,chrf --chrf-word-order 2
expect_in "TER|nrefs:1|case:lc|tok:tercom|norm:no|punct:yes|asian:no|version:2.x = "
expect_in "chrF2++|nrefs:1|case:mixed|eff:yes|nc:6|nw:2|space:no|version:2.x = "
expect_not_in "BLEU|"
expect_exit 0 "$ROPELAB" bleu --ref test.es --hyp hyp.es --sentence-level -m bleu
[[ $(grep -c '^BLEU|nrefs:1|case:mixed|eff:yes|' <<<"$OUT") -eq 20 ]] ||
  fail "--sentence-level: want 20 BLEU lines with eff:yes. Output:
$OUT"
expect_exit 0 "$ROPELAB" bleu --ref test.es --hyp hyp.es --hyp hyp-avg.es --paired-bs-n 200 \
  --paired-ar-n 500
expect_in "baseline: hyp.es"
expect_in "p (bs)"
expect_in "p (ar)"
expect_in "BLEU|nrefs:1|bs:200|seed:12345|case:mixed|eff:no|tok:13a|smooth:exp|version:2.x"
expect_in "chrF2|nrefs:1|ar:500|seed:12345|"
expect_exit 0 env SACREBLEU_SEED=7 "$ROPELAB" bleu --ref test.es --hyp hyp.es --hyp hyp-avg.es \
  --paired bs --paired-bs-n 100 -m bleu
expect_in "BLEU|nrefs:1|bs:100|seed:7|"
expect_not_in "p (ar)"
for bad in "-m meteor" "--tokenize ja-mecab" "--chrf-word-order 5" "--paired xy" \
           "--paired-seed none"; do
  # shellcheck disable=SC2086
  expect_exit 2 "$ROPELAB" bleu --ref test.es --hyp hyp.es $bad
  [[ $(wc -l <<<"$OUT") -eq 1 ]] || fail "bleu $bad: want one line. Output:
$OUT"
done
expect_exit 2 "$ROPELAB" bleu --ref test.es --hyp hyp.es --hyp hyp-avg.es --sentence-level
expect_in "give one --hyp file"

# Separate vocabularies: one SentencePiece model per side, the encoder with its own embeddings.
expect_exit 0 "$ROPELAB" train mt.yaml run.name=mt-sep data.tokenizer.joint=false \
  train.max_steps=6 train.eval_every=6 train.checkpoint_every=6
ls prep/*/spm64-bpe-separate/tokenizer-target.model >/dev/null || fail "no target tokenizer"
expect_exit 0 "$ROPELAB" translate runs/mt-sep --input test.en --out hyp-sep.es
[[ $(wc -l <hyp-sep.es) -eq 20 ]] || fail "hyp-sep.es has $(wc -l <hyp-sep.es) lines, want 20"
expect_exit 0 "$ROPELAB" export runs/mt-sep --out sep.h5
h5ls -r sep.h5 | grep -q "backbone/src_emb/weight" || fail "no separate source embeddings"

# compare: translation runs with test translations get paired tests against the first run.
expect_exit 0 "$ROPELAB" train mt.yaml run.name=mt-sin model.position.type=sinusoidal \
  train.max_steps=6 train.eval_every=6 train.checkpoint_every=6
expect_exit 0 "$ROPELAB" eval runs/mt-sin --split test
expect_exit 0 "$ROPELAB" compare $R runs/mt-sin runs/mt-sep --out cmp --no-plots
expect_in "## Paired significance on the test split"
expect_in "| baseline: mt |"
expect_in "| mt-sin |"
expect_in "left out: \`mt-sep\`: no test translations"
grep -qF "## Paired significance on the test split" cmp/compare.md || fail "compare.md lacks the paired tests"

# ablate with test: true: each variant's test translations, seeds pooled, against the baseline.
cat >mt-exp.yaml <<YAML
name: mt-exp
base: mt.yaml
out_dir: $WORK/runs
test: true
baseline: sinusoidal
seeds: [1, 2]
set: [train.max_steps=4, train.eval_every=4, train.checkpoint_every=4]
variants:
  - name: rope
    set: [model.position.type=rope]
  - name: sinusoidal
    set: [model.position.type=sinusoidal]
YAML
expect_exit 0 "$ROPELAB" ablate mt-exp.yaml --no-plots
expect_in "Each system pools its 2 runs (seeds), paired seed by seed with the baseline's."
expect_in "| baseline: sinusoidal |"
expect_in "40 segments, scored as sacreBLEU."
grep -qF "## Paired significance on the test split" runs/mt-exp/compare.md ||
  fail "the ablation's compare.md lacks the paired tests"
# results.json: every run with its best validation BLEU and its test metrics (eval-test.json).
/usr/bin/python3 - runs/mt-exp <<'PY' || fail "the ablation's results.json"
import json, sys
d = sys.argv[1]
j = json.load(open(d + "/results.json"))
assert j["experiment"] == "mt-exp" and j["baseline"] == "sinusoidal", j
runs = {(r["variant"], r["seed"]): r for r in j["runs"]}
assert sorted(runs) == [("rope", 1), ("rope", 2), ("sinusoidal", 1), ("sinusoidal", 2)], runs
for r in runs.values():
    assert r["metric"] == "bleu" and r["higher"] is True and r["value"] >= 0, r
    t = json.load(open(r["run_dir"] + "/eval-test.json"))["metrics"]
    assert r["test"] == t and "bleu" in t and "chrf" in t, (r, t)
PY

# Bad input: exit 2, one line naming the problem, no output file.
head -n 5 test.es >short.es
expect_exit 2 "$ROPELAB" bleu --ref short.es --hyp hyp.es
expect_in "short.es: has 5 lines but"
: >empty.en
expect_exit 2 "$ROPELAB" translate $R --input empty.en --out never1.es
expect_in "no input lines"
printf 'fine\nbad \xff byte\n' >bad.en
expect_exit 2 "$ROPELAB" translate $R --input bad.en --out never2.es
expect_in "bad.en:2: invalid UTF-8"
[[ ! -e never1.es && ! -e never2.es ]] || fail "a failed translate left an output file"
cat >lm.yaml <<YAML
run: {name: lm, out_dir: $WORK/runs, threads: 2}
data: {source: text, train: $WORK/train.en, prepared_dir: $WORK/prep, tokenizer: {type: byte}}
task: {type: clm, seq_len: 16}
model: {d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32}
train: {max_steps: 2, batch_size: 2, eval_every: 0, schedule: {warmup: 1}}
YAML
expect_exit 0 "$ROPELAB" train lm.yaml
expect_exit 2 "$ROPELAB" translate runs/lm --input test.en --out never3.es
expect_in "is not a translation model"
[[ ! -e never3.es ]] || fail "translate of a non-translation run left a file"

# SIGTERM during translate: exit 143, one line, and no output file (it would be partial).
for _ in $(seq 1500); do cat test.en; done >many.en
signal_when TERM tr.log "translating 30000 lines" 0.5 \
  "$ROPELAB" translate $R --beam 4 --input many.en --out never4.es
[[ $CODE -eq 143 ]] || fail "SIGTERM during translate: exit $CODE: $(tail -3 tr.log)"
grep -q "^stopped: translate stopped by SIGTERM; nothing written" tr.log || fail "translate stop: $(tail -3 tr.log)"
[[ ! -e never4.es ]] || fail "a stopped translate left an output file"
echo "translation e2e: OK"
