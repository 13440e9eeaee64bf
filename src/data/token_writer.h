// An lm split written as its documents are encoded, in bounded memory, and resumable: the
// format of data/tokens.h, reached through a partial state beside it.
//
//   <dir>/.<split>.h5.part/tokens.bin   the ids so far, uint16 or int32 (as the file will hold)
//                          ends.bin     int64: where each document so far ends
//                          state.json   what they were made from (input hash, tokenizer,
//                                       format) and how many documents and tokens are complete
//
// state.json is replaced atomically after each batch, so after a kill the two .bin files hold
// at least what it records; a resumed writer cuts them back to it. finish() writes <split>.h5
// from them (a temp file renamed into place: the split exists only when it is complete) and
// removes the partial state. A partial state of other input or another tokenizer is discarded.
#pragma once
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "data/tokens.h"

namespace ropelab::data {

class TokenWriter {
 public:
  // `header` carries the split's attributes (kind lm; its documents are ignored).
  TokenWriter(std::string path, const TokenDataset& header);
  ~TokenWriter();
  TokenWriter(const TokenWriter&) = delete;
  TokenWriter& operator=(const TokenWriter&) = delete;

  // Documents and tokens already complete (from a resumed state, then appended).
  int64_t documents() const { return docs_; }
  int64_t tokens() const { return tokens_; }
  // Appends a batch of encoded documents and records it as complete.
  void append(const std::vector<std::vector<int32_t>>& docs);
  // Writes the split's file and removes the partial state.
  void finish();

 private:
  void open_files(bool resume);
  void save_state() const;
  std::string path_, dir_, key_;
  TokenDataset header_;
  int width_;
  std::FILE* tokens_f_ = nullptr;
  std::FILE* ends_f_ = nullptr;
  int64_t docs_ = 0, tokens_ = 0;
};

}  // namespace ropelab::data
