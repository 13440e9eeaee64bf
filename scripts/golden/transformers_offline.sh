#!/usr/bin/env bash
# The Hugging Face parity checks on a machine without PyPI: `transformers` and `huggingface_hub`
# from source trees (git checkouts), run by Debian's python3 and python3-torch, with
# pure-Python stand-ins (scripts/golden/standins/) for the two packages that need Rust:
# `safetensors` (reading only) and `tokenizers` (AddedToken only; anything else raises).
#
#   bash scripts/golden/transformers_offline.sh TRANSFORMERS_TREE HUB_TREE [EXPORTS]
#
# TRANSFORMERS_TREE and HUB_TREE hold src/transformers and src/huggingface_hub, e.g.
# `git archive v4.47.1 src | tar -x -C DIR` of each repository. It runs:
#   1. scripts/golden/hf_fixtures.py --check-with-transformers: every tests/data/hf checkpoint
#      (BERT, RoFormer, Llama, Qwen2, Qwen3, Mistral, each rope_scaling type, sliding windows)
#      loaded by transformers' model classes, its outputs against the reference (and the fixtures rebuilt identical);
#   2. wordpiece_reference.py --check-with-transformers: the slow BertTokenizer;
#   3. bpe_reference.py --check-with-transformers: the slow GPT2Tokenizer and Qwen2Tokenizer
#      (Llama 3's byte-level BPE has no slow class: scripts/golden/tokenizers_check.js runs
#      every case through the real `tokenizers` from the npm registry instead; transformers 5
#      has no slow classes at all, so 2 and 3 need the real `tokenizers` there);
#   4. with build/bin/ropelab: each fixture imported (`ropelab import-hf`) and exported again
#      (`ropelab export --format hf`, in transformers 5's config layout for transformers 5, with
#      --hf-v4 for 4), the export loaded by transformers against the same reference. EXPORTS: a
#      directory of such exports made elsewhere (EXPORTS/v5/NAME and EXPORTS/v4/NAME), e.g. by
#      this script's --make-exports DIR on the machine where ropelab is built, for a Python
#      root where it does not run.
#   The fixtures in transformers 5's layout (NAME-v5-*) are checked with transformers 5 only;
#   the two that import must refuse (no expected.safetensors) are not loaded.
#
#   bash scripts/golden/transformers_offline.sh --make-exports DIR   # step 4's exports only
# Where the real packages are installed, run the three scripts directly instead.
set -euo pipefail
usage() { sed -n '2,/^set /p' "$0" | sed '$d; s/^# \{0,1\}//'; }
case "${1:-}" in -h | --help) usage; exit 0 ;; esac
make_exports() {  # make_exports DIR WORK: each fixture imported and exported into DIR/v5/NAME, DIR/v4/NAME
  local d name data
  for d in tests/data/hf/*/; do
    name=$(basename "$d") data=()
    [[ -f $d/expected.safetensors ]] || continue  # a fixture the import refuses
    # Imported but not exported by design: a SmolLM3 whose NoPE layers slide (a layout kind
    # with positions of its own, which no exported class writes).
    [[ $name == smollm3-v5-swa ]] && { echo "$name: not exported (import only)"; continue; }
    # A classification checkpoint's run names its data (import only records it): MNLI's three
    # labels for bert-cls, the built-in SST-2 for roformer-cls.
    [[ $name == bert-cls ]] && data=(data.source=glue data.glue_task=MNLI data.train="$2/MNLI")
    [[ $name == roformer-cls ]] && data=(data.source=bible-sst2 data.prepared_dir="$2/prep")
    build/bin/ropelab import-hf "$d" --out "$2/runs/$name" "${data[@]}" >"$2/import.log" 2>&1 &&
      build/bin/ropelab export "$2/runs/$name" --format hf --out "$1/v5/$name" >"$2/export.log" 2>&1 ||
      { echo "$name: import or export failed"; cat "$2/import.log" "$2/export.log"; return 1; }
    # transformers 4's layout cannot say a global layer after a sliding one (max_window_layers):
    # that export is refused, by design, and its check says "no export".
    if ! build/bin/ropelab export "$2/runs/$name" --format hf --hf-v4 --out "$1/v4/$name" >>"$2/export.log" 2>&1; then
      grep -q max_window_layers "$2/export.log" || { echo "$name: --hf-v4 export failed"; cat "$2/export.log"; return 1; }
      echo "$name: no --hf-v4 export (its layout needs transformers 5's layer_types)"
    fi
  done
}
if [[ ${1:-} == --make-exports ]]; then
  [[ $# -eq 2 && ! -e $2 ]] || { echo "transformers_offline: --make-exports takes a new directory" >&2; exit 2; }
  out=$(mkdir -p "$2" && cd "$2" && pwd)
  cd "$(dirname "$0")/../.."
  [[ -x build/bin/ropelab ]] || { echo "transformers_offline: build/bin/ropelab not built" >&2; exit 2; }
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  make_exports "$out" "$tmp" && echo "transformers_offline: exports in $out"
  exit
fi
[[ $# -eq 2 || $# -eq 3 ]] || { usage >&2; exit 2; }
exports=""
[[ $# -eq 3 ]] && exports="$(cd "$3" && pwd)"
tf="$(cd "$1" && pwd)" hub="$(cd "$2" && pwd)"
[[ -f "$tf/src/transformers/__init__.py" ]] || { echo "transformers_offline: $1: no src/transformers" >&2; exit 2; }
[[ -f "$hub/src/huggingface_hub/__init__.py" ]] || { echo "transformers_offline: $2: no src/huggingface_hub" >&2; exit 2; }
cd "$(dirname "$0")/../.."
py=/usr/bin/python3
missing=()
for m in torch regex filelock tqdm fsspec yaml requests packaging numpy httpx sentencepiece; do
  "$py" -c "import $m" 2>/dev/null || missing+=("python3-$m")
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
# The versions transformers checks at import (importlib.metadata): huggingface_hub's own, and
# for each stand-in the lowest version this transformers accepts (its dependency table).
table="$tf/src/transformers/dependency_versions_table.py"
lowest() { sed -n "s/.*\"$1\": \"$1>=\([0-9.]*\).*/\1/p" "$table" | head -1; }
hub_version=$(sed -n 's/^__version__ = "\(.*\)"/\1/p' "$site/huggingface_hub/__init__.py")
dist_info() { mkdir -p "$site/$1-$2.dist-info" && printf 'Metadata-Version: 2.1\nName: %s\nVersion: %s\n' \
  "${1//_/-}" "$2" >"$site/$1-$2.dist-info/METADATA"; }
dist_info safetensors "$(lowest safetensors)"
dist_info tokenizers "$(lowest tokenizers)"
dist_info huggingface_hub "$hub_version"
# Debian's python3-regex may be older than a recent transformers pins. The checks run regex only
# in the slow BPE tokenizers' pre-tokenizer pattern, so an older one is presented as the pinned
# version, and said so.
want=$(lowest regex)
have=$("$py" -c 'import importlib.metadata as m; print(m.version("regex"))')
if [[ -n $want ]] && [[ $(printf '%s\n%s\n' "$have" "$want" | sort -V | head -1) != "$want" ]]; then
  echo "transformers_offline: python3-regex $have is older than this transformers pins ($want): presented as $want"
  dist_info regex "$want"
fi
export PYTHONPATH="$site" PYTHONDONTWRITEBYTECODE=1
"$py" -c 'import transformers, torch; print(f"transformers {transformers.__version__}, torch {torch.__version__}")'

rc=0
echo "== 1. checkpoints (tests/data/hf)"
"$py" scripts/golden/hf_fixtures.py "$work/hf" --check-with-transformers 2>&1 | grep -v '^wrote' || rc=1
diff -rq "$work/hf" tests/data/hf >/dev/null || { echo "the fixtures rebuilt differ from tests/data/hf"; rc=1; }
# transformers 5 dropped the pure-Python ("slow") tokenizer classes: every tokenizer runs on the
# Rust `tokenizers`, which the stand-in is not (scripts/golden/tokenizers_check.js runs it).
major=$("$py" -c 'import transformers; print(transformers.__version__.split(".")[0])')
tokenizer_step() {  # tokenizer_step N TITLE SCRIPT DATA
  echo "== $1. $2 (tests/data/$4)"
  if ((major >= 5)); then
    echo "not checked: transformers $major has no pure-Python tokenizers (needs the Rust tokenizers)"
    return
  fi
  "$py" "scripts/golden/$3" "$work/$4" --check-with-transformers || rc=1
  diff -rq "$work/$4" "tests/data/$4" >/dev/null || { echo "the $2 cases rebuilt differ"; rc=1; }
}
tokenizer_step 2 WordPiece wordpiece_reference.py wordpiece
tokenizer_step 3 "byte-level BPE" bpe_reference.py bpe
echo "== 4. ropelab's exports of the imported fixtures"
if [[ -z $exports && -x build/bin/ropelab ]]; then
  exports="$work/exports"
  make_exports "$exports" "$work" || rc=1
fi
if [[ -n $exports ]]; then
  echo "(the exports in transformers $major's config layout: $exports/v$major)"
  "$py" scripts/golden/hf_fixtures.py "$work/hf2" --check-exports "$exports/v$major" 2>&1 | grep -v '^wrote' || rc=1
else
  echo "not run: build/bin/ropelab not built, and no EXPORTS given"
fi
echo "transformers_offline: $([[ $rc -eq 0 ]] && echo all agree || echo DIFFERENCES)"
exit $rc
