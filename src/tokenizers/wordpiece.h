// BERT's WordPiece tokenizer (Devlin et al. 2019; Wu et al. 2016), as Hugging Face's fast
// BertTokenizer runs it, for checkpoints that come with a vocab.txt (BERT, RoFormer).
//
//   1. special tokens written in the text ([CLS], [SEP], [MASK], [PAD], [UNK]) are split out
//      first and kept verbatim;
//   2. normalisation (BertNormalizer): drop U+0000, U+FFFD and every character of category C*
//      except tab, newline and carriage return; turn whitespace (Unicode White_Space) into
//      spaces; put spaces around CJK ideographs; with strip_accents, NFD then drop the
//      non-spacing marks (Mn); with lowercase, each character's full lowercase mapping;
//   3. pre-tokenisation (BertPreTokenizer): split on whitespace, and every punctuation
//      character (ASCII punctuation or category P*) is a word of its own;
//   4. WordPiece: each word greedily, longest vocabulary entry first, continuations prefixed
//      with "##"; a word of more than 100 characters, or one that cannot be covered, is [UNK].
//
// The Unicode tables come from Python's unicodedata (scripts/gen_unicode_tables.py). Hugging
// Face's Rust normaliser takes the categories from an older Unicode release, so characters
// assigned since then (recent emoji) may be dropped there and kept here; docs/tokenizers.md has
// the details.
//
// ids: vocab.txt's line numbers re-numbered so that [PAD] [UNK] [CLS] [SEP] [MASK] sit at
// ropelab's special ids (tokenizers::special_first_order); vocab_order() maps back. Torch-free.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "tokenizers/tokenizer.h"
#include "tokenizers/vocab_order.h"

namespace ropelab::tokenizers {

struct WordPieceOptions {
  bool lowercase = true;
  bool strip_accents = true;
};

// Step 2 on a text without special tokens (exposed for tests).
std::string bert_normalize(const std::string& text, const WordPieceOptions& o);
// Step 3 on normalised text.
std::vector<std::string> bert_pre_tokenize(const std::string& normalized);

// A vocab.txt, one token per line: its tokens in id order. UserError naming the file if it is
// missing or empty. A token listed twice keeps its last line's id (as transformers reads it).
std::vector<std::string> read_vocab_txt(const std::string& path);
// The re-numbering of a WordPiece vocabulary: special_first_order with its [PAD], [UNK], [CLS],
// [SEP] and [MASK] (UserError naming `path` if one is missing).
std::vector<int64_t> wordpiece_order(const std::vector<std::string>& tokens,
                                     const std::string& path);

class WordPieceTokenizer final : public Tokenizer {
 public:
  WordPieceTokenizer(const std::string& vocab_path, const WordPieceOptions& o);
  std::vector<int32_t> encode(const std::string& text) const override;
  std::string decode(const std::vector<int32_t>& ids) const override;
  int64_t vocab_size() const override { return static_cast<int64_t>(pieces_.size()); }
  std::string kind() const override { return "wordpiece"; }
  std::string fingerprint() const override { return fingerprint_; }
  std::string piece(int32_t id) const override;
  // ropelab id r is vocab.txt's line vocab_order()[r].
  const std::vector<int64_t>& vocab_order() const { return order_; }

 private:
  void encode_word(const std::string& word, std::vector<int32_t>& out) const;

  WordPieceOptions opt_;
  std::vector<std::string> pieces_;  // by ropelab id
  std::unordered_map<std::string, int32_t> id_;
  std::vector<std::pair<std::string, int32_t>> specials_;  // written in text, matched verbatim
  std::vector<int64_t> order_;
  std::string fingerprint_;
};

}  // namespace ropelab::tokenizers
