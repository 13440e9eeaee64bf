#!/usr/bin/env bash
# Two trainings sharing one machine (BENCHMARKS.md, "Sharing a machine"). Not CI: it times runs.
#
#   bash scripts/bench_share.sh [--steps 30] [--rounds 3] [--precisions "fp32 bf16"]
#                               [--settings "ropelab fixed spin1000 passive"] [--threads 2]
#                               [--out runs/bench-share]
#
# Trains the LM bench shape (configs/bench/lm.yaml, the built-in corpus, --threads threads each)
# for --steps steps, alone and then two at once, under these settings (--settings):
#   ropelab     ropelab's defaults: nothing in the environment (with oneDNN's sgemm that is
#               libgomp's default spin), and run.share_cpus (fewer threads while the other
#               process holds CPUs);
#   fixed       the same without run.share_cpus: the thread count stays at --threads;
#   spinN       fixed, with a bounded spin, GOMP_SPINCOUNT=N (e.g. spin1000);
#   passive     fixed, with OMP_WAIT_POLICY=PASSIVE (workers sleep at once).
# The first setting is the reference of the "alone vs" column.
# The order is interleaved: each round runs every precision x setting, alone then paired. A
# figure is a run's mean tokens/s over its logged rows after the first; the report gives each
# side's median over the rounds, and for a pair the slower of the two. Run it on an otherwise idle
# machine. Writes runs/bench-share/report.md (and every run's log beside it).
set -euo pipefail
cd "$(dirname "$0")/.."
steps=30 rounds=3 precisions="fp32 bf16" threads=2 out=runs/bench-share
settings="ropelab fixed spin1000 passive"
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --precisions) precisions=$2; shift 2 ;;
    --settings) settings=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    -h|--help) sed -n 2,20p "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "bench_share: unknown option $1 (see --help)" >&2; exit 2 ;;
  esac
done
[[ $steps =~ ^[1-9][0-9]*$ && $steps -ge 6 ]] || { echo "bench_share: --steps takes a number >= 6" >&2; exit 2; }
[[ $rounds =~ ^[1-9][0-9]*$ ]] || { echo "bench_share: --rounds takes a positive number" >&2; exit 2; }
ROPELAB=${ROPELAB:-build/bin/ropelab}
[[ -x $ROPELAB ]] || { echo "bench_share: $ROPELAB not built (bash scripts/setup.sh)" >&2; exit 2; }
mkdir -p "$out"
results="$out/results.tsv"
printf 'round\tprecision\tsetting\tmode\ttokens_per_s\n' >"$results"

for s in $settings; do
  [[ $s =~ ^(ropelab|fixed|passive|spin[0-9]+)$ ]] ||
    { echo "bench_share: --settings: '$s' is not ropelab, fixed, passive or spinN" >&2; exit 2; }
done
env_of() {
  case $1 in
    ropelab | fixed) echo "-u OMP_WAIT_POLICY -u GOMP_SPINCOUNT -u ROPELAB_KEEP_OMP_WAIT" ;;
    passive) echo "-u GOMP_SPINCOUNT OMP_WAIT_POLICY=PASSIVE" ;;
    spin*) echo "-u OMP_WAIT_POLICY GOMP_SPINCOUNT=${1#spin}" ;;
  esac
}
# train NAME PRECISION SETTING: one training in the background; its pid in $!.
train() {
  rm -rf "${out:?}/runs/$1"
  # shellcheck disable=SC2046
  env $(env_of "$3") "$ROPELAB" train configs/bench/lm.yaml run.name="$1" run.out_dir="$out/runs" \
    run.threads="$threads" run.share_cpus=$([[ $3 == ropelab ]] && echo true || echo false) \
    train.precision="$2" train.max_steps="$steps" train.eval_every=0 \
    train.checkpoint_every=0 train.schedule.warmup=2 train.log_every=2 run.tensorboard=false \
    >"$out/$1.log" 2>&1 &
}
speed() {  # speed NAME: mean tokens/s of the train rows after the first
  /usr/bin/python3 -c '
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
v = [r["tokens_per_s"] for r in rows if r.get("split") == "train"][1:]
print(round(sum(v) / len(v)))' "$out/runs/$1/metrics.jsonl"
}

for round in $(seq "$rounds"); do
  for p in $precisions; do
    for s in $settings; do
      train "alone-$p-$s" "$p" "$s"; wait $!
      printf '%s\t%s\t%s\talone\t%s\n' "$round" "$p" "$s" "$(speed "alone-$p-$s")" >>"$results"
      train "a-$p-$s" "$p" "$s"; a=$!
      train "b-$p-$s" "$p" "$s"; b=$!
      wait $a $b
      for r in a b; do
        printf '%s\t%s\t%s\tpair-%s\t%s\n' "$round" "$p" "$s" "$r" "$(speed "$r-$p-$s")" >>"$results"
      done
      echo "bench_share: round $round $p $s: $(tail -3 "$results" | cut -f4,5 | tr '\t\n' '= ')"
    done
  done
done

/usr/bin/python3 - "$results" "$out/report.md" "$steps" "$rounds" "$threads" $settings <<'PY'
import csv, statistics, sys, subprocess
path, report, steps, rounds, threads = sys.argv[1:6]
settings = sys.argv[6:]
rows = list(csv.DictReader(open(path), delimiter="\t"))
cpus = subprocess.run(["nproc"], capture_output=True, text=True).stdout.strip()
med = lambda xs: statistics.median(xs) if xs else float("nan")
out = [f"# Two trainings on one machine ({cpus} CPUs)", "",
       f"LM bench shape (configs/bench/lm.yaml), {threads} threads each, {steps} steps, "
       f"{rounds} interleaved rounds; medians over the rounds; a pair's figure is its slower "
       "run's.", "",
       f"| precision | setting | alone tokens/s | alone vs {settings[0]} | pair, each (slower) | pair / alone |",
       "|:--|:--|--:|--:|--:|--:|"]
for p in dict.fromkeys(r["precision"] for r in rows):
    alone = {s: med([float(r["tokens_per_s"]) for r in rows if r["precision"] == p and
                     r["setting"] == s and r["mode"] == "alone"]) for s in settings}
    for s in settings:
        per_round = {}
        for r in rows:
            if r["precision"] == p and r["setting"] == s and r["mode"].startswith("pair"):
                per_round.setdefault(r["round"], []).append(float(r["tokens_per_s"]))
        pair = med([min(v) for v in per_round.values()])
        out.append(f"| {p} | {s} | {alone[s]:.0f} | {alone[s] / alone[settings[0]]:.3f} | "
                   f"{pair:.0f} | {pair / alone[s]:.3f} |")
open(report, "w").write("\n".join(out) + "\n")
print("\n".join(out))
PY
echo "bench_share: wrote $out/report.md"
