#!/usr/bin/env node
// The tokenizer cases of tests/data/wordpiece and tests/data/bpe against Hugging Face's own
// `tokenizers` (the Rust library), through its Node binding: the npm package `tokenizers`,
// which ships the compiled library for linux-x64. For machines without PyPI but with the npm
// registry (Python's `tokenizers` needs PyPI or a Rust build).
//
//   npm install --prefix /tmp/hf-tokenizers tokenizers@0.23.2
//   node scripts/golden/tokenizers_check.js /tmp/hf-tokenizers/node_modules/tokenizers
//
// WordPiece: each case through the pipeline BertTokenizerFast builds from a vocab.txt
// (transformers' BertConverter): BertNormalizer (clean text, CJK split, the case's lowercase
// and strip_accents), BertPreTokenizer, WordPiece with [UNK], and the five specials as added
// special tokens. Byte-level BPE: each layout's tokenizer.json as it stands (Llama 3, Qwen2,
// GPT-2). Compares the ids, without special tokens added; exits 1 on any difference.
'use strict';
const fs = require('fs');
const path = require('path');

if (process.argv.length !== 3 || process.argv[2] === '--help' || process.argv[2] === '-h') {
  console.error('usage: node scripts/golden/tokenizers_check.js PATH/node_modules/tokenizers');
  process.exit(process.argv.length === 3 ? 0 : 2);
}
const tk = require(path.resolve(process.argv[2]));
const data = path.join(__dirname, '..', '..', 'tests', 'data');
const version = JSON.parse(fs.readFileSync(path.join(process.argv[2], 'package.json'))).version;

function compare(label, got, want, text) {
  if (JSON.stringify(got) === JSON.stringify(want)) return 0;
  console.log(`differs: ${label} ${JSON.stringify(text)} ${JSON.stringify(got)} ${JSON.stringify(want)}`);
  return 1;
}

async function wordpiece() {
  const dir = path.join(data, 'wordpiece');
  const lines = fs.readFileSync(path.join(dir, 'vocab.txt'), 'utf8').split('\n');
  const vocab = {};
  lines.forEach((t, i) => { if (t !== '' || i < lines.length - 1) vocab[t] = i; });
  const cases = JSON.parse(fs.readFileSync(path.join(dir, 'cases.json'), 'utf8'));
  let bad = 0;
  for (const c of cases) {
    const tok = new tk.Tokenizer(tk.WordPiece.init(vocab, { unkToken: '[UNK]' }));
    tok.setNormalizer(tk.bertNormalizer({
      cleanText: true, handleChineseChars: true, stripAccents: c.strip_accents,
      lowercase: c.lowercase,
    }));
    tok.setPreTokenizer(tk.bertPreTokenizer());
    tok.addSpecialTokens(['[UNK]', '[SEP]', '[PAD]', '[CLS]', '[MASK]']);
    const enc = await tok.encode(c.text, null, { addSpecialTokens: false });
    bad += compare(`wordpiece lowercase=${c.lowercase} strip_accents=${c.strip_accents}`,
                   enc.getIds(), c.ids, c.text);
  }
  console.log(`wordpiece: tokenizers ${version} agrees on ${cases.length - bad}/${cases.length} cases`);
  return bad;
}

async function bpe() {
  const dir = path.join(data, 'bpe');
  const cases = JSON.parse(fs.readFileSync(path.join(dir, 'cases.json'), 'utf8'));
  let bad = 0;
  for (const style of ['llama3', 'qwen2', 'gpt2']) {
    const tok = tk.Tokenizer.fromFile(path.join(dir, style, 'tokenizer.json'));
    const mine = cases.filter((c) => c.tokenizer === style);
    let wrong = 0;
    for (const c of mine) {
      const enc = await tok.encode(c.text, null, { addSpecialTokens: false });
      wrong += compare(style, enc.getIds(), c.ids, c.text);
    }
    console.log(`${style}: tokenizers ${version} agrees on ${mine.length - wrong}/${mine.length} cases`);
    bad += wrong;
  }
  return bad;
}

(async () => {
  const bad = (await wordpiece()) + (await bpe());
  process.exit(bad ? 1 : 0);
})().catch((e) => {
  console.error(`tokenizers_check: ${e.message}`);
  process.exit(1);
});
