// `ropelab prepare`: corpus text -> tokenizer -> HDF5 token datasets, per split.
//
// Layout under data.prepared_dir (default data/prepared):
//   text/<source>/...                 plain text of each split (built-in corpora are exported
//                                     here by diatheke; user data is read in place)
//   <source>/<tokenizer tag>/tokenizer.model  (spm) and <split>.h5
//
// Idempotent: a stage whose inputs did not change is skipped (the dataset's source_hash and
// tokenizer attributes are compared with the current ones); a changed input or tokenizer
// rebuilds what depends on it. Atomic: every file is written to a temp name and renamed.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "config/schema.h"
#include "data/tokens.h"
#include "text/tokenizer.h"

namespace ropelab::data {

struct Prepared {
  std::string kind;                           // lm | parallel | glue
  std::string tokenizer_path;                 // spm model ("" for byte)
  std::string tokenizer_kind;                 // spm | byte
  std::map<std::string, std::string> splits;  // split name -> .h5 path
};

// Which dataset kind a data source gives.
std::string kind_of_source(const std::string& source);

// Runs every stage that is out of date. `threads` bounds SentencePiece training/encoding.
Prepared prepare(const config::DataConfig& data, int threads);
// The paths prepare() would produce, without doing anything (UserError if not prepared yet).
Prepared prepared_paths(const config::DataConfig& data);

std::unique_ptr<text::Tokenizer> load_tokenizer(const Prepared& p);
// Reads a prepared split and checks it was made with `tok` (UserError otherwise).
TokenDataset load_split(const Prepared& p, const std::string& split, const text::Tokenizer& tok);

// Exports a built-in Bible corpus as text files under `dir` (skipped when up to date).
void export_builtin_text(const std::string& source, const std::string& dir);

}  // namespace ropelab::data
