// `ropelab prepare`: corpus text -> tokenizer -> HDF5 token datasets, per split.
//
// Layout under data.prepared_dir (default data/prepared):
//   text/<source>/...                 plain text of each split (built-in corpora are exported
//                                     here by diatheke; user data is read in place)
//   <source>/<tokenizer tag>/tokenizer.model  (spm) and <split>.h5
//   <source>/<tokenizer tag>/.<split>.h5.part/  an lm split being written (data/token_writer.h)
//
// lm splits stream: documents are read, encoded on all threads and appended batch by batch, so
// memory does not grow with the corpus, and an interrupted prepare resumes where it stopped.
//
// Idempotent: a stage whose inputs did not change is skipped (the dataset's source_hash and
// tokenizer attributes are compared with the current ones); a changed input or tokenizer
// rebuilds what depends on it. Atomic: every file is written to a temp name and renamed.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "config/schema.h"
#include "corpora/glue.h"
#include "data/tokens.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/wordpiece.h"

namespace ropelab::data {

// A data config resolved once, before anything is read or written: its kind, where each split's
// input text lives (built-in corpora: where it is exported), the GLUE layout, the tokenizer and
// where the prepared files go. Everything downstream (prepare, Data, the tasks' data kind) reads
// the plan, not the config.
struct SplitSource {
  std::string split;               // train, valid, test (MNLI: also *_mismatched)
  std::vector<std::string> files;  // lm: its shards; parallel: source, target; glue: 1 TSV
  bool optional = false;           // GLUE test files: used when present
};
struct Plan {
  config::DataSource source = config::DataSource::kBibleEn;
  config::DataKind kind = config::DataKind::kLm;
  bool builtin = false;            // a built-in corpus, exported to text_dir by prepare
  bool whole_file = false;         // `bytes`: each file is one document, not one per line
  std::string document_separator;  // `text`: a line equal to it ends a document ("": each line)
  config::TextFormat format = config::TextFormat::kAuto;  // text/bytes files: lines or JSONL
  std::string text_field = "text";                        // JSONL: the document's field
  // The text SentencePiece learns from when not the train split's lines (bible-en-books: its
  // chapters, since SentencePiece drops lines over 4192 bytes and a book is one line); "" = them.
  std::string tokenizer_text;
  std::string text_dir;             // built-in: where its text is exported; else ""
  std::vector<SplitSource> inputs;  // not for synthetic sources
  corpora::GlueTask glue;           // glue data: the layout of its TSV files
  config::TokenizerConfig tokenizer;
  std::string out_dir;                // <prepared_dir>/<source>/<tokenizer tag>
  std::vector<std::string> splits;    // the splits out_dir may hold
  std::string tokenizer_path;         // spm model ("" for byte); the source side's if separate
  std::string target_tokenizer_path;  // separate vocabularies: the target side's; else ""
  config::SyntheticConfig synthetic;  // synthetic sources: the generator's settings
};
// `max_len`: the longest sequence the model reads (task.seq_len); synthetic examples must fit
// it. UserError naming the key when data.synthetic is out of the generator's bounds.
Plan plan(const config::DataConfig& d, int64_t max_len);

// The documents of a text file (gzip or zstd too): one per non-empty line, or with `separator`
// the lines between separator lines joined by newlines (empty documents dropped). The reader
// prepare streams with (text::DocumentReader), read whole; UserError naming the file if it
// holds no document.
std::vector<std::string> read_documents(const std::string& path, const std::string& separator);

// What a prepared plan holds.
struct Prepared {
  Plan plan;
  std::map<std::string, std::string> splits;  // split name -> .h5 path
};

// Runs every stage that is out of date. `threads` bounds SentencePiece training/encoding.
// Stopped (SIGINT/SIGTERM) or killed during an lm split, the next prepare resumes it.
Prepared prepare(const Plan& p, int threads);
// The files prepare() would produce, without doing anything (UserError if not prepared yet).
Prepared prepared_paths(const Plan& p);

std::unique_ptr<tokenizers::Tokenizer> load_tokenizer(const Plan& p);
// data.tokenizer's wordpiece options (strip_accents auto: as lowercase).
tokenizers::WordPieceOptions wordpiece_options(const config::TokenizerConfig& t);
// The target side's tokenizer with separate vocabularies; nullptr with a joint one.
std::unique_ptr<tokenizers::Tokenizer> load_target_tokenizer(const Plan& p);
// What a prepared split records as its tokenizer: the joint one's fingerprint, or both sides'.
std::string fingerprint(const tokenizers::Tokenizer& tok, const tokenizers::Tokenizer* target);
// Reads a prepared split and checks it was made with tokenizers of `fingerprint`.
TokenDataset load_split(const Prepared& p, const std::string& split,
                        const std::string& fingerprint);

// A run's data, opened: the prepared paths, the tokenizer, and its splits on demand. The one
// place that does the prepare -> tokenizer -> splits sequence (train, eval and bench use it).
class Data {
 public:
  // prepare = true runs every out-of-date stage first; false only opens what exists
  // (UserError with a HINT if it was never prepared).
  Data(const Plan& plan, int threads, bool prepare);
  const Prepared& prepared() const { return prepared_; }
  // The tokenizer of all input text (the source side's with separate vocabularies) and the
  // one of target text (the same object unless the vocabularies are separate).
  const tokenizers::Tokenizer& tokenizer() const { return *tok_; }
  const tokenizers::Tokenizer& target_tokenizer() const {
    return target_tok_ ? *target_tok_ : *tok_;
  }
  // The model's (output) vocabulary; the source side's when separate, else 0 (shared).
  int64_t vocab_size() const { return target_tokenizer().vocab_size(); }
  int64_t source_vocab_size() const { return target_tok_ ? tok_->vocab_size() : 0; }
  bool has_split(const std::string& split) const { return prepared_.splits.count(split) != 0; }
  TokenDataset split(const std::string& name) const;  // UserError if absent

 private:
  Prepared prepared_;
  std::unique_ptr<tokenizers::Tokenizer> tok_, target_tok_;
};

}  // namespace ropelab::data
