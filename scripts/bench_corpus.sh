#!/usr/bin/env bash
# The scale benchmark of corpus preparation and training (BENCHMARKS.md, "Corpora at scale").
# Not CI: it writes a few GB and takes tens of minutes on 2 cores.
#
#   bash scripts/bench_corpus.sh [--gb 2] [--steps 200] [--rounds 3] [--dir DIR] [--reuse]
#                                [--memory-only]
#
# --reuse keeps the prepared corpus and the preparation's figures of the last run (after a
# change that affects training only). --memory-only skips the timed trainings (step 4), for a
# machine that is busy with something else: peak memory does not depend on the time.
#
# 1. Generates a JSONL.zst corpus of at least --gb GB of text in 4 shards: documents of 5-60
#    sentences drawn at random from the built-in English corpus (about 3 KB each, the size of a
#    web page), and a validation file of 2,000 such documents.
# 2. Times `zstdcat | wc -c` on it: the limit for reading it.
# 3. Prepares it (SentencePiece, vocabulary 8000) under /usr/bin/time: wall time, MB/s of
#    text, peak memory (maximum resident set).
# 4. Trains the LM bench shape (configs/bench/lm.yaml) for --steps steps on it and on the
#    built-in corpus, interleaved (big, built-in, big, built-in, ... --rounds times): tokens/s
#    and peak memory, the median of each side's runs.
# 5. The memory the training holds, without the allocator's noise: the same trainings for 30
#    steps with glibc's default malloc (ROPELAB_KEEP_MALLOC=1), --rounds times each. ropelab's
#    default keeps freed memory in its heap (docs/platform-notes.md), and that heap's high-water
#    mark varies by up to 25% from one run of a config to the next; with glibc's defaults the
#    large blocks are returned on free and the peak is within a few MiB from run to run.
# Writes the report to runs/bench-corpus/report.md.
set -euo pipefail
cd "$(dirname "$0")/.."
gb=2 steps=200 dir=/var/tmp/ropelab-corpus reuse=0 rounds=3 speed=1
while (($#)); do
  case $1 in
    --reuse) reuse=1; shift ;;
    --memory-only) speed=0; shift ;;
    --rounds) rounds=$2; shift 2 ;;
    --gb) gb=$2; shift 2 ;;
    --steps) steps=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) sed -n 2,26p "$0"; exit 0 ;;
    *) echo "bench_corpus: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
ropelab=${ROPELAB:-build/bin/ropelab}
[[ -x $ropelab ]] || { echo "bench_corpus: no $ropelab; run scripts/setup.sh first" >&2; exit 2; }
command -v zstd >/dev/null || { echo "bench_corpus: needs zstd (apt-get install zstd)" >&2; exit 2; }
out=runs/bench-corpus
mkdir -p "$out" "$dir"
report=$out/report.md
threads=$(nproc)

# ---- 1. the corpus (the built-in text is exported by a prepare of the built-in corpus)
"$ropelab" prepare configs/bench/lm.yaml >/dev/null
if [[ ! -e $dir/done-v2-$gb ]]; then
  rm -rf "$dir/web"
  mkdir -p "$dir/web"
  /usr/bin/python3 - "$dir/web" "$gb" data/prepared/text/bible-en/train.txt <<'PY'
import json, random, subprocess, sys
out, gb, src = sys.argv[1], float(sys.argv[2]), sys.argv[3]
verses = [s.strip() + "." for l in open(src, encoding="utf-8") for s in l.split(". ") if s.strip()]
random.seed(1)
target, shards, written = gb * 1e9, 4, 0
for s in range(shards):
    z = subprocess.Popen(["zstd", "-q", "-T2", "-3", "-o", f"{out}/train-{s:05d}.jsonl.zst"],
                         stdin=subprocess.PIPE)
    part = 0
    while part < target / shards:
        doc = " ".join(random.choice(verses) for _ in range(random.randint(5, 60)))
        line = (json.dumps({"text": doc, "source": "bible-en", "n": written}) + "\n").encode()
        z.stdin.write(line)
        part += len(line)
        written += 1
    z.stdin.close()
    z.wait()
with open(f"{out}/../valid.jsonl", "w") as f:
    for i in range(2000):
        f.write(json.dumps({"text": " ".join(random.choice(verses) for _ in range(random.randint(5, 60)))}) + "\n")
print(f"{written} documents")
PY
  touch "$dir/done-v2-$gb"
fi
zbytes=$(du -cb "$dir"/web/*.zst | tail -1 | cut -f1)
t0=$(date +%s.%N)
tbytes=$(zstdcat "$dir"/web/*.zst | wc -c)
t1=$(date +%s.%N)
zcat_s=$(echo "$t1 - $t0" | bc -l)

# ---- 3. prepare
cat >"$out/corpus.yaml" <<YAML
inherit: $(pwd)/configs/bench/lm.yaml
run: {name: corpus, out_dir: $(pwd)/$out/runs, threads: $threads}
data: {source: text, train: $dir/web, valid: $dir/valid.jsonl,
       prepared_dir: $dir/prepared, tokenizer: {type: spm, vocab_size: 8000, sample_mb: 64}}
YAML
if ((!reuse)) || [[ ! -e $out/prepare.time ]]; then
  rm -rf "$dir/prepared"
  /usr/bin/time -v "$ropelab" prepare "$out/corpus.yaml" 2>"$out/prepare.time" >"$out/prepare.log" || {
    tail -20 "$out/prepare.time"; exit 1; }
fi
prep_s=$(awk -F': ' '/Elapsed \(wall clock\)/ {n=split($2,a,":"); s=0; for(i=1;i<=n;i++) s=s*60+a[i]; print s}' "$out/prepare.time")
prep_kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$out/prepare.time")
ntok=$(/usr/bin/python3 -c "import h5py,glob; f=h5py.File(glob.glob('$dir/prepared/*/*/train.h5')[0]); print(len(f['text/tokens']))")

# ---- 4. training, interleaved
train_one() {  # train_one NAME CONFIG STEPS ARGS...: prints "tokens_per_s peak_kb"
  local name=$1 cfg=$2 n=$3; shift 3
  rm -rf "$out/runs/$name"
  /usr/bin/time -v "$ropelab" train "$cfg" run.name="$name" run.out_dir="$(pwd)/$out/runs" \
    run.threads="$threads" train.max_steps="$n" train.eval_every=0 train.checkpoint_every=0 \
    train.schedule.warmup=10 \
    "$@" >"$out/$name.log" 2>"$out/$name.time"
  local tps kb
  tps=$(/usr/bin/python3 -c "
import json
rows = [json.loads(l) for l in open('$out/runs/$name/metrics.jsonl')]
v = [r['tokens_per_s'] for r in rows if r.get('split') == 'train' and 'tokens_per_s' in r][1:]
print(sum(v) / len(v))")
  kb=$(awk -F': ' '/Maximum resident set size/ {print $2}' "$out/$name.time")
  echo "$tps $kb"
}
declare -a big=() small=() mbig=() msmall=()
if ((speed)); then
  for ((i = 1; i <= rounds; i++)); do
    big+=("$(train_one "big-$i" "$out/corpus.yaml" "$steps")")
    small+=("$(train_one "builtin-$i" configs/bench/lm.yaml "$steps")")
  done
fi

# ---- 5. the memory held, with glibc's default malloc
for ((i = 1; i <= rounds; i++)); do
  mbig+=("$(ROPELAB_KEEP_MALLOC=1 train_one "mem-big-$i" "$out/corpus.yaml" 30)")
  msmall+=("$(ROPELAB_KEEP_MALLOC=1 train_one "mem-builtin-$i" configs/bench/lm.yaml 30)")
done

/usr/bin/python3 - "$report" "$zbytes" "$tbytes" "$zcat_s" "$prep_s" "$prep_kb" "$ntok" \
  "$steps" "$threads" "$rounds" "${big[@]}" "${small[@]}" "${mbig[@]}" "${msmall[@]}" <<'PY'
import sys, platform
a = sys.argv[1:]
report, zb, tb, zs, ps, pkb, ntok, steps, thr, rounds = a[:10]
runs = [tuple(map(float, x.split())) for x in a[10:]]
r = int(rounds)
mem_big, mem_small = runs[-2 * r:-r], runs[-r:]
big, small = runs[:(len(runs) - 2 * r) // 2], runs[(len(runs) - 2 * r) // 2:-2 * r]
def median(xs):
    xs = sorted(xs)
    return (xs[(len(xs) - 1) // 2] + xs[len(xs) // 2]) / 2
mib = lambda rs: [x[1] / 1024 for x in rs]
each = lambda rs: ", ".join(f"{x[0]:.0f} tok/s {x[1]/1024:.0f} MiB" for x in rs)
tb, zb, zs, ps = float(tb), float(zb), float(zs), float(ps)
lines = [
  "# Corpus scale benchmark", "",
  f"Machine: {platform.processor() or platform.machine()}, {thr} threads. "
  f"Corpus: {tb/1e9:.2f} GB of JSON lines in 4 zstd shards ({zb/1e9:.2f} GB compressed), "
  f"{int(ntok)/1e6:.0f}M tokens (SentencePiece BPE 8000, uint16).", "",
  "| | |", "|--|--|",
  f"| `zstdcat \\| wc -c` | {zs:.1f} s, {tb/1e6/zs:.0f} MB/s |",
  f"| prepare | {ps:.0f} s, {tb/1e6/ps:.1f} MB/s of text, {int(ntok)/ps/1e6:.2f}M tokens/s |",
  f"| prepare peak memory | {int(pkb)/1024/1024:.2f} GiB |",
]
if big:
    bt, st = median([x[0] for x in big]), median([x[0] for x in small])
    bm, sm = median(mib(big)), median(mib(small))
    lines += [
      f"| train on it ({steps} steps, LM bench shape) | {bt:.0f} tokens/s, peak {bm:.0f} MiB |",
      f"| train on the built-in corpus | {st:.0f} tokens/s, peak {sm:.0f} MiB |",
      f"| ratio | tokens/s {bt/st:.3f}, peak memory {bm/sm:.3f} |"]
mb, ms = mib(mem_big), mib(mem_small)
lines += [
  f"| memory held, glibc malloc (30 steps), on it | {median(mb):.0f} MiB ({min(mb):.0f}-{max(mb):.0f}) |",
  f"| memory held, glibc malloc (30 steps), built-in | {median(ms):.0f} MiB ({min(ms):.0f}-{max(ms):.0f}) |",
  f"| ratio | peak memory {median(mb)/median(ms):.3f} |", ""]
if big:
    lines += [
      f"Timed training runs interleaved ({len(big)} rounds of big then built-in); a run's "
      "tokens/s is the mean of its logged rows after the first, its peak the maximum resident "
      "set; the table gives each side's median.", "",
      f"- on it: {each(big)}", f"- built-in: {each(small)}", ""]
else:
    lines += ["Timed trainings skipped (--memory-only).", ""]
lines += [
  f"Memory runs ({r} rounds of big then built-in, ROPELAB_KEEP_MALLOC=1): maximum resident set.",
  "", f"- on it: {', '.join(f'{x:.0f}' for x in mb)} MiB",
  f"- built-in: {', '.join(f'{x:.0f}' for x in ms)} MiB"]
open(report, "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
