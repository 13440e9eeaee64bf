#!/usr/bin/env bash
# Builds the libFuzzer targets of the hand-written parsers (tests/fuzz/, clang + ASan + UBSan)
# and runs them from their seed corpora (tests/fuzz/corpus/<target>/).
#
#   bash scripts/fuzz.sh                      # build, then run every target for 60 s
#                                             # (or $ROPELAB_FUZZ_SECONDS)
#   bash scripts/fuzz.sh --seconds 600 config # one target, longer
#   bash scripts/fuzz.sh --build-only
#   bash scripts/fuzz.sh --seed 1 --runs 20000 config   # reproducible: same inputs every time
#
# New inputs libFuzzer finds go to a scratch copy of the corpus, so the repository does not
# change. A crash, a sanitizer report or a violated property fails the run and leaves the input
# in BUILD/crashes/; add it to the seed corpus and a regression test (tests/fuzz/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${ROPELAB_FUZZ_SECONDS:-60}
build=build/fuzz
build_only=0
seed=0  # 0: libFuzzer picks one
runs=-1 # -1: until --seconds are up
targets=()
while (($#)); do
  case "$1" in
    --seconds) seconds=$2; shift 2 ;;
    --build-dir) build=$2; shift 2 ;;
    --build-only) build_only=1; shift ;;
    --seed) seed=$2; shift 2 ;;
    --runs) runs=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
all=(config overrides glue_tsv osis parallel manifest safetensors scorers tokenizers)
((${#targets[@]})) || targets=("${all[@]}")
for t in "${targets[@]}"; do
  [[ " ${all[*]} " == *" $t "* ]] || { echo "fuzz: no target '$t' (targets: ${all[*]})" >&2; exit 2; }
done
if ! command -v clang++ >/dev/null; then
  echo "fuzz: clang++ is missing; bash scripts/setup.sh installs it" >&2
  exit 2
fi

cmake -S tests/fuzz -B "$build" -G Ninja -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
if ! cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1; then
  tail -30 "$build/build.log" >&2
  echo "fuzz: the build failed (log: $build/build.log)" >&2
  exit 1
fi
((build_only)) && exit 0

mkdir -p "$build/crashes"
status=0
for t in "${targets[@]}"; do
  scratch=$(mktemp -d)
  cp tests/fuzz/corpus/$t/* "$scratch"/
  log="$build/fuzz_$t.log"
  if "$build/fuzz_$t" -max_total_time="$seconds" -runs="$runs" -seed="$seed" \
      -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$build/crashes/$t-" -print_final_stats=1 "$scratch" >"$log" 2>&1; then
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 | grep -o '[0-9]*' || echo "?")
    n=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    echo "fuzz: $t: seed $(grep -o 'Seed: [0-9]*' "$log" | head -1 | grep -o '[0-9]*$'), $n inputs, coverage $cov edges, $(ls "$scratch" | wc -l) corpus files: OK"
  else
    echo "fuzz: $t FAILED (input saved under $build/crashes/); the report:" >&2
    grep -aE "ERROR|property violated|uncaught|SUMMARY|terminate|what\(\)" "$log" | head -20 >&2
    status=1
  fi
  rm -rf "$scratch"
done
exit $status
