#!/usr/bin/env bash
# The Hugging Face parity checks on a machine without PyPI: `transformers` and `huggingface_hub`
# from source trees (git checkouts), run by Debian's python3 and python3-torch, with
# pure-Python stand-ins (scripts/golden/standins/) for the two packages that need Rust:
# `safetensors` (reading only) and `tokenizers` (AddedToken only; anything else raises).
#
#   bash scripts/golden/transformers_offline.sh TRANSFORMERS_TREE HUB_TREE
#
# TRANSFORMERS_TREE and HUB_TREE hold src/transformers and src/huggingface_hub, e.g.
# `git archive v4.47.1 src | tar -x -C DIR` of each repository. It runs:
#   1. scripts/golden/hf_fixtures.py --check-with-transformers: every tests/data/hf checkpoint
#      (BERT, RoFormer, Llama, Qwen2, Mistral, each rope_scaling type) loaded by transformers'
#      model classes, its outputs against the reference (and the fixtures rebuilt identical);
#   2. wordpiece_reference.py --check-with-transformers: the slow BertTokenizer;
#   3. bpe_reference.py --check-with-transformers: the slow GPT2Tokenizer and Qwen2Tokenizer
#      (Llama 3's byte-level BPE has no slow class: needs the real `tokenizers`);
#   4. with build/bin/ropelab: each fixture imported (`ropelab import-hf`) and exported again
#      (`ropelab export --format hf`), the export loaded by transformers against the same
#      reference (bert-cls aside: no built-in data has its 3 labels).
# Where the real packages are installed, run the three scripts directly instead.
set -euo pipefail
usage() { sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
[[ $# -eq 2 ]] || { usage >&2; exit 2; }
tf="$(cd "$1" && pwd)" hub="$(cd "$2" && pwd)"
[[ -f "$tf/src/transformers/__init__.py" ]] || { echo "transformers_offline: $1: no src/transformers" >&2; exit 2; }
[[ -f "$hub/src/huggingface_hub/__init__.py" ]] || { echo "transformers_offline: $2: no src/huggingface_hub" >&2; exit 2; }
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
missing=()
for m in torch regex filelock tqdm fsspec yaml requests packaging numpy; do
  "$py" -c "import $m" 2>/dev/null || missing+=("python3-${m/yaml/yaml}")
done
if ((${#missing[@]})); then
  echo "transformers_offline: installing ${missing[*]}" >&2
  apt-get install -y -q "${missing[@]}" >/dev/null
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
site="$work/site"
mkdir -p "$site"
ln -s "$tf/src/transformers" "$site/transformers"
ln -s "$hub/src/huggingface_hub" "$site/huggingface_hub"
cp -r scripts/golden/standins/safetensors scripts/golden/standins/tokenizers "$site/"
# The versions transformers checks at import (importlib.metadata).
version() { sed -n 's/^__version__ = "\(.*\)"/\1/p' "$1"; }
for pkg in safetensors:"$site/safetensors/__init__.py" tokenizers:"$site/tokenizers/__init__.py" \
  huggingface_hub:"$site/huggingface_hub/__init__.py"; do
  name=${pkg%%:*} v=$(version "${pkg#*:}")
  mkdir -p "$site/$name-$v.dist-info"
  printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' "${name//_/-}" "$v" >"$site/$name-$v.dist-info/METADATA"
done
export PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1
"$py" -c 'import transformers, torch; print(f"transformers {transformers.__version__}, torch {torch.__version__}")'

rc=0
echo "== 1. checkpoints (tests/data/hf)"
"$py" scripts/golden/hf_fixtures.py "$work/hf" --check-with-transformers 2>&1 | grep -v '^wrote' || rc=1
diff -rq "$work/hf" tests/data/hf >/dev/null || { echo "the fixtures rebuilt differ from tests/data/hf"; rc=1; }
echo "== 2. WordPiece (tests/data/wordpiece)"
"$py" scripts/golden/wordpiece_reference.py "$work/wp" --check-with-transformers || rc=1
diff -rq "$work/wp" tests/data/wordpiece >/dev/null || { echo "the WordPiece cases rebuilt differ"; rc=1; }
echo "== 3. byte-level BPE (tests/data/bpe)"
"$py" scripts/golden/bpe_reference.py "$work/bpe" --check-with-transformers || rc=1
diff -rq "$work/bpe" tests/data/bpe >/dev/null || { echo "the BPE cases rebuilt differ"; rc=1; }
echo "== 4. ropelab's exports of the imported fixtures"
if [[ -x build/bin/ropelab ]]; then
  for d in tests/data/hf/*/; do
    name=$(basename "$d") data=()
    [[ $name == bert-cls ]] && continue
    [[ $name == roformer-cls ]] && data=(data.source=bible-sst2 data.prepared_dir="$work/prep")
    build/bin/ropelab import-hf "$d" --out "$work/runs/$name" "${data[@]}" >"$work/import.log" 2>&1 &&
      build/bin/ropelab export "$work/runs/$name" --format hf --out "$work/exports/$name" >"$work/export.log" 2>&1 ||
      { echo "$name: import or export failed"; cat "$work/import.log" "$work/export.log"; rc=1; }
  done
  "$py" scripts/golden/hf_fixtures.py "$work/hf2" --check-exports "$work/exports" 2>&1 | grep -v '^wrote' || rc=1
else
  echo "not run: build/bin/ropelab not built"
fi
echo "transformers_offline: $([[ $rc -eq 0 ]] && echo all agree || echo DIFFERENCES)"
exit $rc
