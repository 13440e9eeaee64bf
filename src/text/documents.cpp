#include "text/documents.h"

#include <glob.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "text/lines.h"
#include "util/error.h"

namespace ropelab::text {

namespace stdfs = std::filesystem;

std::vector<std::string> expand_shards(const std::string& path, const std::string& key) {
  std::vector<std::string> out;
  std::error_code ec;
  if (stdfs::is_directory(path, ec)) {
    for (const auto& e : stdfs::directory_iterator(path, ec)) {
      const std::string name = e.path().filename().string();
      if (!name.empty() && name[0] != '.' && e.is_regular_file()) out.push_back(e.path().string());
    }
    if (out.empty()) throw UserError(path + ": the directory holds no file (" + key + ")");
  } else if (path.find_first_of("*?[") != std::string::npos) {
    glob_t g{};
    const int rc = ::glob(path.c_str(), 0, nullptr, &g);
    for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i)
      if (stdfs::is_regular_file(g.gl_pathv[i], ec)) out.emplace_back(g.gl_pathv[i]);
    globfree(&g);
    if (out.empty()) throw UserError(path + ": the pattern matches no file (" + key + ")");
  } else {
    if (!stdfs::exists(path, ec)) throw UserError(path + ": no such file (" + key + ")");
    return {path};
  }
  std::sort(out.begin(), out.end());
  return out;
}

bool looks_like_jsonl(const std::string& path) {
  stdfs::path p(path);
  if (p.extension() == ".gz" || p.extension() == ".zst" || p.extension() == ".zstd") p = p.stem();
  const auto ext = p.extension().string();
  return ext == ".jsonl" || ext == ".ndjson" || ext == ".json";
}

namespace {

constexpr size_t kChunk = 1 << 20;

class PlainStream : public ByteStream {
 public:
  PlainStream(std::FILE* f, std::string path) : f_(f), path_(std::move(path)) {}
  ~PlainStream() override { std::fclose(f_); }
  size_t read(char* buf, size_t n) override {
    size_t got = std::fread(buf, 1, n, f_);
    if (got == 0 && std::ferror(f_)) throw UserError(path_ + ": read error");
    done_ += static_cast<int64_t>(got);
    return got;
  }
  int64_t consumed() const override { return done_; }

 private:
  std::FILE* f_;
  std::string path_;
  int64_t done_ = 0;
};

// gzip: zlib's inflate with automatic header detection, member after member.
class GzipStream : public ByteStream {
 public:
  GzipStream(std::FILE* f, std::string path) : f_(f), path_(std::move(path)), in_(kChunk) {
    if (inflateInit2(&z_, 16 + MAX_WBITS) != Z_OK) throw UserError(path_ + ": zlib init failed");
  }
  ~GzipStream() override {
    inflateEnd(&z_);
    std::fclose(f_);
  }
  size_t read(char* buf, size_t n) override {
    z_.next_out = reinterpret_cast<Bytef*>(buf);
    z_.avail_out = static_cast<uInt>(n);
    while (z_.avail_out == n) {
      if (z_.avail_in == 0) {
        size_t got = std::fread(in_.data(), 1, in_.size(), f_);
        done_ += static_cast<int64_t>(got);
        if (got == 0) {
          if (in_member_) throw UserError(path_ + ": truncated gzip stream (it ends mid-member)");
          return 0;
        }
        z_.next_in = reinterpret_cast<Bytef*>(in_.data());
        z_.avail_in = static_cast<uInt>(got);
      }
      in_member_ = true;
      int rc = inflate(&z_, Z_NO_FLUSH);
      if (rc == Z_STREAM_END) {  // a member ended: another may follow (concatenated gzip)
        in_member_ = false;
        inflateReset(&z_);
      } else if (rc != Z_OK && rc != Z_BUF_ERROR) {
        throw UserError(path_ + ": corrupt gzip stream (" + (z_.msg ? z_.msg : "zlib error") + ")");
      }
    }
    return n - z_.avail_out;
  }
  int64_t consumed() const override { return done_ - static_cast<int64_t>(z_.avail_in); }

 private:
  std::FILE* f_;
  std::string path_;
  std::vector<char> in_;
  z_stream z_{};
  bool in_member_ = false;
  int64_t done_ = 0;
};

class ZstdStream : public ByteStream {
 public:
  ZstdStream(std::FILE* f, std::string path)
      : f_(f), path_(std::move(path)), in_(ZSTD_DStreamInSize()), z_(ZSTD_createDStream()) {}
  ~ZstdStream() override {
    ZSTD_freeDStream(z_);
    std::fclose(f_);
  }
  size_t read(char* buf, size_t n) override {
    ZSTD_outBuffer out{buf, n, 0};
    while (out.pos == 0) {
      if (ib_.pos == ib_.size) {
        size_t got = std::fread(in_.data(), 1, in_.size(), f_);
        done_ += static_cast<int64_t>(got);
        if (got == 0) {
          if (pending_ != 0) throw UserError(path_ + ": truncated zstd stream (it ends mid-frame)");
          return 0;
        }
        ib_ = {in_.data(), got, 0};
      }
      pending_ = ZSTD_decompressStream(z_, &out, &ib_);
      if (ZSTD_isError(pending_))
        throw UserError(path_ + ": corrupt zstd stream (" + ZSTD_getErrorName(pending_) + ")");
    }
    return out.pos;
  }
  int64_t consumed() const override { return done_ - static_cast<int64_t>(ib_.size - ib_.pos); }

 private:
  std::FILE* f_;
  std::string path_;
  std::vector<char> in_;
  ZSTD_DStream* z_;
  ZSTD_inBuffer ib_{nullptr, 0, 0};
  size_t pending_ = 0;  // 0 once a frame is complete
  int64_t done_ = 0;
};

}  // namespace

std::unique_ptr<ByteStream> open_bytes(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (!f) throw UserError(path + ": cannot open (" + std::strerror(errno) + ")");
  unsigned char magic[4] = {0, 0, 0, 0};
  const size_t got = std::fread(magic, 1, 4, f);
  std::rewind(f);
  if (got >= 2 && magic[0] == 0x1f && magic[1] == 0x8b)
    return std::make_unique<GzipStream>(f, path);
  if (got == 4 && magic[0] == 0x28 && magic[1] == 0xb5 && magic[2] == 0x2f && magic[3] == 0xfd)
    return std::make_unique<ZstdStream>(f, path);
  return std::make_unique<PlainStream>(f, path);
}

LineReader::LineReader(const std::string& path) : path_(path), in_(open_bytes(path)) {}

bool LineReader::next(std::string* line) {
  while (true) {
    const size_t nl = buf_.find('\n', pos_);
    if (nl != std::string::npos || (eof_ && pos_ < buf_.size())) {
      const size_t end = nl == std::string::npos ? buf_.size() : nl;
      line->assign(buf_, pos_, end - pos_);
      pos_ = nl == std::string::npos ? buf_.size() : nl + 1;
      if (!line->empty() && line->back() == '\r') line->pop_back();
      ++line_no_;
      if (int64_t at = invalid_utf8_at(*line); at >= 0)
        throw UserError(path_ + ":" + std::to_string(line_no_) + ": invalid UTF-8 at byte " +
                        std::to_string(at));
      return true;
    }
    if (eof_) return false;
    buf_.erase(0, pos_);
    pos_ = 0;
    const size_t old = buf_.size();
    buf_.resize(old + kChunk);
    const size_t got = in_->read(buf_.data() + old, kChunk);
    buf_.resize(old + got);
    if (got == 0) eof_ = true;
  }
}

std::string json_field(const std::string& line, const std::string& field, const std::string& file,
                       int64_t line_no) {
  const std::string where = file + ":" + std::to_string(line_no) + ": ";
  nlohmann::json j = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) throw UserError(where + "malformed JSON line");
  if (!j.is_object()) throw UserError(where + "the line is not a JSON object");
  auto it = j.find(field);
  if (it == j.end()) throw UserError(where + "no \"" + field + "\" field (data.text_field)");
  if (!it->is_string())
    throw UserError(where + "the \"" + field + "\" field is not a string (data.text_field)");
  return it->get<std::string>();
}

DocumentReader::DocumentReader(std::vector<std::string> files, DocumentOptions o)
    : files_(std::move(files)), o_(std::move(o)) {
  std::error_code ec;
  for (const auto& f : files_) total_ += static_cast<int64_t>(stdfs::file_size(f, ec));
}

UserError DocumentReader::empty_file(const std::string& path) const {
  return UserError(path + (files_.size() == 1 ? ": no text (the file holds no document)"
                                              : ": the shard holds no document"));
}

int64_t DocumentReader::consumed() const { return done_bytes_ + (lines_ ? lines_->consumed() : 0); }

bool DocumentReader::open_next_file() {
  if (lines_) {
    if (docs_in_file_ == 0) throw empty_file(files_[file_ - 1]);
    std::error_code ec;
    done_bytes_ += static_cast<int64_t>(stdfs::file_size(files_[file_ - 1], ec));
    lines_.reset();
  }
  if (file_ >= files_.size()) return false;
  jsonl_ = o_.format == Format::kJsonl ||
           (o_.format == Format::kAuto && looks_like_jsonl(files_[file_]));
  lines_ = std::make_unique<LineReader>(files_[file_++]);
  docs_in_file_ = 0;
  return true;
}

bool DocumentReader::next(Document* d) {
  if (o_.whole_file) {
    if (file_ >= files_.size()) return false;
    const std::string& path = files_[file_++];
    auto in = open_bytes(path);
    d->text.clear();
    std::vector<char> buf(kChunk);
    for (size_t got; (got = in->read(buf.data(), buf.size())) > 0;) d->text.append(buf.data(), got);
    if (d->text.empty()) throw empty_file(path);
    d->file = path, d->line = 1;
    done_bytes_ += in->consumed();
    return true;
  }
  while (lines_ || open_next_file()) {
    if (next_from_lines(d)) {
      ++docs_in_file_;
      return true;
    }
    if (!open_next_file()) return false;
  }
  return false;
}

// The next document of the open file; false at its end.
bool DocumentReader::next_from_lines(Document* d) {
  const std::string& path = files_[file_ - 1];
  std::string line;
  while (lines_->next(&line)) {
    const int64_t no = lines_->line_number();
    if (jsonl_) {
      if (line.find_first_not_of(" \t") == std::string::npos) continue;  // blank line
      d->text = json_field(line, o_.field, path, no);
      if (d->text.empty()) continue;
    } else if (o_.separator.empty()) {
      if (line.empty()) continue;
      d->text = std::move(line);
    } else if (line == o_.separator) {
      if (pending_.empty()) continue;
      d->text = std::move(pending_);
      pending_.clear();
      d->file = path, d->line = pending_line_;
      return true;
    } else {
      if (pending_.empty()) pending_line_ = no;
      pending_ += (pending_.empty() ? "" : "\n") + line;
      continue;
    }
    d->file = path, d->line = no;
    return true;
  }
  if (!pending_.empty()) {  // the file's last document has no separator after it
    d->text = std::move(pending_);
    pending_.clear();
    d->file = path, d->line = pending_line_;
    return true;
  }
  return false;
}

}  // namespace ropelab::text
