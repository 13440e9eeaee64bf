#!/usr/bin/env bash
# The nine GLUE tasks in their official TSV layouts (data.source: glue, data.train=data/glue/MRPC,
# data.glue_task=MRPC). Needs internet; uses the archives the GLUE benchmark distributes.
set -euo pipefail
out="${1:-data/glue}"
mkdir -p "$out"
cd "$out"
base=https://dl.fbaipublicfiles.com/glue/data
for t in CoLA SST-2 QQP STS-B MNLI QNLI RTE WNLI; do
  [[ -d $t ]] || { curl -fL -o "$t.zip" "$base/$t.zip" && unzip -o -q "$t.zip" && rm "$t.zip"; }
done
# MRPC ships as an MSI; its TSVs are mirrored with the SentEval data, and GLUE's dev split is
# the pairs listed in mrpc_dev_ids.tsv (removed from train), as GLUE's own script does.
mkdir -p MRPC
for f in msr_paraphrase_train.txt msr_paraphrase_test.txt; do
  [[ -f MRPC/$f ]] || curl -fL -o "MRPC/$f" "https://dl.fbaipublicfiles.com/senteval/senteval_data/$f"
done
[[ -f MRPC/dev_ids.tsv ]] || curl -fL -o MRPC/dev_ids.tsv "$base/mrpc_dev_ids.tsv"
tr -d '\r' <MRPC/dev_ids.tsv >MRPC/.ids
awk -F'\t' 'NR==FNR {dev[$1 "\t" $2]=1; next} FNR==1 {print > "MRPC/train.tsv"; print > "MRPC/dev.tsv"; next}
     {sub(/\r$/, ""); if (($2 "\t" $3) in dev) print > "MRPC/dev.tsv"; else print > "MRPC/train.tsv"}' \
  MRPC/.ids MRPC/msr_paraphrase_train.txt
tr -d '\r' <MRPC/msr_paraphrase_test.txt >MRPC/test.tsv
ls
