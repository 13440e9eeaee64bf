#!/usr/bin/env bash
# WikiText-103 (raw) as one article per line, for `data.source: text` (MLM / LM at full scale).
# Needs internet.   bash scripts/download_wikitext103.sh [data/wikitext-103]
set -euo pipefail
out="${1:-data/wikitext-103}"
mkdir -p "$out"
cd "$out"
url=https://s3.amazonaws.com/research.metamind.io/wikitext/wikitext-103-raw-v1.zip
[[ -d wikitext-103-raw ]] || { curl -fL -o wt.zip "$url" && unzip -o wt.zip && rm wt.zip; }
# Articles start with a " = Title = " line; join each article's lines into one document line.
for split in train valid test; do
  awk 'BEGIN{doc=""} /^ = [^=].* = $/ {if (doc!="") print doc; doc=""; next}
       {gsub(/^ +| +$/, ""); if ($0!="") doc = doc (doc=="" ? "" : " ") $0}
       END{if (doc!="") print doc}' "wikitext-103-raw/wiki.$split.raw" >"$split.txt"
done
wc -l train.txt valid.txt test.txt
