#!/usr/bin/env bash
# Corpora as researchers ship them (docs/usage.md, "Your own corpus"): a directory of JSONL
# shards, zstd- and gzip-compressed, prepared in a stream and trained on from the split read
# in place:
# - prepare killed (SIGKILL) mid-split leaves no split that looks complete; the next prepare
#   resumes it and the split equals the one an uninterrupted prepare writes;
# - the tokens are stored as uint16 and the split is the same as the plain-text corpus's;
# - bad inputs (a malformed line, a missing field, a truncated stream, an empty shard) exit 2
#   with one line naming the file and line, and leave no split behind;
# - training killed (SIGKILL) and resumed ends bit-identical to the uninterrupted run.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

# ---- a corpus: 3 shards of JSON lines (about 24 MB of text), and the same documents as text
/usr/bin/python3 - <<'PY'
import json, random, os
random.seed(7)
w = ("in the beginning god created heaven and earth light darkness water day night "
     "firmament evening morning seas grass herb seed fruit tree").split()
os.makedirs("web", exist_ok=True)
plain = open("plain.txt", "w")
for s in range(3):
    with open(f"web/train-{s:05d}.jsonl", "w") as f:
        for i in range(6000):
            doc = "\n".join(" ".join(random.choice(w) for _ in range(random.randint(5, 30))) + "."
                            for _ in range(random.randint(5, 40)))
            f.write(json.dumps({"id": f"{s}-{i}", "text": doc, "meta": {"n": i}}) + "\n")
            plain.write(doc.replace("\n", " ") + "\n")
with open("valid.jsonl", "w") as f:
    for i in range(300):
        f.write(json.dumps({"text": " ".join(random.choice(w) for _ in range(60))}) + "\n")
PY
zstd -q --rm web/train-00000.jsonl web/train-00001.jsonl
gzip web/train-00002.jsonl
ls -l web

cat >corpus.yaml <<YAML
run: {name: ref, out_dir: $WORK/runs, seed: 3, threads: 2, share_cpus: false}
data: {source: text, train: $WORK/web, valid: $WORK/valid.jsonl, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 128, sample_mb: 2}}
task: {type: clm, seq_len: 64, packing: documents}
model: {arch: decoder, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, position: {type: rope}}
train: {max_steps: 200, batch_size: 4, lr: 0.003, eval_every: 10, eval_batches: 2,
        checkpoint_every: 1, keep_last: 2, log_every: 5, schedule: {warmup: 2}}
YAML

# ---- prepare killed mid-split, then resumed
"$ROPELAB" prepare corpus.yaml >kill.log 2>&1 &
pid=$!
for _ in $(seq 1200); do
  compgen -G "prep/*/*/.train.h5.part/state.json" >/dev/null && break
  running $pid || break
  sleep 0.05
done
running $pid || fail "prepare ended before a batch was recorded: $(tail -3 kill.log)"
kill -KILL $pid
set +e; wait $pid; set -e
split=$(ls -d prep/*/*/ | head -1)
[[ ! -e $split/train.h5 ]] || fail "a killed prepare left train.h5"
[[ -e $split/.train.h5.part/state.json ]] || fail "no partial state after the kill"
expect_exit 0 "$ROPELAB" prepare corpus.yaml
expect_in "resuming after"
[[ ! -e $split/.train.h5.part ]] || fail "the partial state was not removed"
echo "prepare: killed and resumed ($(grep -o 'resuming after [0-9]* documents' <<<"$OUT"))"

# The same split from an uninterrupted prepare, and from the plain text of the same documents.
expect_exit 0 "$ROPELAB" prepare corpus.yaml data.prepared_dir="$WORK/prep2"
expect_exit 0 "$ROPELAB" prepare corpus.yaml data.prepared_dir="$WORK/prep3" \
  data.train="$WORK/plain.txt" data.tokenizer.type=byte
/usr/bin/python3 - "$split" prep2 prep3 <<'PY' || fail "the resumed split differs"
import sys, glob, h5py, numpy as np
a = h5py.File(sys.argv[1] + "/train.h5", "r")
b = h5py.File(glob.glob(sys.argv[2] + "/*/*/train.h5")[0], "r")
assert a["text/tokens"].dtype == np.uint16, a["text/tokens"].dtype
assert a.attrs["format_version"] == 2
for k in ("text/tokens", "text/offsets"):
    assert np.array_equal(a[k][()], b[k][()]), k
n = len(a["text/offsets"]) - 1
assert n == 18000, n
c = h5py.File(glob.glob(sys.argv[3] + "/*/*/train.h5")[0], "r")
assert len(c["text/offsets"]) - 1 == n  # the plain text holds the same documents
print(f"  resumed split = uninterrupted split: {n} documents, {len(a['text/tokens'])} uint16 tokens")
PY

# ---- bad inputs: exit 2, one line naming the file and line, no split left behind
mkdir bad && cp web/train-00000.jsonl.zst bad/
check_bad() {  # check_bad NEEDLE: prepare of bad/ fails naming it
  expect_exit 2 "$ROPELAB" prepare corpus.yaml data.train="$WORK/bad" \
    data.prepared_dir="$WORK/prep-bad" data.tokenizer.type=byte
  expect_in "$1"
  expect_not_in "terminate called"
  [[ -z $(find prep-bad -name 'train.h5') ]] || fail "a failed prepare left a split"
}
printf '{"text": "fine"}\n{"text": "cut\n' >bad/train-00001.jsonl
check_bad "bad/train-00001.jsonl:2: malformed JSON line"
printf '{"text": "fine"}\n{"body": "x"}\n' >bad/train-00001.jsonl
check_bad "bad/train-00001.jsonl:2: no \"text\" field (data.text_field)"
rm bad/train-00001.jsonl
head -c 20000 web/train-00002.jsonl.gz >bad/train-00002.jsonl.gz
check_bad "bad/train-00002.jsonl.gz: truncated gzip stream"
rm bad/train-00002.jsonl.gz
: >bad/train-00003.jsonl
check_bad "bad/train-00003.jsonl: the shard holds no document"
echo "bad inputs: each named, exit 2, nothing left behind"

# ---- training from the split on disk, killed and resumed: bit-identical
expect_exit 0 "$ROPELAB" train corpus.yaml
"$ROPELAB" train corpus.yaml run.name=killed >killed.log 2>&1 &
pid=$!
for _ in $(seq 1200); do  # killed once it has checkpointed step 20 or later
  compgen -G "runs/killed/checkpoints/step-*[2-9][0-9]*" >/dev/null && break
  sleep 0.02
done
kill -KILL $pid 2>/dev/null || fail "the run finished before the kill"
set +e; wait $pid; set -e
grep -q "step 200 valid" killed.log && fail "the run finished before the kill"
expect_exit 0 "$ROPELAB" train corpus.yaml run.name=killed
expect_in "resuming"
same_run runs/ref runs/killed
echo "PASS"
