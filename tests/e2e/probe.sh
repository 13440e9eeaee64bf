# The length-generalisation card end to end: a 2-seed ablation of two position modules on a
# synthetic task (prepared from its generator, trained, probed), its card.md / card.json /
# sweep.md checked for structure and against the per-run probe.json numbers; `ropelab probe`
# run by hand on one run; the challengers' probes trained and probed; bad input gets one-line
# errors.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

cat >tiny.yaml <<YAML
run: {name: copy, seed: 1, threads: 1, out_dir: $WORK/runs}
task: {type: answer, seq_len: 32}
data: {source: synthetic-copy, prepared_dir: $WORK/prep,
       synthetic: {size: 4, train_examples: 400, valid_examples: 32, test_examples: 32}}
model: {arch: decoder, d_model: 32, n_heads: 2, n_layers: 2, d_ff: 64, dropout: 0.0,
        position: {type: rope}}
train: {max_steps: 30, batch_size: 16, lr: 0.003, eval_every: 15, eval_batches: 2,
        checkpoint_every: 30, log_every: 10, schedule: {type: constant, warmup: 0}}
YAML

cat >card.yaml <<YAML
name: card
base: tiny.yaml
out_dir: $WORK/runs
seeds: [1, 2]
baseline: rope
probe: true
probe_examples: 24
variants:
  - {name: rope, set: [model.position.type=rope]}
  - {name: learned, set: [model.position.type=learned, model.position.max_len=32]}
YAML
expect_exit 0 "$ROPELAB" ablate --no-plots card.yaml
expect_in "wrote $WORK/runs/card/card.md"
for r in rope.seed1 rope.seed2 learned.seed1 learned.seed2; do
  [[ -s runs/card/$r/probe.json && -s runs/card/$r/probe.md ]] || fail "no probe of $r"
done
[[ -s prep/synthetic-copy/$(ls prep/synthetic-copy)/train.h5 ]] || fail "no prepared data"

/usr/bin/python3 - runs/card <<'PY' || fail "card structure and numbers"
import json, re, statistics, sys
d = sys.argv[1]
card = json.load(open(d + "/card.json"))
md = open(d + "/card.md").read()
assert len(card["entries"]) == 4, card
probes = {}
for v in ("rope", "learned"):
    for s in (1, 2):
        p = json.load(open(f"{d}/{v}.seed{s}/probe.json"))
        assert p["task"] == "synthetic-copy" and p["metric"] == "exact", p
        assert p["multipliers"] == [1, 2, 4, 8] and p["sizes"] == [4, 8, 16, 32], p
        assert all(x is None or 0 <= x <= 1 for x in p["value"]), p
        probes[(v, s)] = p["value"]
# learned (a 32-position table): 8x copies 32 letters, 67 tokens: n/a; rope reads every size.
assert probes[("learned", 1)][3] is None and probes[("learned", 1)][0] is not None, probes
assert all(x is not None for x in probes[("rope", 1)]), probes
for e in card["entries"]:
    assert e["value"] == probes[(e["variant"], e["seed"])], e
assert "### synthetic-copy (exact match, trained up to 4 symbols)" in md, md
assert "| variant | 1x (4) | 2x (8) | 4x (16) | 8x (32) |" in md, md
for v in ("rope", "learned"):
    row = re.search(r"^\| " + v + r" \| (.*)$", md, re.M).group(1).split(" | ")
    for k in range(4):
        vals = [probes[(v, s)][k] for s in (1, 2)]
        if vals[0] is None:
            assert row[k].startswith("n/a"), (v, k, row)
            continue
        m, sd = 100 * statistics.mean(vals), 100 * statistics.stdev(vals)
        want = f"{m:.1f} ± {sd:.1f}"
        assert row[k].startswith(want), (v, k, row, want)
sweep = open(d + "/sweep.md").read()
assert "## Seeds: 95% intervals and paired tests" in sweep, sweep
assert "exact (higher is better)" in sweep, sweep
comp = open(d + "/compare.md").read()
assert "## Length-generalisation card" in comp, comp
PY

# By hand, other multiples; the table and JSON of one run.
expect_exit 0 "$ROPELAB" probe runs/card/rope.seed1 --multipliers 1,3 --examples 8 --no-plots
expect_in "| exact match |"
expect_in "1x (4) | 3x (12)"
/usr/bin/python3 -c "
import json; p = json.load(open('runs/card/rope.seed1/probe.json'))
assert p['multipliers'] == [1, 3] and p['sizes'] == [4, 12], p
assert len(p['token_acc']) == 2 and all(0 <= x <= 1 for x in p['token_acc']), p" ||
  fail "probe --multipliers"

# With plots: the run's probe.png, and the card's plot from compare.
expect_exit 0 "$ROPELAB" probe runs/card/learned.seed1 --multipliers 1,2 --examples 4
[[ -s runs/card/learned.seed1/probe.png ]] || fail "no probe.png"
grep -qF "![probe](probe.png)" runs/card/learned.seed1/probe.md || fail "probe.md lacks its plot"
expect_exit 0 "$ROPELAB" compare runs/card/learned.seed1 runs/card/rope.seed1 --out cmp-plots
[[ -s cmp-plots/card.png ]] || fail "compare: no card.png"

# The challengers' probes train and probe; the needle tasks get the depth grid; the 2-D grid
# trains M-RoPE on its rows and columns.
for src in selective-copy counting flipflop niah niah-multikey vt grid; do
  size=8 seq=40 extra=()
  case $src in niah) size=40 seq=48 ;; niah-multikey) size=80 seq=88 ;; vt) size=60 seq=64 ;;
    grid) size=3 seq=40 extra=(model.position.type=mrope model.position.grid_width=8) ;; esac
  expect_exit 0 "$ROPELAB" train tiny.yaml run.name=ch-$src data.source=synthetic-$src \
    data.synthetic.size=$size task.seq_len=$seq train.max_steps=4 train.eval_every=4 \
    train.checkpoint_every=4 "${extra[@]}"
  expect_exit 0 "$ROPELAB" probe runs/ch-$src --multipliers 1,2 --examples 4 --no-plots
  expect_in "| exact match |"
  if [[ $src == niah* ]]; then
    expect_in "Exact match by the needle's depth (rows)"
  else
    expect_not_in "needle's depth"
  fi
done

# A text run: perplexity at 1x and 2x its training length.
cat >text.yaml <<YAML
run: {name: text, seed: 1, threads: 1, out_dir: $WORK/runs}
task: {type: clm, seq_len: 16}
data: {source: text, train: $WORK/t.txt, valid: $WORK/t.txt, prepared_dir: $WORK/prep,
       tokenizer: {type: byte}}
model: {arch: decoder, d_model: 16, n_heads: 2, n_layers: 1, d_ff: 32, position: {type: rope}}
train: {max_steps: 4, batch_size: 4, eval_every: 4, eval_batches: 1, checkpoint_every: 4,
        schedule: {type: constant, warmup: 0}}
YAML
for i in $(seq 200); do echo "line $i of a small text file for the probe"; done >t.txt
expect_exit 0 "$ROPELAB" train text.yaml
expect_exit 0 "$ROPELAB" probe runs/text --multipliers 1,2 --max-tokens 512 --no-plots
expect_in "| perplexity |"
expect_in "1x (16) | 2x (32)"
# compare sets the probed runs' cards side by side.
expect_exit 0 "$ROPELAB" compare --no-plots runs/text runs/card/rope.seed1 --out cmp
grep -qF "### bible-en" cmp/card.md && fail "wrong task name in the card"
grep -qF "### text (perplexity" cmp/card.md || fail "compare: no text card in $(cat cmp/card.md)"
grep -qF "### synthetic-copy (exact match" cmp/compare.md || fail "compare.md: no card"

# Bad input: one line, non-zero exit, nothing written.
expect_exit 2 "$ROPELAB" probe runs/card/rope.seed1 --multipliers 0,2
expect_in "--multipliers: '0' is not a whole number in [1, 1024]"
expect_exit 2 "$ROPELAB" probe "$WORK/nowhere"
expect_in "not a ropelab run"
expect_exit 2 "$ROPELAB" config tiny.yaml data.synthetic.size=20  # `config` checks it too
expect_in "shorter than the longest synthetic-copy example of size 20 (43 tokens)"
expect_exit 2 "$ROPELAB" train tiny.yaml data.synthetic.size=20
expect_in "task.seq_len"
expect_in "shorter than the longest synthetic-copy example of size 20 (43 tokens)"
expect_exit 2 "$ROPELAB" train tiny.yaml data.source=synthetic-mqar data.synthetic.size=200 task.seq_len=1000
expect_in "synthetic-mqar needs a size in [1, 128]"
echo OK
