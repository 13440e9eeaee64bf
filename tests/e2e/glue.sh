# GLUE-style fine-tuning through the real CLI: pretrain a tiny MLM -> fine-tune it on an SST-2
# layout task (init_from: key report, the pretraining tokenizer, GLUE metrics, best-by-metric)
# -> eval on dev and on the unlabeled test split (leaderboard prediction files); an STS-B
# regression from scratch (pearson/spearman); init_from a model of another width or position
# module exits 2 naming the difference.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

python3 - <<'PY'
import random
random.seed(7)
adj = "red blue green old new big small dark bright quiet".split()
noun = "house river dog king city road tree ship field door".split()
verb = "sees finds likes keeps builds paints opens follows".split()
def sent():
    return f"the {random.choice(adj)} {random.choice(noun)} {random.choice(verb)} the {random.choice(adj)} {random.choice(noun)}"
with open("corpus.txt", "w") as f:
    for _ in range(300):
        f.write(" . ".join(sent() for _ in range(4)) + "\n")
import os
os.makedirs("sst", exist_ok=True)
def sst(path, n, labeled=True):
    with open(path, "w") as f:
        f.write("sentence\tlabel\n" if labeled else "index\tsentence\n")
        for i in range(n):
            y = random.randint(0, 1)  # balanced: is the first noun's colour red (1) or blue (0)?
            s = f"the {'red' if y else 'blue'} {random.choice(noun)} {random.choice(verb)} the {random.choice(adj)} {random.choice(noun)}"
            f.write(f"{s}\t{y}\n" if labeled else f"{i}\t{s}\n")
sst("sst/train.tsv", 200); sst("sst/dev.tsv", 40); sst("sst/test.tsv", 25, labeled=False)
os.makedirs("sts", exist_ok=True)
def sts(path, n):
    with open(path, "w") as f:
        f.write("index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore\n")
        for i in range(n):
            a, b = sent(), sent()
            score = 5.0 * len(set(a.split()) & set(b.split())) / len(set(a.split()))
            f.write(f"{i}\tx\tx\t2020\t{i}\tx\tx\t{a}\t{b}\t{score:.2f}\n")
sts("sts/train.tsv", 120); sts("sts/dev.tsv", 30)
PY

cat >mlm.yaml <<YAML
run: {name: mlm, out_dir: $WORK/runs, seed: 3, threads: 2}
data: {source: text, train: $WORK/corpus.txt, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 80}}
task: {type: mlm, seq_len: 32}
model: {arch: encoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, position: {type: rope}}
train: {max_steps: 12, batch_size: 8, eval_every: 0, log_every: 6, schedule: {warmup: 2}}
YAML
expect_exit 0 "$ROPELAB" train mlm.yaml

cat >sst.yaml <<YAML
run: {name: sst, out_dir: $WORK/runs, seed: 4, threads: 2}
data: {source: glue, train: $WORK/sst, glue_task: SST-2, prepared_dir: $WORK/prep}
task: {type: glue, seq_len: 32, init_from: $WORK/runs/mlm}
model: {arch: encoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, dropout: 0.1,
        position: {type: rope}}
train: {lr: 0.003, max_steps: 60, batch_size: 16, eval_every: 30, log_every: 10,
        schedule: {type: linear, warmup: 6}}
YAML
expect_exit 0 "$ROPELAB" train sst.yaml
expect_in "backbone from $WORK/runs/mlm: loaded"
expect_in "missing (left as initialised): head.classifier.bias"
expect_in "unexpected (ignored): head."
R=runs/sst
grep -q "tokenizer:.*model: $WORK/prep/text-corpus.txt-" $R/config.yaml ||
  grep -A6 "tokenizer:" $R/config.yaml | grep -q "prep/text-corpus" ||
  fail "the fine-tuning run does not use the pretraining tokenizer: $(grep -A6 tokenizer: $R/config.yaml)"
grep '"split":"valid"' $R/metrics.jsonl | tail -1 | grep -q '"acc"' || fail "no valid acc logged"
acc=$(grep '"split":"valid"' $R/metrics.jsonl | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["acc"])')
python3 -c "import sys; sys.exit(0 if $acc >= 0.8 else 1)" || fail "dev accuracy $acc < 0.8 on a one-word rule"

expect_exit 0 "$ROPELAB" eval $R --split valid
expect_in "acc"
P=$R/predictions/valid/SST-2.tsv
[[ $(head -1 $P) == $'index\tprediction' ]] || fail "prediction header: $(head -1 $P)"
[[ $(wc -l <$P) -eq 41 ]] || fail "$P has $(wc -l <$P) lines, want 41"
# The file's accuracy equals the reported one.
python3 - "$P" sst/dev.tsv "$R/eval-valid.json" <<'PY' || fail "prediction file disagrees with eval"
import json, sys
pred = [l.split("\t")[1].strip() for l in open(sys.argv[1]).readlines()[1:]]
gold = [l.rstrip("\n").split("\t")[1] for l in open(sys.argv[2]).readlines()[1:]]
acc = sum(p == g for p, g in zip(pred, gold)) / len(gold)
rep = json.load(open(sys.argv[3]))["metrics"]["acc"]
sys.exit(0 if abs(acc - rep) < 1e-9 else 1)
PY
expect_exit 0 "$ROPELAB" eval $R --split test
expect_in "unlabeled split: no metrics"
[[ $(wc -l <$R/predictions/test/SST-2.tsv) -eq 26 ]] || fail "test predictions line count"

# Regression from scratch: STS-B layout, pearson and spearman.
cat >sts.yaml <<YAML
run: {name: sts, out_dir: $WORK/runs, seed: 4, threads: 2}
data: {source: glue, train: $WORK/sts, glue_task: STS-B, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 80}}
task: {type: glue, seq_len: 40}
model: {arch: encoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, position: {type: rope}}
train: {lr: 0.003, max_steps: 20, batch_size: 16, eval_every: 10, log_every: 10,
        schedule: {type: linear, warmup: 2}}
YAML
expect_exit 0 "$ROPELAB" train sts.yaml
expect_exit 0 "$ROPELAB" eval runs/sts --split valid
expect_in "spearman"
expect_in "pearson"
[[ $(wc -l <runs/sts/predictions/valid/STS-B.tsv) -eq 31 ]] || fail "STS-B predictions"

# Another width or position module than the pretrained backbone: exit 2, naming the keys.
expect_exit 2 "$ROPELAB" train sst.yaml run.name=wide model.d_model=48 model.d_ff=96
expect_in "model.d_model: 32 (pretrained) vs 48"
expect_exit 2 "$ROPELAB" train sst.yaml run.name=t5 model.position.type=t5
expect_in "model.position.type: rope (pretrained) vs t5"
[[ $(echo "$OUT" | wc -l) -eq 1 ]] || fail "the error is not one line: $OUT"
# A TSV layout the config describes (columns by header name, label names of our own), and a
# ranking layout (A, B, C) with task rank, both through the CLI.
python3 - <<'PY'
import os, random
random.seed(9)
os.makedirs("mine", exist_ok=True)
for split, n in (("train", 160), ("dev", 40)):
    with open(f"mine/{split}.tsv", "w") as f:
        f.write("id\tverdict\ttext\n")
        for i in range(n):
            y = random.randint(0, 1)
            f.write(f"{i}\t{'good' if y else 'bad'}\tthe {'red' if y else 'blue'} dog sees the city\n")
os.makedirs("scm", exist_ok=True)
words = "red blue green old new big small dark bright quiet house river dog king".split()
other = "sun moon star rain snow wind cloud stone sand wave leaf root seed hill".split()
for split, n in (("train", 160), ("dev", 40)):
    with open(f"scm/{split}.tsv", "w") as f:
        f.write("A\tB\tC\tlabel\n")
        for i in range(n):
            a = [random.choice(words) for _ in range(6)]
            # The closer text repeats A; the other is drawn from other words.
            near, far = list(a), [random.choice(other) for _ in range(6)]
            y = random.randint(0, 1)
            b, c = (far, near) if y else (near, far)
            f.write(f"{' '.join(a)}\t{' '.join(b)}\t{' '.join(c)}\t{'C' if y else 'B'}\n")
PY
cat >mine.yaml <<YAML
run: {name: mine, out_dir: $WORK/runs, seed: 4, threads: 2}
data: {source: glue, train: $WORK/mine, prepared_dir: $WORK/prep,
       tsv: {name: Verdict, a: text, label: verdict, labels: [bad, good]},
       tokenizer: {type: spm, vocab_size: 60}}
task: {type: glue, seq_len: 16}
model: {arch: encoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, position: {type: rope}}
train: {lr: 0.003, max_steps: 40, batch_size: 16, eval_every: 20, log_every: 10,
        schedule: {type: linear, warmup: 4}}
YAML
expect_exit 0 "$ROPELAB" train mine.yaml
expect_exit 0 "$ROPELAB" eval runs/mine --split valid
expect_in "mcc"
head -2 runs/mine/predictions/valid/Verdict.tsv | tail -1 | grep -qE $'^0\t(bad|good)$' ||
  fail "described layout predictions: $(head -2 runs/mine/predictions/valid/Verdict.tsv)"
expect_exit 2 "$ROPELAB" train mine.yaml run.name=mine2 data.tsv.a=txt
expect_in "no column 'txt' in the header"
cat >scm.yaml <<YAML
run: {name: scm, out_dir: $WORK/runs, seed: 4, threads: 2}
data: {source: glue, train: $WORK/scm, prepared_dir: $WORK/prep,
       tsv: {name: SCM, a: A, b: B, c: C, label: label, labels: [B, C]},
       tokenizer: {type: spm, vocab_size: 60}}
task: {type: rank, seq_len: 24}
model: {arch: encoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, position: {type: rope}}
train: {lr: 0.003, max_steps: 60, batch_size: 16, eval_every: 30, log_every: 10,
        schedule: {type: linear, warmup: 4}}
YAML
expect_exit 0 "$ROPELAB" train scm.yaml
acc=$(grep '"split":"valid"' runs/scm/metrics.jsonl | tail -1 | python3 -c 'import json,sys; print(json.load(sys.stdin)["acc"])')
python3 -c "import sys; sys.exit(0 if $acc >= 0.8 else 1)" || fail "ranking dev accuracy $acc < 0.8 (the closer text is a copy of A)"
expect_exit 0 "$ROPELAB" eval runs/scm --split valid
[[ $(wc -l <runs/scm/predictions/valid/SCM.tsv) -eq 41 ]] || fail "ranking predictions"
expect_exit 2 "$ROPELAB" train scm.yaml run.name=scm2 task.type=glue
expect_in "needs task.type rank"

# MNLI's five files: dev matched/mismatched validate, and both test files (unlabeled) get
# leaderboard predictions MNLI-m.tsv / MNLI-mm.tsv with label names.
mkdir -p mnli
python3 - <<'PY'
import random
random.seed(9)
words = "the a dog cat runs sleeps big small house".split()
labels = ["entailment", "neutral", "contradiction"]
head = "index\tpromptID\tpairID\tgenre\tsentence1\tsentence2"
def s(): return " ".join(random.choice(words) for _ in range(5))
for name, n, labeled in (("train", 60, True), ("dev_matched", 12, True),
                         ("dev_mismatched", 10, True), ("test_matched", 7, False),
                         ("test_mismatched", 9, False)):
    with open(f"mnli/{name}.tsv", "w") as f:
        f.write(head + ("\tgold_label\n" if labeled else "\n"))
        for i in range(n):
            f.write(f"{i}\t1\t1n\tfiction\t{s()}\t{s()}" +
                    (f"\t{random.choice(labels)}\n" if labeled else "\n"))
PY
cat >mnli.yaml <<YAML
run: {name: mnli, out_dir: $WORK/runs, seed: 4, threads: 2}
data: {source: glue, train: $WORK/mnli, glue_task: MNLI, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 40}}
task: {type: glue, seq_len: 24}
model: {arch: encoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, position: {type: rope}}
train: {max_steps: 4, batch_size: 8, eval_every: 4, log_every: 2, schedule: {warmup: 1}}
YAML
expect_exit 0 "$ROPELAB" prepare mnli.yaml
for split in train valid valid_mismatched test test_mismatched; do
  grep -q "^$split"$'\t' <<<"$OUT" || fail "MNLI prepare lacks split $split: $OUT"
done
expect_exit 0 "$ROPELAB" train mnli.yaml
for split in test test_mismatched; do
  expect_exit 0 "$ROPELAB" eval runs/mnli --split $split
  expect_in "unlabeled split: no metrics"
done
[[ $(wc -l <runs/mnli/predictions/test/MNLI-m.tsv) -eq 8 ]] || fail "MNLI-m.tsv rows"
[[ $(wc -l <runs/mnli/predictions/test_mismatched/MNLI-mm.tsv) -eq 10 ]] || fail "MNLI-mm.tsv rows"
tail -n +2 runs/mnli/predictions/test_mismatched/MNLI-mm.tsv | cut -f2 |
  grep -qvE '^(entailment|neutral|contradiction)$' && fail "MNLI predictions are not label names"

# The Table 5 protocol through `ablate`: accuracy per maximum length, one table per module; a
# 32-position learned table cannot run the 48-token task, so that cell is n/a, not an error.
cat >scm-exp.yaml <<YAML
name: scm-len
base: scm.yaml
out_dir: $WORK/runs
set: [train.max_steps=8, train.eval_every=8]
tasks:
  - {name: len24, set: [task.seq_len=24]}
  - {name: len48, set: [task.seq_len=48]}
variants:
  - {name: learned, set: [model.position.type=learned, model.position.max_len=32]}
  - {name: rope}
YAML
expect_exit 0 "$ROPELAB" ablate --no-plots scm-exp.yaml
expect_in "run 3/4: len48.learned: n/a (task.seq_len: seq_len (48) exceeds the learned position table"
[[ ! -e runs/scm-len/len48.learned ]] || fail "an n/a run was trained"
[[ -e runs/scm-len/len48.rope/metrics.h5 ]] || fail "len48.rope was not trained"
S=runs/scm-len/sweep.md
grep -q '^| len48 | acc (higher) | - | n/a | 0 |$' $S || fail "no n/a row in $S: $(cat $S)"
grep -q '^| len48 | learned | n/a |$' $S || fail "no n/a cell in $S"
grep -Eq '^\| len48 \| acc \(higher\) \| \(base\) \| [01]\.[0-9]{4} ± 0\.0000 \| 1 \|$' $S ||
  fail "no len48 rope row in $S"
grep -q '^- len48.learned: task.seq_len: ' $S || fail "no n/a footnote in $S"
echo "glue e2e: OK"
