// Tokenised datasets in HDF5 (documented in data/README.md, readable with h5py).
//
//   /                      attrs: format="ropelab.tokens", format_version=1, kind (lm |
//                          parallel | glue), split, tokenizer (fingerprint), tokenizer_kind,
//                          vocab_size, source_hash (xxh64 of the input text), ropelab_version;
//                          glue adds task, num_labels (0 = regression)
//   /<seq>/tokens   int32  [N]    all token ids of the sequences, concatenated
//   /<seq>/offsets  int64  [M+1]  sequence i is tokens[offsets[i]:offsets[i+1]]
//   /labels         float32 [M]   glue only: class index, or the score for regression
//
// Sequence groups: lm -> "text" (one document per sequence); parallel -> "src", "tgt";
// glue -> "a", "b" (b's sequences are empty for single-sentence tasks), and "c" for ranking
// triplets (a, b, c) only; synthetic -> "tokens" and "scored" (1 where the token is part of the
// answer, else 0; the same offsets).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ropelab::data {

// A ragged array of token sequences.
struct Ragged {
  std::vector<int32_t> tokens;
  std::vector<int64_t> offsets{0};
  int64_t size() const { return static_cast<int64_t>(offsets.size()) - 1; }
  int64_t length(int64_t i) const { return offsets[i + 1] - offsets[i]; }
  const int32_t* begin(int64_t i) const { return tokens.data() + offsets[i]; }
  void push(const std::vector<int32_t>& seq) {
    tokens.insert(tokens.end(), seq.begin(), seq.end());
    offsets.push_back(static_cast<int64_t>(tokens.size()));
  }
};

struct TokenDataset {
  std::string kind;            // "lm", "parallel", "glue", "synthetic"
  std::string split;           // "train", "valid", "test" (MNLI: also "valid_mismatched")
  std::string tokenizer;       // fingerprint
  std::string tokenizer_kind;  // "spm", "byte"
  int64_t vocab_size = 0;
  std::string source_hash;
  std::string task;        // glue
  int64_t num_labels = 0;  // glue; 0 = regression
  std::map<std::string, Ragged> seqs;
  std::vector<float> labels;
};

inline constexpr int64_t kTokensFormatVersion = 1;

// Writes atomically (temp file + rename): a failure never leaves a partial file at `path`.
void write_tokens(const std::string& path, const TokenDataset& ds);
// Reads and validates (format, version, kind, offsets, ids < vocab_size). UserError naming the
// file on any problem. `expect_kind` empty = any.
TokenDataset read_tokens(const std::string& path, const std::string& expect_kind = "");
// Only the root attributes (cheap; used for up-to-date checks). Empty map if unreadable.
std::map<std::string, std::string> read_token_attrs(const std::string& path);

}  // namespace ropelab::data
