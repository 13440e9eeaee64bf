// Tokenised datasets in HDF5 (documented in data/README.md, readable with h5py).
//
//   /                      attrs: format="ropelab.tokens", format_version=2, kind (lm |
//                          parallel | glue), split, tokenizer (fingerprint), tokenizer_kind,
//                          vocab_size, source_hash (xxh64 of the input text), ropelab_version;
//                          glue adds task, num_labels (0 = regression)
//   /<seq>/tokens   uint16 [N]    all token ids of the sequences, concatenated (int32 when the
//                                 vocabulary has over 65536 ids; version 1 wrote int32 always)
//   /<seq>/offsets  int64  [M+1]  sequence i is tokens[offsets[i]:offsets[i+1]]
//   /labels         float32 [M]   glue only: class index, or the score for regression
//
// Sequence groups: lm -> "text" (one document per sequence); parallel -> "src", "tgt";
// glue -> "a", "b" (b's sequences are empty for single-sentence tasks), and "c" for ranking
// triplets (a, b, c) only; synthetic -> "tokens" and "scored" (1 where the token is part of the
// answer, else 0; the same offsets).
//
// Both datasets are contiguous and uncompressed, so an lm split is not loaded: its tokens and
// offsets are read where they lie in the file (pread at the datasets' byte offsets), only the
// windows a reader uses (Documents). The other kinds, small by nature, are read whole.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
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

// The documents of an lm split: in memory (built by push), or on disk in a token file and read
// window by window, so that a corpus larger than RAM trains in bounded memory. Reads are
// positioned reads (pread), not a memory map: the process holds only the windows it copies
// (a map's fault-around would count 64 KiB of cached file per random window against it), and a
// file truncated under a run is an error naming it, not a SIGBUS.
class Documents {
 public:
  Documents() = default;
  explicit Documents(Ragged r) : mem_(std::move(r)) {}
  void push(const std::vector<int32_t>& seq);  // in memory only
  int64_t size() const { return count_ >= 0 ? count_ : mem_.size(); }
  int64_t num_tokens() const;
  int64_t start(int64_t i) const;  // where document i begins in the concatenation
  int64_t length(int64_t i) const { return start(i + 1) - start(i); }
  // Tokens [from, from + n) of the concatenated documents into out; every id is checked to be
  // below the vocabulary (UserError naming the file otherwise).
  void read(int64_t from, int64_t n, int32_t* out) const;
  std::vector<int32_t> sequence(int64_t i) const;
  bool on_disk() const { return file_ != nullptr; }
  // All of it in memory (read whole when on disk): for writing and for small splits.
  Ragged to_ragged() const;

  struct File;  // an open token file (tokens.cpp)
  // The datasets at byte offsets of a file: `width` 2 (uint16) or 4 (int32) bytes a token,
  // `count` documents (count + 1 offsets).
  static Documents in_file(std::shared_ptr<const File> f, int64_t tokens_at, int width,
                           int64_t offsets_at, int64_t count, int64_t num_tokens, int64_t vocab);

 private:
  Ragged mem_;
  std::shared_ptr<const File> file_;
  int64_t tokens_at_ = 0, offsets_at_ = 0;
  int width_ = 4;
  int64_t count_ = -1, ntok_ = 0, vocab_ = 0;
};

// The sequences of a split, one struct per kind of data (typed views of TokenDataset).
struct LmSplit {  // lm: one document per sequence
  Documents text;
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
  // Every in-memory sequence group with its HDF5 name, in file order (glue's c only for
  // ranking); none for lm, whose one group, "text", is lm().text.
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

// What this ropelab writes; it reads version 1 too (int32 tokens, loaded the same way).
inline constexpr int64_t kTokensFormatVersion = 2;

// Bytes a token id takes on disk for a vocabulary: 2 (uint16) up to 65536 ids, else 4 (int32).
int token_width(int64_t vocab_size);
// Writes atomically (temp file + rename): a failure never leaves a partial file at `path`.
void write_tokens(const std::string& path, const TokenDataset& ds);
// An lm split from raw files (TokenWriter's): `tokens_bin` holds num_tokens ids of
// token_width(header.vocab_size) bytes, native order; `ends_bin` int64 document ends. Atomic.
void write_lm_from_files(const std::string& path, const TokenDataset& header,
                         const std::string& tokens_bin, const std::string& ends_bin,
                         int64_t documents, int64_t num_tokens);
// Reads and validates (format, version, kind, offsets, ids < vocab_size). UserError naming the
// file on any problem, including a kind other than `expect` (if given). An lm split stays on
// disk, not loaded: its ids are checked as they are read (Documents::read).
TokenDataset read_tokens(const std::string& path, std::optional<DataKind> expect = std::nullopt);
// Only the root attributes (cheap; used for up-to-date checks). Empty map if unreadable.
std::map<std::string, std::string> read_token_attrs(const std::string& path);

}  // namespace ropelab::data
