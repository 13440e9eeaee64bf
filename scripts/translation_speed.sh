#!/usr/bin/env bash
# Decoding speed of a trained translation run, in sentences/s: greedy and beam 4, each with and
# without the key/value cache, on the first N lines of a source file (default: the first 300
# lines of the built-in English->Spanish test split). One table on stdout.
#   bash scripts/translation_speed.sh runs/translation-cpu/sinusoidal [N] [SOURCE]
set -euo pipefail
cd "$(dirname "$0")/.."
run=${1:?usage: translation_speed.sh RUN [N] [SOURCE]}
n=${2:-300}
src=${3:-data/prepared/text/bible-en-es/test.en}
bin=./build/bin/ropelab
[[ -x $bin ]] || { echo "translation_speed.sh: $bin not built; run scripts/setup.sh" >&2; exit 2; }
[[ -f $src ]] || { echo "translation_speed.sh: $src: no such file" >&2; exit 2; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
head -n "$n" "$src" >"$tmp/src"
lines=$(wc -l <"$tmp/src")
printf '| decoding | cache | sentences | seconds | sentences/s |\n|:--|:--|--:|--:|--:|\n'
for beam in 1 4; do
  for cache in yes no; do
    flag=()
    [[ $cache == no ]] && flag=(--no-cache)
    t0=$(date +%s.%N)
    "$bin" translate "$run" --beam "$beam" "${flag[@]}" --input "$tmp/src" --out "$tmp/hyp" \
      2>/dev/null
    t1=$(date +%s.%N)
    name=greedy
    [[ $beam -gt 1 ]] && name="beam $beam"
    awk -v n="$lines" -v a="$t0" -v b="$t1" -v d="$name" -v c="$cache" \
      'BEGIN { printf "| %s | %s | %d | %.1f | %.1f |\n", d, c, n, b - a, n / (b - a) }'
  done
done
