# report.html (scripts/report_html.py) from `ablate` and `compare`, opened in headless Chromium by
# an independent driver (tests/e2e/report_check.py, the DevTools protocol over a pipe): every run
# has its toggle and its row in the tables, a toggle hides its curve and the pixels change, seed
# means draw one curve per variant, and the page makes no network request. `--no-plots` writes no
# report. Skips (77) where no headless Chromium is installed (bash scripts/setup.sh installs it).
source "$(dirname "$0")/lib.sh"
cd "$WORK"
command -v chromium-headless-shell >/dev/null || command -v chromium >/dev/null || {
  echo "skipped: no headless Chromium (chromium-headless-shell)"
  exit 77
}
CHECK=$ROPELAB_SRC/tests/e2e/report_check.py

word_corpus 1 400 >train.txt
head -n 80 train.txt >valid.txt
cat >tiny.yaml <<YAML
run: {name: tiny, out_dir: $WORK/runs, seed: 3, threads: 2, tensorboard: false}
data: {source: text, train: $WORK/train.txt, valid: $WORK/valid.txt, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 64}}
task: {type: clm, seq_len: 32}
model: {d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, dropout: 0.0, position: {type: rope}}
train: {max_steps: 8, batch_size: 4, lr: 0.003, eval_every: 4, eval_batches: 2,
        checkpoint_every: 8, log_every: 2, schedule: {type: cosine, warmup: 2}}
YAML
cat >abl.yaml <<YAML
name: abl
base: tiny.yaml
out_dir: $WORK/runs
baseline: rope
seeds: [1, 2]
variants:
  - {name: alibi, set: [model.position.type=alibi]}
  - {name: rope, set: [model.position.type=rope]}
  - {name: "t5 <b>", set: [model.position.type=t5]}
YAML
expect_exit 0 "$ROPELAB" ablate abl.yaml
expect_in "runs/abl/report.html"
runs=(alibi.seed1 alibi.seed2 rope.seed1 rope.seed2 "t5 <b>.seed1" "t5 <b>.seed2")
/usr/bin/python3 "$CHECK" runs/abl/report.html --runs "${runs[@]}" --screenshot shot.png ||
  fail "report_check on the ablation's report.html"
[[ -s shot.png ]] || fail "no screenshot"
# A run name is text, never markup: the variant "t5 <b>" is escaped in the page's HTML (the JSON
# data block, which the browser does not parse as HTML, holds it as it is).
grep -q '&lt;b&gt;\.seed1' runs/abl/report.html || fail "the tables lack the escaped run name"
! grep -v 'application/json' runs/abl/report.html | grep -q '<b>\.seed' ||
  fail "a run name went into the page as markup"

# compare writes one too; --no-plots writes none.
expect_exit 0 "$ROPELAB" compare runs/abl/rope.seed1 runs/abl/alibi.seed1 --out cmp
/usr/bin/python3 "$CHECK" cmp/report.html --runs rope.seed1 alibi.seed1 || fail "compare's report"
expect_exit 0 "$ROPELAB" compare runs/abl/rope.seed1 --out cmp2 --no-plots
[[ ! -e cmp2/report.html ]] || fail "--no-plots wrote report.html"
echo "e2e report: ok"
