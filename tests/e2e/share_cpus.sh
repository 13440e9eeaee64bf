# run.share_cpus (dist/cpu_share.h) through the real CLI: a training on 2 CPUs with 2 threads,
# while another process spins on one of them, drops to 1 thread and says so in its log;
# run.share_cpus=false keeps its 2 threads. No speed is asserted (BENCHMARKS.md measures that):
# only that the other process is seen and the thread count follows.
source "$(dirname "$0")/lib.sh"
cd "$WORK"

cpus=$(taskset -pc $$ | sed 's/.*: //')
first=$(python3 -c "import os; c = sorted(os.sched_getaffinity(0)); print(f'{c[0]},{c[1]}' if len(c) > 1 else '')")
[[ -n $first ]] || { echo "SKIP: one CPU ($cpus): nothing to share"; exit 77; }
one=${first%,*}

word_corpus 1 300 >train.txt
cat >tiny.yaml <<YAML
run: {name: shared, out_dir: $WORK/runs, seed: 3, threads: 2}
data: {source: text, train: $WORK/train.txt, prepared_dir: $WORK/prep,
       tokenizer: {type: spm, vocab_size: 64}}
task: {type: clm, seq_len: 32}
model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, dropout: 0.0, position: {type: rope}}
train: {max_steps: 1000000, batch_size: 4, lr: 0.003, eval_every: 0, checkpoint_every: 0,
        log_every: 50, schedule: {warmup: 2}}
YAML
expect_exit 0 "$ROPELAB" prepare tiny.yaml

# Another process spinning on the first of the two CPUs.
taskset -c "$one" python3 -c 'while True: pass' &
spinner=$!
trap 'kill $spinner 2>/dev/null || true; [[ -n ${KEEP_WORK:-} ]] || rm -rf "$WORK"' EXIT

signal_when TERM shared.log "other processes keep" 0 taskset -c "$first" "$ROPELAB" train tiny.yaml
[[ $CODE -eq 143 ]] || fail "SIGTERM exit code $CODE: $(tail -3 shared.log)"
line=$(grep -m1 "other processes keep" shared.log)
[[ $line == *": 1 thread (of 2) until they are free (run.share_cpus)"* ]] || fail "the line: $line"
grep -qF "${line#*info }" runs/shared/train.log || fail "train.log lacks: ${line#*info }"
echo "shared: $line"

# run.share_cpus=false: the same run keeps its 2 threads (stopped 4 s after it starts training).
signal_when TERM fixed.log "info run " 4 taskset -c "$first" "$ROPELAB" train tiny.yaml \
  run.name=fixed run.share_cpus=false
[[ $CODE -eq 143 ]] || fail "SIGTERM exit code $CODE: $(tail -3 fixed.log)"
grep -q "other processes keep" fixed.log && fail "run.share_cpus=false changed the threads"
echo "PASS"
