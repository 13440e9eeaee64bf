// File helpers: whole-file reads, crash-safe writes, content hashes.
//
// Every file ropelab produces for the user (configs, datasets, checkpoints) is written to a
// temporary name in the same directory, fsync'ed, then renamed over the target, and the
// directory is fsync'ed: a failed or killed command never leaves a half-written file where a
// good one is expected (docs/platform-notes.md, "Checkpoints").
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace ropelab::fs {

std::string read_file(const std::string& path);  // UserError naming the file on failure
void write_file_atomic(const std::string& path, const std::string& contents);
// Lets `produce` write into a temp path next to `path`, then commits it atomically.
// If `produce` throws, the temp file is removed and the target is untouched.
void commit_atomic(const std::string& path, const std::function<void(const std::string&)>& produce);
void fsync_path(const std::string& path);
void make_dirs(const std::string& dir);
bool exists(const std::string& path);

uint64_t hash_bytes(const std::string& bytes);  // xxh64, seed 0
// hash_bytes of a text given in pieces: the same value, without holding the text.
class StreamHash {
 public:
  StreamHash();
  ~StreamHash();
  StreamHash(const StreamHash&) = delete;
  StreamHash& operator=(const StreamHash&) = delete;
  void update(const std::string& piece);
  uint64_t digest() const;

 private:
  void* state_;
};
uint64_t hash_file(const std::string& path);
std::string hex64(uint64_t v);

}  // namespace ropelab::fs
