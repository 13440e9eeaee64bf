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
#include <optional>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "config/schema.h"

namespace ropelab::data {

using config::DataKind;  // lm, parallel, glue, synthetic: the variant's order below

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

// The sequences of a split, one struct per kind of data (typed views of TokenDataset).
struct LmSplit {  // lm: one document per sequence
  Ragged text;
};
struct ParallelSplit {  // parallel: sentence pairs
  Ragged src, tgt;
};
struct GlueSplit {  // glue: sentence (pairs); ranking triplets add c
  Ragged a, b, c;   // b's sequences are empty for single-sentence tasks; c empty unless ranking
  std::vector<float> labels;  // per example: class index, score (regression), < 0 = unlabeled
  bool ranking() const { return c.size() > 0; }
};
struct SyntheticSplit {  // synthetic: examples, and which of their tokens are the answer
  Ragged tokens, scored;
};

struct TokenDataset {
  std::string split;           // "train", "valid", "test" (MNLI: also "valid_mismatched")
  std::string tokenizer;       // fingerprint
  std::string tokenizer_kind;  // "spm", "byte", "synthetic"
  int64_t vocab_size = 0;
  std::string source_hash;
  std::string task;        // glue
  int64_t num_labels = 0;  // glue; 0 = regression
  std::variant<LmSplit, ParallelSplit, GlueSplit, SyntheticSplit> seqs;

  DataKind kind() const { return static_cast<DataKind>(seqs.index()); }
  // The typed views: UserError naming the split if it holds another kind of data.
  const LmSplit& lm() const { return view<LmSplit>(DataKind::kLm); }
  const ParallelSplit& parallel() const { return view<ParallelSplit>(DataKind::kParallel); }
  const GlueSplit& glue() const { return view<GlueSplit>(DataKind::kGlue); }
  const SyntheticSplit& synthetic() const { return view<SyntheticSplit>(DataKind::kSynthetic); }
  LmSplit& lm() { return const_cast<LmSplit&>(std::as_const(*this).lm()); }
  ParallelSplit& parallel() { return const_cast<ParallelSplit&>(std::as_const(*this).parallel()); }
  GlueSplit& glue() { return const_cast<GlueSplit&>(std::as_const(*this).glue()); }
  SyntheticSplit& synthetic() {
    return const_cast<SyntheticSplit&>(std::as_const(*this).synthetic());
  }
  // Per-example labels (glue); empty for the other kinds.
  const std::vector<float>& labels() const;
  // Every sequence group with its HDF5 name, in file order (glue's c only for ranking).
  std::vector<std::pair<const char*, const Ragged*>> groups() const;

 private:
  template <class S>
  const S& view(DataKind k) const {
    if (kind() != k) wrong_kind(k);
    return std::get<S>(seqs);
  }
  [[noreturn]] void wrong_kind(DataKind wanted) const;
};

// An empty dataset of `kind`.
TokenDataset empty_dataset(DataKind kind);

inline constexpr int64_t kTokensFormatVersion = 1;

// Writes atomically (temp file + rename): a failure never leaves a partial file at `path`.
void write_tokens(const std::string& path, const TokenDataset& ds);
// Reads and validates (format, version, kind, offsets, ids < vocab_size). UserError naming the
// file on any problem, including a kind other than `expect` (if given).
TokenDataset read_tokens(const std::string& path, std::optional<DataKind> expect = std::nullopt);
// Only the root attributes (cheap; used for up-to-date checks). Empty map if unreadable.
std::map<std::string, std::string> read_token_attrs(const std::string& path);

}  // namespace ropelab::data
