# Crash tests for every task type (clm, mlm, translation, glue, rank), through the real CLI:
# - SIGKILL at random moments (a checkpoint every step, so many kills land in a save), resume
#   each time: the final weights are bit-identical to an uninterrupted run, and every training
#   and validation row of metrics.h5 and metrics.jsonl equals the uninterrupted run's (timings
#   aside; a train row averages 3 steps, so most kills cut a log window, which the checkpoint
#   carries over);
# - every checkpoint damaged: `train` exits 2 naming them, and no file of the run changes;
# - SIGTERM during a mid-training evaluation and during `eval`, SIGHUP during prepare: exit
#   143, one line, nothing partial written, and the next command finishes the work.
source "$(dirname "$0")/lib.sh"
cd "$WORK"
PY=/usr/bin/python3

$PY - <<'PY'
import os, random
random.seed(11)
w = "in the beginning god created heaven and earth light darkness water day night".split()
def sent(): return " ".join(random.choice(w) for _ in range(random.randint(5, 14)))
for name, n in (("lm.txt", 400), ("lm-valid.txt", 40)):
    with open(name, "w") as f:
        for _ in range(n): f.write(sent() + ".\n")
en = "the a man woman dog sees likes has big small red house".split()
es = "el un hombre mujer perro ve gusta tiene grande pequeno rojo casa".split()
d = dict(zip(en, es))
for split, n in (("train", 300), ("valid", 30)):
    with open(f"{split}.en", "w") as a, open(f"{split}.es", "w") as b:
        for _ in range(n):
            s = [random.choice(en) for _ in range(random.randint(3, 7))]
            a.write(" ".join(s) + "\n"); b.write(" ".join(d[x] for x in s) + "\n")
os.makedirs("sst", exist_ok=True)
for split, n in (("train", 200), ("dev", 40)):
    with open(f"sst/{split}.tsv", "w") as f:
        f.write("sentence\tlabel\n")
        for _ in range(n):
            y = random.randint(0, 1)
            f.write(f"{'light' if y else 'darkness'} {sent()}\t{y}\n")
os.makedirs("scm", exist_ok=True)
for split, n in (("train", 120), ("dev", 30)):
    with open(f"scm/{split}.tsv", "w") as f:
        f.write("A\tB\tC\tlabel\n")
        for _ in range(n):
            a, o = sent(), sent()
            y = random.choice("BC")
            f.write(f"{a}\t{a if y == 'B' else o}\t{o if y == 'B' else a}\t{y}\n")
PY

# share_cpus: false: a bit-identical repeat needs a fixed thread count, and ctest runs another
# test beside this one (run.share_cpus would drop a thread while it is busy).
COMMON="run: {out_dir: $WORK/runs, seed: 3, threads: 2, share_cpus: false}
train: {max_steps: 16, batch_size: 4, lr: 0.003, eval_every: 4, eval_batches: 2,
        checkpoint_every: 1, keep_last: 2, log_every: 3, schedule: {warmup: 2}}"
# cfg NAME DATA TASK MODEL: one config per task, the same run and train sections for all.
cfg() {
  printf '%s\ndata: {%s, prepared_dir: %s, tokenizer: {type: spm, vocab_size: 64}}\n' \
    "$COMMON" "$2" "$WORK/prep" >$1.yaml
  printf 'task: {%s}\nmodel: {%s, d_model: 32, n_layers: 1, n_heads: 2, d_ff: 64, dropout: 0.1,\n' \
    "$3" "$4" >>$1.yaml
  printf '        position: {type: rope}}\n' >>$1.yaml
}
LM="source: text, train: $WORK/lm.txt, valid: $WORK/lm-valid.txt"
cfg clm "$LM" "type: clm, seq_len: 24" "arch: decoder"
cfg mlm "$LM" "type: mlm, seq_len: 24" "arch: encoder"
cfg translation "source: parallel, train: $WORK/train, valid: $WORK/valid, source_suffix: en,
       target_suffix: es" "type: translation, seq_len: 16, max_tokens: 96, beam: 2,
       valid_bleu_sentences: 8" "arch: encdec, n_decoder_layers: 1"
cfg glue "source: glue, train: $WORK/sst, glue_task: SST-2" "type: glue, seq_len: 24" "arch: encoder"
cfg rank "source: glue, train: $WORK/scm,
       tsv: {name: SCM, a: A, b: B, c: C, label: label, labels: [B, C]}" \
  "type: rank, seq_len: 40" "arch: encoder"

for task in clm mlm translation glue rank; do
  echo "== $task"
  expect_exit 0 "$ROPELAB" train $task.yaml run.name=$task-ref
  # Three SIGKILLs at random moments after the first checkpoint, then a resume to the end.
  kills=0
  for k in 1 2 3; do
    "$ROPELAB" train $task.yaml run.name=$task-kill >$task-kill.log 2>&1 &
    pid=$!
    for _ in $(seq 200); do
      [[ -n $(ls runs/$task-kill/checkpoints 2>/dev/null) ]] && break
      sleep 0.05
    done
    sleep 0.$((RANDOM % 6))$((RANDOM % 10))
    kill -KILL $pid 2>/dev/null && kills=$((kills + 1))
    set +e; wait $pid; set -e
  done
  expect_exit 0 "$ROPELAB" train $task.yaml run.name=$task-kill
  echo "  $kills SIGKILLs"
  same_run runs/$task-ref runs/$task-kill
  # Every checkpoint damaged: exit 2 naming them, and not one file of the run changes.
  for m in runs/$task-kill/checkpoints/step-*/model.pt; do
    printf '\x01' | dd of="$m" bs=1 seek=64 conv=notrunc status=none
  done
  before=$(cd runs/$task-kill && find . -type f -exec md5sum {} + | sort -k2)
  expect_exit 2 "$ROPELAB" train $task.yaml run.name=$task-kill
  expect_in "no checkpoint can be resumed"
  expect_in "model.pt does not match its checksum"
  after=$(cd runs/$task-kill && find . -type f -exec md5sum {} + | sort -k2)
  [[ $before == "$after" ]] || fail "$task: the refused run changed files"
done

# SIGTERM during a mid-training evaluation: no partial validation row is logged; the saved
# checkpoint marks the evaluation pending and the resumed run does it, so the finished run's
# rows equal an uninterrupted run's. A validation split of 20,000 lines makes each evaluation
# take seconds; the training steps between them take milliseconds.
$PY -c "
import random; random.seed(5)
w='in the beginning god created heaven and earth light darkness water day night'.split()
open('big.txt','w').write(''.join(' '.join(random.choice(w) for _ in range(12))+'.\\n' for _ in range(20000)))"
cfg evalstop "source: text, train: $WORK/lm.txt, valid: $WORK/big.txt" "type: clm, seq_len: 24" \
  "arch: decoder"
OVR="train.eval_batches=0 train.eval_every=3 train.max_steps=6 train.checkpoint_every=3"
expect_exit 0 "$ROPELAB" train evalstop.yaml $OVR run.name=ev-ref
# 1 s after the step-0 evaluation: inside the evaluation at step 3, which takes about 2 s on 2
# idle cores (longer under load). 0.2 s was too early under load: a fresh Debian 13 root, with
# the whole suite running beside it, was still at step 2 then.
signal_when TERM ev.log "step 0 valid" 1 "$ROPELAB" train evalstop.yaml $OVR run.name=ev
[[ $CODE -eq 143 ]] || fail "SIGTERM during evaluation: exit $CODE: $(tail -3 ev.log)"
grep -q "step 3: evaluation stopped by a signal; it runs again on resume" ev.log ||
  fail "the evaluation was not the thing stopped (timing): $(tail -5 ev.log)"
[[ $(grep -c '"split":"valid"' runs/ev/metrics.jsonl) -eq 1 ]] || fail "a partial evaluation was logged"
expect_exit 0 "$ROPELAB" train evalstop.yaml $OVR run.name=ev
same_run runs/ev-ref runs/ev

# SIGTERM during `eval`: exit 143, one line, no eval json (each pass over the 6,000-line split
# takes seconds).
signal_when TERM evalcmd.log "" 1.5 \
  "$ROPELAB" eval runs/ev --split valid --lengths 48,96 --max-tokens 1000000
[[ $CODE -eq 143 ]] || fail "SIGTERM during eval: exit $CODE: $(tail -3 evalcmd.log)"
grep -q "^stopped: evaluation of runs/ev stopped by SIGTERM; nothing written" evalcmd.log ||
  fail "eval stop message: $(tail -3 evalcmd.log)"
[[ ! -e runs/ev/eval-valid.json ]] || fail "a stopped eval wrote eval-valid.json"

# SIGHUP during prepare (while SentencePiece trains on 14 MB): exit 143, one line, no
# dataset written; the tokenizer it finished is kept, and the next prepare reuses it.
$PY -c "
import random; random.seed(6)
w='in the beginning god created heaven and earth light darkness water day night'.split()
open('huge.txt','w').write(''.join(' '.join(random.choice(w) for _ in range(12))+'.\\n' for _ in range(200000)))"
signal_when HUP prep.log "training SentencePiece" 0 \
  "$ROPELAB" prepare evalstop.yaml data.train=$WORK/huge.txt
[[ $CODE -eq 143 ]] || fail "SIGHUP during prepare: exit $CODE: $(tail -3 prep.log)"
grep -q "^stopped: prepare stopped by SIGHUP; the files it finished are complete" prep.log ||
  fail "prepare stop message: $(tail -3 prep.log)"
ls prep/text-huge.txt-*/spm64-bpe/*.h5 2>/dev/null && fail "a stopped prepare wrote a dataset"
expect_exit 0 "$ROPELAB" prepare evalstop.yaml data.train=$WORK/huge.txt
expect_in "tokenizer up to date"
# SIGTERM during `ablate` (3000 steps, so the signal lands inside run a even at ~350 steps/s):
# the current run saves its checkpoint, the command exits 143 naming
# it, and the same command resumes that run and trains the rest.
cat >abl.yaml <<YAML
name: abl
base: clm.yaml
out_dir: $WORK/runs
set: [train.max_steps=3000, train.checkpoint_every=200, train.eval_every=0, train.log_every=10]
variants:
  - {name: a}
  - {name: b, set: [model.position.type=t5]}
YAML
signal_when TERM abl.log "info run .*/abl/a:" 1 "$ROPELAB" ablate --no-plots abl.yaml
[[ $CODE -eq 143 ]] || fail "SIGTERM during ablate: exit $CODE: $(tail -3 abl.log)"
grep -q "^stopped: ablation stopped during run 'a' (its checkpoint is saved)" abl.log ||
  fail "ablate stop message: $(tail -3 abl.log)"
[[ ! -e runs/abl/b ]] || fail "ablate went on to the next run after SIGTERM"
expect_exit 0 "$ROPELAB" ablate --no-plots abl.yaml
expect_in "resuming $WORK/runs/abl/a from step"
[[ -e runs/abl/b/metrics.h5 && -e runs/abl/compare.md ]] || fail "the resumed ablation did not finish"
# SIGKILL during `ablate` before the run's first checkpoint (only the final one is due): no
# checkpoint, so nothing to resume. The same command starts that run over instead of stopping,
# says so, keeps the killed run's metrics as .restart-1 and finishes the ablation.
sed -e 's/^name: abl$/name: abl2/' -e 's/checkpoint_every=200/checkpoint_every=3000/' \
  abl.yaml >abl2.yaml
"$ROPELAB" ablate --no-plots abl2.yaml >abl2.log 2>&1 &
PID=$!
for _ in $(seq 600); do
  grep -q '"split":"train"' runs/abl2/a/metrics.jsonl 2>/dev/null && break
  sleep 0.05
done
set +e; { kill -KILL $PID && wait $PID; } 2>/dev/null; set -e
[[ -e runs/abl2/a/metrics.jsonl && ! -e runs/abl2/a/checkpoints/step-000003000 ]] ||
  fail "the SIGKILL did not land inside abl2's run a: $(tail -3 abl2.log)"
expect_exit 0 "$ROPELAB" ablate --no-plots abl2.yaml
expect_in "before its first checkpoint; starting it over"
[[ -e runs/abl2/a/metrics.restart-1.jsonl && -e runs/abl2/b/metrics.h5 ]] ||
  fail "the restarted ablation did not keep the old metrics or did not finish"
# A run whose checkpoints were all deleted after a save is not a killed one: ablate refuses it.
rm -r runs/abl2/b/checkpoints
expect_exit 2 "$ROPELAB" ablate --no-plots abl2.yaml
expect_in "has results (metrics.h5) but no checkpoint"
echo "crash: OK"
