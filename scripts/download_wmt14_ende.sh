#!/usr/bin/env bash
# WMT14 English-German as aligned plain-text files for `data.source: parallel`
# (data.train=data/wmt14/train, source_suffix=en, target_suffix=de). Uses the Stanford
# preprocessed copy (4.5M pairs, newstest2013 as valid, newstest2014 as test). Needs internet.
set -euo pipefail
out="${1:-data/wmt14}"
mkdir -p "$out"
cd "$out"
base=https://nlp.stanford.edu/projects/nmt/data/wmt14.en-de
for f in train.en train.de newstest2013.en newstest2013.de newstest2014.en newstest2014.de; do
  [[ -f $f ]] || curl -fL -o "$f" "$base/$f"
done
for l in en de; do cp newstest2013.$l valid.$l; cp newstest2014.$l test.$l; done
wc -l train.en train.de valid.en test.en
