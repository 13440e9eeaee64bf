# The WordPiece and byte-level BPE cases (tests/data/wordpiece, tests/data/bpe), whose ids
# ropelab's tokenizers are tested against, checked against Hugging Face's own Rust `tokenizers`
# (0.23.2, through its Node binding from the npm registry; scripts/golden/tokenizers_check.js).
# Skipped (exit 77), with the reason, where node and npm are missing or the registry cannot be
# reached. The package is installed once into the build tree.
source "$(dirname "$0")/lib.sh"
skip() { echo "SKIPPED: $*"; exit 77; }
command -v node >/dev/null && command -v npm >/dev/null ||
  skip "node and npm are not installed (the check runs Hugging Face's tokenizers through Node)"
pkg="$ROPELAB_BUILD/npm-tokenizers/node_modules/tokenizers"
if [[ ! -f $pkg/package.json ]]; then
  npm install --prefix "$ROPELAB_BUILD/npm-tokenizers" --no-audit --no-fund --loglevel=error \
    tokenizers@0.23.2 >"$WORK/npm.log" 2>&1 ||
    skip "npm could not install tokenizers@0.23.2: $(tail -1 "$WORK/npm.log")"
fi
expect_exit 0 node "$ROPELAB_SRC/scripts/golden/tokenizers_check.js" "$pkg"
echo "$OUT"
for line in "wordpiece: tokenizers 0.23.2 agrees on 64/64 cases" \
            "llama3: tokenizers 0.23.2 agrees on 14/14 cases" \
            "qwen2: tokenizers 0.23.2 agrees on 14/14 cases" \
            "gpt2: tokenizers 0.23.2 agrees on 14/14 cases"; do
  expect_in "$line"
done
