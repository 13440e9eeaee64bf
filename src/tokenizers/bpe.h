// Byte-level BPE (Sennrich et al. 2016; GPT-2's byte alphabet, Radford et al. 2019) from a Hugging
// Face tokenizer.json, as the `tokenizers` library runs it for Llama 3, Qwen2 and GPT-2-style
// checkpoints:
//
//   1. added tokens (tokenizer.json's added_tokens: <|begin_of_text|>, <|im_start|>, ...)
//      written in the text are split out first, verbatim, longest first;
//   2. the normaliser: none, or NFC (Qwen2);
//   3. the pre-tokeniser's regex: Llama 3's, Qwen2's (the same with single digits) or GPT-2's
//      (ByteLevel with use_regex), run by hand-written scanners; tokenizer.json's pattern text
//      picks the scanner, and another pattern is refused, naming it;
//   4. each piece's UTF-8 bytes in GPT-2's printable byte alphabet, then the merges by rank, the
//      lowest first, leftmost among equals (ignore_merges: a piece the vocabulary holds whole is
//      one token, as Llama 3 asks).
//
// \s is Unicode's White_Space, \p{L} and \p{N} the letter and number categories (text/unicode.h).
// Ids: tokenizer.json's, re-numbered through `order` where given (tokenizers::special_first_order;
// the order may be longer than the tokenizer when the checkpoint pads its embeddings).
// Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizers/tokenizer.h"

namespace ropelab::tokenizers {

// The pre-tokeniser regexes ropelab runs.
enum class BpeSplit { kGpt2, kLlama3, kQwen2 };
// Step 3 on normalised text: the pieces, as UTF-8 (exposed for tests).
std::vector<std::string> bpe_pre_tokenize(const std::string& text, BpeSplit split);

struct AddedToken {
  std::string content;
  int32_t id = 0;
  bool special = false;
};

class BpeTokenizer final : public Tokenizer {
 public:
  // UserError naming the file and the key for anything it cannot run exactly.
  explicit BpeTokenizer(const std::string& tokenizer_json, std::vector<int64_t> order = {});
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override;
  std::string kind() const override { return "bpe"; }
  std::string fingerprint() const override { return fingerprint_; }
  std::string piece(int32_t id) const override;

  // tokenizer.json's own ids (before re-numbering).
  std::vector<int32_t> encode_original(const std::string& text) const;
  // Its ids run 0..size()-1 (vocabulary and added tokens).
  int64_t size() const { return static_cast<int64_t>(pieces_.size()); }
  const std::vector<AddedToken>& added_tokens() const { return added_; }
  int32_t id_of(const std::string& token) const;  // -1 if absent

 private:
  void load();  // reads path_
  void encode_piece(const std::string& piece, std::vector<int32_t>& out) const;

  std::string path_, fingerprint_;
  BpeSplit split_ = BpeSplit::kGpt2;
  bool nfc_ = false, ignore_merges_ = false;
  std::unordered_map<std::string, int32_t> vocab_;
  std::unordered_map<std::string, int32_t> ranks_;  // "a\x01b" -> merge rank
  std::vector<std::string> pieces_;                 // by tokenizer.json id ("" for a gap)
  std::vector<AddedToken> added_;                   // longest first
  std::vector<int64_t> order_;
  std::vector<int32_t> to_ropelab_;
};

}  // namespace ropelab::tokenizers
