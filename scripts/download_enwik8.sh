#!/usr/bin/env bash
# enwik8 (first 100M bytes of an English Wikipedia dump) in the standard 90M/5M/5M byte split,
# as raw files for `data.source: bytes`. Needs internet (not available on ropelab's CI machines).
#   bash scripts/download_enwik8.sh [data/enwik8]
set -euo pipefail
out="${1:-data/enwik8}"
mkdir -p "$out"
cd "$out"
[[ -f enwik8 ]] || { curl -fL -o enwik8.zip http://mattmahoney.net/dc/enwik8.zip && unzip -o enwik8.zip && rm enwik8.zip; }
head -c 90000000 enwik8 >train.bin
head -c 95000000 enwik8 | tail -c 5000000 >valid.bin
tail -c 5000000 enwik8 >test.bin
ls -l train.bin valid.bin test.bin
