# The built-in corpus: `ropelab prepare` exports the Bibles with diatheke, trains SentencePiece,
# writes the documented HDF5 layout; a second run is a no-op; the tokenizer gives the same ids
# in Python's sentencepiece.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
cat >c.yaml <<YAML
data: {source: bible-en, prepared_dir: $WORK/prep, tokenizer: {vocab_size: 2000}}
task: {type: clm}
YAML
start=$(date +%s)
expect_exit 0 "$ROPELAB" prepare c.yaml
echo "prepare took $(($(date +%s) - start)) s"
D=prep/bible-en/spm2000-bpe
h5ls -r $D/train.h5 | grep -q "/text/offsets" || fail "layout"
[[ $(wc -l <prep/text/bible-en/train.txt) -gt 1500 ]] || fail "too few training chapters"
grep -q "God created" prep/text/bible-en/train.txt || fail "expected text missing"
! grep -q "Godcreated" prep/text/bible-en/train.txt || fail "glued words left in the text"
expect_exit 0 "$ROPELAB" prepare c.yaml
expect_in "up to date"
/usr/bin/python3 - "$D" <<'PY' || fail "python sentencepiece disagrees"
import sys, h5py, sentencepiece as spm
d = sys.argv[1]
sp = spm.SentencePieceProcessor(model_file=d + "/tokenizer.model")
with h5py.File(d + "/valid.h5") as f:
    toks, offs = f["text/tokens"][()], f["text/offsets"][()]
    assert f.attrs["vocab_size"] == sp.get_piece_size()
text = open("prep/text/bible-en/valid.txt").read().splitlines()
for i in range(5):
    assert list(toks[offs[i]:offs[i + 1]]) == sp.encode(text[i]), i
assert sp.piece_to_id("[MASK]") == 6 and sp.pad_id() == 0
print("python sentencepiece: same ids")
PY
# bible-cola: CoLA layout, balanced classes, every reordered verse has its original's words.
cat >cola.yaml <<YAML
data: {source: bible-cola, prepared_dir: $WORK/prep, tokenizer: {vocab_size: 2000}}
task: {type: glue}
model: {arch: encoder}
YAML
expect_exit 0 "$ROPELAB" prepare cola.yaml
python3 - prep/text/bible-cola/CoLA prep/text/bible-en/train.txt <<'PY' || fail "bible-cola construction"
import sys
d = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(d + "/train.tsv")]
assert all(len(r) == 4 for r in rows), "CoLA has 4 columns and no header"
pos = sum(r[1] == "1" for r in rows)
assert 0.45 < pos / len(rows) < 0.55, pos / len(rows)
assert all((r[2] == "*") == (r[1] == "0") for r in rows)
# In-order rows are WEB verses as written (found verbatim in bible-en's WEB chapters);
# reordered ones are not.
chapters = open(sys.argv[2]).read()
ok = [r[3] in chapters for r in rows[:2000] if r[1] == "1"]
bad = [r[3] in chapters for r in rows[:2000] if r[1] == "0"]
assert sum(ok) > 0.95 * len(ok), sum(ok) / len(ok)
assert sum(bad) < 0.02 * len(bad), sum(bad) / len(bad)
test = [l.rstrip("\n").split("\t") for l in open(d + "/test.tsv")]
assert test[0] == ["index", "sentence"] and len(test) > 1000
print(f"bible-cola: {len(rows)} train rows, {pos / len(rows):.3f} in order")
PY
# bible-rank: A/B/C triplets, each in both orders (balanced labels, ties score 50%); the nearer
# and the farther text differ in 10-word segments spread through the whole text.
cat >rank.yaml <<YAML
data: {source: bible-rank, prepared_dir: $WORK/prep, tokenizer: {vocab_size: 2000}}
task: {type: rank}
model: {arch: encoder}
YAML
expect_exit 0 "$ROPELAB" prepare rank.yaml
python3 - prep/text/bible-rank/bible-rank <<'PY' || fail "bible-rank construction"
import sys
d = sys.argv[1]
rows = [l.rstrip("\n").split("\t") for l in open(d + "/train.tsv")]
assert rows[0] == ["A", "B", "C", "label"], rows[0]
rows = rows[1:]
assert len(rows) > 3000 and len(rows) % 2 == 0, len(rows)
diff_frac, where, first_quarter = [], [], 0
for i in range(0, len(rows), 2):
    (a1, b1, c1, l1), (a2, b2, c2, l2) = rows[i], rows[i + 1]
    assert (l1, l2) == ("B", "C") and a1 == a2 and (b1, c1) == (c2, b2), i  # both orders
    nw, fw = b1.split(), c1.split()
    assert 100 <= len(nw) == len(fw) <= 200, (len(nw), len(fw))
    assert len(a1.split()) <= len(nw)
    seg = [s for s in range(0, len(nw), 10) if nw[s:s + 10] != fw[s:s + 10]]
    assert seg, i  # the farther text differs somewhere
    diff_frac.append(len(seg) / ((len(nw) + 9) // 10))
    where += [(s + 5) / len(nw) for s in seg]
    first_quarter += any(s < len(nw) // 4 for s in seg)
n = len(rows) // 2
frac = sum(diff_frac) / n
assert 0.07 < frac < 0.16, frac  # about 10% of segments are evidence
mean = sum(where) / len(where)
assert 0.4 < mean < 0.6, mean  # spread through the text, not bunched at one end
assert first_quarter / n < 0.9, first_quarter / n  # a short window often sees no evidence
print(f"bible-rank: {n} train triplets x 2 orders, {frac:.3f} of segments differ, "
      f"mean position {mean:.2f}, {first_quarter / n:.2f} with evidence in the first quarter")
PY
echo "builtin_corpus: OK"
