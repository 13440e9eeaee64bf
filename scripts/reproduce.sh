#!/usr/bin/env bash
# Runs every paper experiment in order, reusing finished runs, and ends with one summary:
# runs/reproduce/summary.md (each experiment's table, the paper's number beside it, and whether
# the paper's claim held at this scale). Interrupted? Run the same command again: `ropelab
# ablate` skips finished runs and resumes the interrupted one from its checkpoint.
#
#   bash scripts/reproduce.sh            # the CPU tier (about 6 hours on 2 cores)
#   bash scripts/reproduce.sh gpu        # the GPU tier (one NVIDIA GPU)
#   bash scripts/reproduce.sh --dry-run  # list what would run, run nothing
#
# Options:
#   cpu | gpu       the tier (default cpu)
#   --only A,B      run only these experiments (names as listed by --dry-run), then summarise
#   --no-setup      skip scripts/setup.sh (packages and build; it is quick when up to date)
#   --dry-run       print the plan and exit
# Each experiment's log is runs/reproduce/NAME.log. An experiment that fails stops the script
# (later experiments fine-tune the earlier ones' encoders) with its log named; its finished
# runs are kept.
set -uo pipefail
usage() { sed -n '2,18p' "$0" | sed 's/^# \{0,1\}//'; }

tier=cpu only="" setup=1 dry=0
while (($#)); do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    cpu | gpu) tier="$1"; shift ;;
    --only) [[ $# -ge 2 ]] || { echo "reproduce: --only needs a list of experiments" >&2; exit 2; }
            only="$2"; shift 2 ;;
    --no-setup) setup=0; shift ;;
    --dry-run) dry=1; shift ;;
    *) echo "reproduce: unknown argument '$1' (the tier is cpu or gpu; see --help)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."

# name | what | estimated time on the tier's machine
if [[ $tier == cpu ]]; then
  plan=(
    "mlm-cpu|MLM pre-training, 5 modules, 400 steps (Fig. 3 left)|6 min"
    "charlm-linear-cpu|linear-attention character LM with and without RoPE (Fig. 3 right)|10 min"
    "encoders-cpu|the shared encoders of Tables 2 and 5: learned and RoPE, 6000 MLM steps|20 min"
    "translation-table1-cpu|translation, sinusoidal vs RoPE, 3 seeds (Table 1)|65 min"
    "glue-cpu|GLUE-style fine-tuning, learned vs RoPE x 2 learning rates x 3 seeds (Table 2)|90 min"
    "cola-long-cpu|bible-cola at the chosen learning rate for 3000 steps, learned vs RoPE x 3 seeds|32 min"
    "rank-cpu|long-text ranking, learned vs RoPE at 4 maximum lengths x 3 seeds (Table 5)|88 min"
    "length-generalisation-cpu|the length card, 5 families x 5 probes x 3 seeds|55 min"
  )
else
  plan=(
    "mlm-gpu|MLM pre-training, learned vs RoPE (Fig. 3 left; the encoders of Tables 2 and 5)|5 min"
    "translation-table1-gpu|translation, sinusoidal vs RoPE, Transformer-base, 3 seeds (Table 1)|15 min"
    "glue-gpu|GLUE-style fine-tuning, learned vs RoPE x 2 learning rates x 3 seeds (Table 2)|10 min"
    "rank-gpu|long-text ranking at 128, 256 and 512 tokens, 3 seeds (Table 5)|10 min"
    "length-generalisation-gpu|the length card, 5 families x 5 probes x 3 seeds|20 min"
  )
fi
names=()
for p in "${plan[@]}"; do names+=("${p%%|*}"); done
if [[ -n "$only" ]]; then
  IFS=, read -ra wanted <<<"$only"
  for w in "${wanted[@]}"; do
    [[ " ${names[*]} " == *" $w "* ]] ||
      { echo "reproduce: --only: '$w' is not a $tier experiment (one of: ${names[*]})" >&2; exit 2; }
  done
fi
selected() { [[ -z "$only" || ",$only," == *",$1,"* ]]; }

echo "reproduce: the $tier tier, in order (finished runs are reused):"
i=0
for p in "${plan[@]}"; do
  IFS='|' read -r name what est <<<"$p"
  i=$((i + 1))
  selected "$name" || continue
  printf '  %d. %-26s %s (about %s)\n' "$i" "$name" "$what" "$est"
done
echo "  then runs/reproduce/summary.md"
((dry)) && exit 0

if [[ $tier == gpu ]] && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "reproduce: the gpu tier needs an NVIDIA GPU (nvidia-smi -L lists none); run the cpu tier here" >&2
  exit 2
fi
if ((setup)); then
  bash scripts/setup.sh || { echo "reproduce: scripts/setup.sh failed (see its output above)" >&2; exit 1; }
fi
[[ -x build/bin/ropelab ]] || { echo "reproduce: build/bin/ropelab is missing: run without --no-setup" >&2; exit 2; }

mkdir -p runs/reproduce
start=$SECONDS
for p in "${plan[@]}"; do
  IFS='|' read -r name what est <<<"$p"
  selected "$name" || continue
  log=runs/reproduce/$name.log
  echo "=== reproduce: $name: $what (about $est) ==="
  t0=$SECONDS
  build/bin/ropelab ablate "experiments/$name.yaml" 2>&1 | tee "$log"
  rc=${PIPESTATUS[0]}
  if ((rc != 0)); then
    if ((rc == 130 || rc == 143)); then
      echo "reproduce: stopped during $name; run the same command again to resume" >&2
    else
      echo "reproduce: $name failed (exit $rc); its log is $log" >&2
    fi
    exit "$rc"
  fi
  # Tables 2 and 5 as plots, mean over seeds with a band: the dev metric by fine-tuning step,
  # and ranking accuracy against maximum length.
  plot=""
  [[ $name == glue-* || $name == cola-long-* ]] && plot=scripts/plot_sweep.py
  [[ $name == rank-* ]] && plot=scripts/plot_rank.py
  if [[ -n $plot ]]; then
    python3 "$plot" "runs/$name" || echo "reproduce: the $name plot failed (the runs are fine)" >&2
  fi
  echo "=== reproduce: $name done in $(((SECONDS - t0) / 60)) min ==="
done
python3 scripts/reproduce_summary.py --tier "$tier" --runs runs --out runs/reproduce/summary.md || exit 1
echo "reproduce: all done in $(((SECONDS - start) / 60)) min; the summary is runs/reproduce/summary.md"
