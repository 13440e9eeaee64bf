// The tokenizers of imported checkpoints (tokenizers/wordpiece.h, tokenizers/bpe.h) and the Unicode
// normalisation forms under them, on arbitrary bytes. Properties: no crash and no exception;
// every id inside the vocabulary; byte-level BPE without a normaliser is lossless on valid UTF-8
// (decode(encode(text)) == text, added tokens aside); NFD and NFC are idempotent, and NFC of
// NFD is NFC.
#include "fuzz_util.h"
#include "text/unicode.h"
#include "tokenizers/bpe.h"
#include "tokenizers/wordpiece.h"

using namespace ropelab::tokenizers;
namespace unicode = ropelab::text::unicode;

namespace {
const std::string kData = std::string(ROPELAB_FUZZ_DATA);
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 4096) return 0;
  static const WordPieceTokenizer wp(kData + "/wordpiece/vocab.txt", {});
  static const WordPieceTokenizer wp_cased(kData + "/wordpiece/vocab.txt", {false, false});
  static const BpeTokenizer llama3(kData + "/bpe/llama3/tokenizer.json");
  static const BpeTokenizer qwen2(kData + "/bpe/qwen2/tokenizer.json");
  static const BpeTokenizer gpt2(kData + "/bpe/gpt2/tokenizer.json");
  const std::string text = fuzz::as_string(data, size);
  for (const Tokenizer* t :
       {static_cast<const Tokenizer*>(&wp), static_cast<const Tokenizer*>(&wp_cased)})
    for (int32_t id : t->encode(text))
      if (id < 0 || id >= t->vocab_size()) fuzz::violated("a wordpiece id outside the vocabulary");
  // Strictly valid UTF-8 (no overlong forms, no surrogates): what Rust strings hold.
  const bool valid = unicode::encode_utf8(unicode::decode_utf8(text)) == text;
  for (const BpeTokenizer* t : {&llama3, &qwen2, &gpt2}) {
    auto ids = t->encode(text);
    for (int32_t id : ids)
      if (id < 0 || id >= t->vocab_size()) fuzz::violated("a bpe id outside the vocabulary");
    if (t != &qwen2 && valid && text.find("<|") == std::string::npos && t->decode(ids) != text)
      fuzz::violated("byte-level BPE lost text");
  }
  auto cps = unicode::decode_utf8(text);
  auto d = unicode::nfd(cps), c = unicode::nfc(cps);
  if (unicode::nfd(d) != d) fuzz::violated("NFD is not idempotent");
  if (unicode::nfc(c) != c) fuzz::violated("NFC is not idempotent");
  if (unicode::nfc(d) != c) fuzz::violated("NFC(NFD(x)) != NFC(x)");
  if (unicode::nfd(c) != d) fuzz::violated("NFD(NFC(x)) != NFD(x)");
  return 0;
}
