#include "data/token_writer.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/fs.h"

namespace ropelab::data {

namespace stdfs = std::filesystem;

namespace {
std::string join(const std::string& dir, const char* name) {
  return (stdfs::path(dir) / name).string();
}
void write_all(std::FILE* f, const void* data, size_t bytes, const std::string& what) {
  if (bytes > 0 && std::fwrite(data, 1, bytes, f) != bytes)
    throw UserError(what + ": write failed (" + std::strerror(errno) + ")");
}
}  // namespace

TokenWriter::TokenWriter(std::string path, const TokenDataset& header)
    : path_(std::move(path)), header_(header), width_(token_width(header.vocab_size)) {
  const stdfs::path p(path_);
  dir_ = (p.parent_path() / ("." + p.filename().string() + ".part")).string();
  key_ = "format " + std::to_string(kTokensFormatVersion) + " width " + std::to_string(width_) +
         " source " + header.source_hash + " tokenizer " + header.tokenizer;
  bool resume = false;
  const std::string state = join(dir_, "state.json");
  if (fs::exists(state)) {
    auto j = nlohmann::json::parse(fs::read_file(state), nullptr, false);
    if (!j.is_discarded() && j.value("key", "") == key_) {
      docs_ = j.value("documents", int64_t{0});
      tokens_ = j.value("tokens", int64_t{0});
      resume = true;
    }
  }
  if (!resume) {
    std::error_code ec;
    stdfs::remove_all(dir_, ec);
  }
  fs::make_dirs(dir_);
  open_files(resume);
}

TokenWriter::~TokenWriter() {
  if (tokens_f_) std::fclose(tokens_f_);
  if (ends_f_) std::fclose(ends_f_);
}

// Opens the .bin files for appending, cut back to what the state records (a kill may have left
// more); starts them empty otherwise.
void TokenWriter::open_files(bool resume) {
  const std::string tb = join(dir_, "tokens.bin"), eb = join(dir_, "ends.bin");
  auto size_of = [](const std::string& f) {
    std::error_code ec;
    const auto n = stdfs::file_size(f, ec);
    return ec ? int64_t{-1} : static_cast<int64_t>(n);
  };
  // Files shorter than the state promises (removed by hand): start over.
  if (resume && (size_of(tb) < tokens_ * width_ || size_of(eb) < docs_ * 8)) resume = false;
  if (!resume) docs_ = tokens_ = 0;
  auto open = [&](const std::string& f, int64_t keep_bytes) {
    if (resume && ::truncate(f.c_str(), keep_bytes) != 0)
      throw UserError(f + ": cannot truncate (" + std::strerror(errno) + ")");
    std::FILE* out = std::fopen(f.c_str(), resume ? "ab" : "wb");
    if (!out) throw UserError(f + ": cannot write (" + std::strerror(errno) + ")");
    return out;
  };
  tokens_f_ = open(tb, tokens_ * width_);
  ends_f_ = open(eb, docs_ * 8);
}

void TokenWriter::save_state() const {
  nlohmann::json j = {{"key", key_}, {"documents", docs_}, {"tokens", tokens_}};
  fs::write_file_atomic(join(dir_, "state.json"), j.dump() + "\n");
}

void TokenWriter::append(const std::vector<std::vector<int32_t>>& docs) {
  const std::string what = join(dir_, "tokens.bin");
  std::vector<uint16_t> narrow;
  std::vector<int64_t> ends;
  ends.reserve(docs.size());
  int64_t at = tokens_;
  for (const auto& d : docs) {
    if (width_ == 2) {
      narrow.assign(d.begin(), d.end());
      write_all(tokens_f_, narrow.data(), narrow.size() * 2, what);
    } else {
      write_all(tokens_f_, d.data(), d.size() * 4, what);
    }
    at += static_cast<int64_t>(d.size());
    ends.push_back(at);
  }
  write_all(ends_f_, ends.data(), ends.size() * 8, join(dir_, "ends.bin"));
  if (std::fflush(tokens_f_) != 0 || std::fflush(ends_f_) != 0)
    throw UserError(dir_ + ": write failed (" + std::strerror(errno) + ")");
  docs_ += static_cast<int64_t>(docs.size());
  tokens_ = at;
  save_state();
}

void TokenWriter::finish() {
  std::fclose(tokens_f_);
  std::fclose(ends_f_);
  tokens_f_ = ends_f_ = nullptr;
  write_lm_from_files(path_, header_, join(dir_, "tokens.bin"), join(dir_, "ends.bin"), docs_,
                      tokens_);
  std::error_code ec;
  stdfs::remove_all(dir_, ec);
}

}  // namespace ropelab::data
