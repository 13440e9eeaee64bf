#include "util/fs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <vector>

#include "util/error.h"

namespace ropelab::fs {

namespace stdfs = std::filesystem;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void fsync_path(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

void make_dirs(const std::string& dir) {
  std::error_code ec;
  stdfs::create_directories(dir, ec);
  if (ec) throw UserError(dir + ": cannot create directory (" + ec.message() + ")");
}

bool exists(const std::string& path) {
  std::error_code ec;  // an unreadable or over-long path counts as absent, never throws
  return stdfs::exists(path, ec);
}

void commit_atomic(const std::string& path,
                   const std::function<void(const std::string&)>& produce) {
  stdfs::path target(path);
  stdfs::path dir = target.has_parent_path() ? target.parent_path() : stdfs::path(".");
  make_dirs(dir.string());
  std::random_device rd;
  std::string tmp = (dir / ("." + target.filename().string() + ".tmp." +
                            std::to_string(::getpid()) + "." + std::to_string(rd() % 100000)))
                        .string();
  try {
    produce(tmp);
    fsync_path(tmp);
    if (::rename(tmp.c_str(), path.c_str()) != 0)
      throw UserError(path + ": cannot rename into place (" + std::strerror(errno) + ")");
    fsync_path(dir.string());
  } catch (...) {
    std::remove(tmp.c_str());
    throw;
  }
}

void write_file_atomic(const std::string& path, const std::string& contents) {
  commit_atomic(path, [&](const std::string& tmp) {
    FILE* f = std::fopen(tmp.c_str(), "wb");
    if (f == nullptr) throw UserError(path + ": cannot write (" + std::strerror(errno) + ")");
    size_t n = std::fwrite(contents.data(), 1, contents.size(), f);
    int err = errno;
    bool ok = n == contents.size() && std::fflush(f) == 0;
    if (ok) err = 0;
    if (std::fclose(f) != 0 && ok) {
      ok = false;
      err = errno;
    }
    if (!ok) throw UserError(path + ": write failed (" + std::strerror(err) + ")");
  });
}

uint64_t hash_bytes(const std::string& bytes) { return XXH64(bytes.data(), bytes.size(), 0); }

StreamHash::StreamHash() : state_(XXH64_createState()) {
  XXH64_reset(static_cast<XXH64_state_t*>(state_), 0);
}
StreamHash::~StreamHash() { XXH64_freeState(static_cast<XXH64_state_t*>(state_)); }
void StreamHash::update(const std::string& piece) {
  XXH64_update(static_cast<XXH64_state_t*>(state_), piece.data(), piece.size());
}
uint64_t StreamHash::digest() const { return XXH64_digest(static_cast<XXH64_state_t*>(state_)); }

uint64_t hash_file(const std::string& path) {
  // Streamed: a corpus file larger than memory hashes in 1 MiB pieces.
  FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) throw UserError(path + ": cannot read (" + std::strerror(errno) + ")");
  XXH64_state_t* st = XXH64_createState();
  XXH64_reset(st, 0);
  std::vector<char> buf(1 << 20);
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), f)) > 0) XXH64_update(st, buf.data(), n);
  const bool failed = std::ferror(f) != 0;
  std::fclose(f);
  const uint64_t h = XXH64_digest(st);
  XXH64_freeState(st);
  if (failed) throw UserError(path + ": read error");
  return h;
}

std::string hex64(uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016lx", static_cast<unsigned long>(v));
  return buf;
}

}  // namespace ropelab::fs
