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
echo "builtin_corpus: OK"
