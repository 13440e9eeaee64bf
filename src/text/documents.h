// Corpora as researchers ship them, read as a stream of documents in bounded memory:
//   - formats: plain text (a document per line, or the lines between separator lines), JSONL
//     (one JSON object per line, the document in a named string field, as Hugging Face datasets
//     export and the Pile and SlimPajama ship), or whole files (one document each);
//   - compression: gzip (RFC 1952, concatenated members too) and zstd (RFC 8878) frames,
//     recognised by their magic bytes, whatever the file is called;
//   - shards: a directory (its files in name order) or a glob pattern, read one after another.
// A bad input is a UserError naming the file and line: invalid UTF-8, a malformed JSON line, a
// missing or non-string field, a truncated compressed stream, a shard with no document.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "util/error.h"

namespace ropelab::text {

// The files a data path names, in a stable order: a file; a directory's regular files
// (hidden ones skipped) sorted by name; or a glob pattern's matches sorted by name. UserError
// naming `key` when nothing matches or a directory is empty.
std::vector<std::string> expand_shards(const std::string& path, const std::string& key);

// True when `path` (less a .gz/.zst suffix) names JSON lines: .jsonl, .ndjson or .json.
bool looks_like_jsonl(const std::string& path);

// A file's bytes, decompressed when it starts with a gzip or zstd magic number.
class ByteStream {
 public:
  virtual ~ByteStream() = default;
  // Up to n bytes into buf; 0 at the end. UserError naming the file when the compressed stream
  // is corrupt or ends inside a frame.
  virtual size_t read(char* buf, size_t n) = 0;
  // Bytes of the file itself consumed so far (compressed bytes: progress against its size).
  virtual int64_t consumed() const = 0;
};
std::unique_ptr<ByteStream> open_bytes(const std::string& path);

// A file's lines (the '\n' and a trailing '\r' removed), each checked to be UTF-8.
class LineReader {
 public:
  explicit LineReader(const std::string& path);
  // The next line into `line`; false at the end of the file.
  bool next(std::string* line);
  int64_t line_number() const { return line_no_; }  // of the line last returned, from 1
  int64_t consumed() const { return in_->consumed(); }

 private:
  std::string path_;
  std::unique_ptr<ByteStream> in_;
  std::string buf_;
  size_t pos_ = 0;
  bool eof_ = false;
  int64_t line_no_ = 0;
};

enum class Format { kText, kJsonl, kAuto };  // kAuto: looks_like_jsonl, file by file
struct DocumentOptions {
  Format format = Format::kText;  // kJsonl: JSON lines, the document in `field`
  std::string field = "text";
  std::string separator;    // plain text: a line equal to it ends a document ("": each line)
  bool whole_file = false;  // each file is one document (its raw bytes, not UTF-8 checked)
};

struct Document {
  std::string text;
  std::string file;  // where it came from, for messages
  int64_t line = 0;  // its first line
};

// The documents of a list of shards, in order. Empty documents are dropped (JSONL: an empty
// string field); a shard that yields none is a UserError naming it.
class DocumentReader {
 public:
  DocumentReader(std::vector<std::string> files, DocumentOptions o);
  bool next(Document* d);
  // Bytes of the files consumed so far, and their total size (for progress and ETA).
  int64_t consumed() const;
  int64_t total_bytes() const { return total_; }

 private:
  bool open_next_file();
  UserError empty_file(const std::string& path) const;
  bool next_from_lines(Document* d);
  std::vector<std::string> files_;
  DocumentOptions o_;
  size_t file_ = 0;  // the next file to open
  std::unique_ptr<LineReader> lines_;
  int64_t docs_in_file_ = 0, done_bytes_ = 0, total_ = 0;
  bool jsonl_ = false;   // the open file's format
  std::string pending_;  // separator mode: the document being assembled
  int64_t pending_line_ = 0;
};

// The text of a JSONL line's `field`: UserError naming file:line when the line is not a JSON
// object or the field is missing or not a string.
std::string json_field(const std::string& line, const std::string& field, const std::string& file,
                       int64_t line_no);

}  // namespace ropelab::text
