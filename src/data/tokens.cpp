#include "data/tokens.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "util/error.h"
#include "util/fs.h"
#include "util/h5.h"

namespace ropelab::data {

// ---- Documents

struct Documents::File {
  std::string path;
  int fd = -1;
  explicit File(const std::string& p) : path(p) {
    fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw UserError(p + ": cannot open (" + std::strerror(errno) + ")");
  }
  ~File() { ::close(fd); }
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  // n bytes at byte `at`; UserError naming the file when it ends first (truncated under us).
  void read(int64_t at, size_t n, void* buf) const {
    auto* p = static_cast<char*>(buf);
    while (n > 0) {
      const ssize_t got = ::pread(fd, p, n, static_cast<off_t>(at));
      if (got < 0 && errno == EINTR) continue;
      if (got <= 0)
        throw UserError(path + ": cannot read " + std::to_string(n) + " bytes at offset " +
                        std::to_string(at) +
                        (got == 0 ? " (the file is shorter: truncated?)"
                                  : std::string(" (") + std::strerror(errno) + ")"));
      p += got, at += got, n -= static_cast<size_t>(got);
    }
  }
};

void Documents::push(const std::vector<int32_t>& seq) {
  if (on_disk()) throw std::logic_error("Documents::push on a split on disk");
  mem_.push(seq);
}

int64_t Documents::num_tokens() const {
  return on_disk() ? ntok_ : static_cast<int64_t>(mem_.tokens.size());
}

int64_t Documents::start(int64_t i) const {
  if (!on_disk()) return mem_.offsets[static_cast<size_t>(i)];
  int64_t at;
  file_->read(offsets_at_ + 8 * i, sizeof at, &at);
  if (at < 0 || at > ntok_)
    throw UserError(file_->path + ": /text/offsets[" + std::to_string(i) +
                    "] = " + std::to_string(at) + " is outside the tokens");
  return at;
}

void Documents::read(int64_t from, int64_t n, int32_t* out) const {
  if (from < 0 || n < 0 || from + n > num_tokens())
    throw std::out_of_range("Documents::read past the end");
  if (!on_disk()) {
    std::copy_n(mem_.tokens.data() + from, n, out);
    return;
  }
  if (width_ == 4) {
    file_->read(tokens_at_ + 4 * from, static_cast<size_t>(4 * n), out);
  } else {  // uint16 on disk
    std::vector<uint16_t> narrow(static_cast<size_t>(n));
    file_->read(tokens_at_ + 2 * from, static_cast<size_t>(2 * n), narrow.data());
    std::copy(narrow.begin(), narrow.end(), out);
  }
  for (int64_t i = 0; i < n; ++i)
    if (out[i] < 0 || out[i] >= vocab_)
      throw UserError(file_->path + ": token id " + std::to_string(out[i]) + " at /text/tokens[" +
                      std::to_string(from + i) + "] is outside the vocabulary (size " +
                      std::to_string(vocab_) + ")");
}

std::vector<int32_t> Documents::sequence(int64_t i) const {
  const int64_t s = start(i), e = start(i + 1);
  if (e < s)
    throw UserError((file_ ? file_->path : std::string("split")) +
                    ": /text/offsets decrease at index " + std::to_string(i));
  std::vector<int32_t> out(static_cast<size_t>(e - s));
  read(s, e - s, out.data());
  return out;
}

Ragged Documents::to_ragged() const {
  if (!on_disk()) return mem_;
  Ragged r;
  r.tokens.resize(static_cast<size_t>(ntok_));
  read(0, ntok_, r.tokens.data());
  r.offsets.resize(static_cast<size_t>(count_ + 1));
  file_->read(offsets_at_, static_cast<size_t>(8 * (count_ + 1)), r.offsets.data());
  for (size_t i = 1; i < r.offsets.size(); ++i)
    if (r.offsets[i] < r.offsets[i - 1] || r.offsets[i] > ntok_)
      throw UserError(file_->path + ": /text/offsets decrease at index " + std::to_string(i));
  return r;
}

Documents Documents::in_file(std::shared_ptr<const File> f, int64_t tokens_at, int width,
                             int64_t offsets_at, int64_t count, int64_t num_tokens, int64_t vocab) {
  Documents d;
  d.tokens_at_ = tokens_at;
  d.offsets_at_ = offsets_at;
  d.width_ = width;
  d.count_ = count;
  d.ntok_ = num_tokens;
  d.vocab_ = vocab;
  d.file_ = std::move(f);
  return d;
}

namespace {

// An lm split's /text, read in place where its datasets lie; nullopt when they cannot be
// (chunked, as format 1 wrote them, or of another type): then they are read whole.
std::optional<Documents> text_in_place(const std::string& path, hid_t root, int64_t vocab) {
  h5::Handle g(H5Gopen2(root, "text", H5P_DEFAULT), H5Gclose);
  const auto t = h5::raw_layout(g.id(), "tokens", path);
  const auto o = h5::raw_layout(g.id(), "offsets", path);
  const bool tok_ok = t.integer && t.little_endian &&
                      ((t.size == 2 && !t.is_signed) || (t.size == 4 && t.is_signed)) &&
                      (t.offset >= 0 || t.count == 0);
  if (!tok_ok || !o.integer || !o.little_endian || o.size != 8 || !o.is_signed || o.offset < 0)
    return std::nullopt;
  std::error_code ec;
  const auto file_size = static_cast<int64_t>(std::filesystem::file_size(path, ec));
  const auto end = [](const h5::RawLayout& l) { return l.offset + l.count * l.size; };
  if ((t.count > 0 && end(t) > file_size) || end(o) > file_size || o.count < 1)
    throw UserError(path + ": /text/tokens or /text/offsets run past the end of the file");
  auto d = Documents::in_file(std::make_shared<const Documents::File>(path), t.offset, t.size,
                              o.offset, o.count - 1, t.count, vocab);
  if (d.start(0) != 0 || d.start(d.size()) != t.count)
    throw UserError(path + ": /text/offsets do not match /text/tokens");
  return d;
}

// Writes a group's tokens as uint16 when every id fits, else int32.
void write_ids(hid_t g, const std::vector<int32_t>& ids, int64_t vocab) {
  const bool narrow = token_width(vocab) == 2;
  h5::Contiguous ds(g, "tokens", narrow ? H5T_STD_U16LE : H5T_STD_I32LE,
                    static_cast<int64_t>(ids.size()));
  ds.write(0, static_cast<int64_t>(ids.size()), H5T_NATIVE_INT32, ids.data());
}

}  // namespace

namespace {
void write_attrs(hid_t root, const TokenDataset& ds) {
  h5::set_attr(root, "format", std::string("ropelab.tokens"));
  h5::set_attr(root, "format_version", kTokensFormatVersion);
  h5::set_attr(root, "kind", std::string(config::to_string(ds.kind())));
  h5::set_attr(root, "split", ds.split);
  h5::set_attr(root, "tokenizer", ds.tokenizer);
  h5::set_attr(root, "tokenizer_kind", ds.tokenizer_kind);
  h5::set_attr(root, "vocab_size", ds.vocab_size);
  h5::set_attr(root, "source_hash", ds.source_hash);
  h5::set_attr(root, "ropelab_version", std::string(ROPELAB_VERSION));
}
}  // namespace

int token_width(int64_t vocab_size) { return vocab_size <= 65536 ? 2 : 4; }

void write_tokens(const std::string& path, const TokenDataset& ds) {
  fs::commit_atomic(path, [&](const std::string& tmp) {
    auto f = h5::create_file(tmp);
    hid_t root = f.id();
    write_attrs(root, ds);
    if (ds.kind() == DataKind::kGlue) {
      h5::set_attr(root, "task", ds.task);
      h5::set_attr(root, "num_labels", ds.num_labels);
      h5::write_f32(root, "labels", ds.labels());
    }
    auto write_group = [&](const char* name, const Ragged& r) {
      auto g = h5::create_group(root, name, path);
      write_ids(g.id(), r.tokens, ds.vocab_size);
      h5::Contiguous off(g.id(), "offsets", H5T_STD_I64LE, static_cast<int64_t>(r.offsets.size()));
      off.write(0, static_cast<int64_t>(r.offsets.size()), H5T_NATIVE_INT64, r.offsets.data());
    };
    if (ds.kind() == DataKind::kLm) write_group("text", ds.lm().text.to_ragged());
    for (const auto& [name, r] : ds.groups()) write_group(name, *r);
    if (H5Fflush(root, H5F_SCOPE_GLOBAL) < 0) throw UserError(path + ": cannot flush");
  });
}

void write_lm_from_files(const std::string& path, const TokenDataset& header,
                         const std::string& tokens_bin, const std::string& ends_bin,
                         int64_t documents, int64_t num_tokens) {
  const int width = token_width(header.vocab_size);
  fs::commit_atomic(path, [&](const std::string& tmp) {
    auto f = h5::create_file(tmp);
    write_attrs(f.id(), header);
    auto g = h5::create_group(f.id(), "text", path);
    // Copied in pieces of 8M elements: memory stays bounded whatever the split's size.
    constexpr int64_t kPiece = 1 << 23;
    std::vector<char> buf(static_cast<size_t>(kPiece) * 8);
    auto copy = [&](const std::string& from, h5::Contiguous& to, int64_t at, int64_t n, int size,
                    hid_t mem_type) {
      std::FILE* in = std::fopen(from.c_str(), "rb");
      if (!in) throw UserError(from + ": cannot open (" + std::strerror(errno) + ")");
      for (int64_t done = 0; done < n;) {
        const int64_t k = std::min(kPiece, n - done);
        if (std::fread(buf.data(), static_cast<size_t>(size), static_cast<size_t>(k), in) !=
            static_cast<size_t>(k)) {
          std::fclose(in);
          throw UserError(from + ": shorter than its recorded size");
        }
        to.write(at + done, k, mem_type, buf.data());
        done += k;
      }
      std::fclose(in);
    };
    h5::Contiguous tok(g.id(), "tokens", width == 2 ? H5T_STD_U16LE : H5T_STD_I32LE, num_tokens);
    copy(tokens_bin, tok, 0, num_tokens, width, width == 2 ? H5T_NATIVE_UINT16 : H5T_NATIVE_INT32);
    h5::Contiguous off(g.id(), "offsets", H5T_STD_I64LE, documents + 1);
    const int64_t zero = 0;
    off.write(0, 1, H5T_NATIVE_INT64, &zero);
    copy(ends_bin, off, 1, documents, 8, H5T_NATIVE_INT64);
    if (H5Fflush(f.id(), H5F_SCOPE_GLOBAL) < 0) throw UserError(path + ": cannot flush");
  });
}

std::map<std::string, std::string> read_token_attrs(const std::string& path) {
  std::map<std::string, std::string> out;
  try {
    auto f = h5::open_file(path, false);
    for (const char* k : {"format", "kind", "split", "tokenizer", "tokenizer_kind", "source_hash"})
      if (h5::has_attr(f.id(), k)) out[k] = h5::get_attr_str(f.id(), k, path);
    if (h5::has_attr(f.id(), "format_version"))
      out["format_version"] = std::to_string(h5::get_attr_int(f.id(), "format_version", path));
  } catch (const UserError&) {
    out.clear();
  }
  return out;
}

TokenDataset read_tokens(const std::string& path, std::optional<DataKind> expect) {
  auto f = h5::open_file(path, false);
  hid_t root = f.id();
  if (!h5::has_attr(root, "format") || h5::get_attr_str(root, "format", path) != "ropelab.tokens")
    throw UserError(path + ": not a ropelab token dataset (no format=ropelab.tokens attribute)");
  int64_t version = h5::get_attr_int(root, "format_version", path);
  if (version != 1 && version != kTokensFormatVersion)
    throw UserError(path + ": token format version " + std::to_string(version) +
                    ", this ropelab reads version " + std::to_string(kTokensFormatVersion) +
                    "; HINT: run `ropelab prepare` again");
  const std::string kind_name = h5::get_attr_str(root, "kind", path);
  DataKind kind;
  try {
    kind = config::enum_from<DataKind>(kind_name);
  } catch (const std::invalid_argument&) {
    throw UserError(path + ": unknown dataset kind '" + kind_name + "'");
  }
  if (expect && kind != *expect)
    throw UserError(path + ": holds a '" + kind_name + "' dataset, expected '" +
                    config::to_string(*expect) + "'");
  TokenDataset ds = empty_dataset(kind);
  ds.split = h5::get_attr_str(root, "split", path);
  ds.tokenizer = h5::get_attr_str(root, "tokenizer", path);
  ds.tokenizer_kind = h5::get_attr_str(root, "tokenizer_kind", path);
  ds.vocab_size = h5::get_attr_int(root, "vocab_size", path);
  ds.source_hash = h5::get_attr_str(root, "source_hash", path);
  int64_t count = -1;
  auto read_group = [&](const char* gname, Ragged& r) {
    if (!h5::exists(root, gname))
      throw UserError(path + ": missing group '/" + std::string(gname) + "'");
    h5::Handle g(H5Gopen2(root, gname, H5P_DEFAULT), H5Gclose);
    const std::string G = gname;
    r.tokens = h5::read_i32(g.id(), "tokens", path);
    r.offsets = h5::read_i64(g.id(), "offsets", path);
    if (r.offsets.empty() || r.offsets.front() != 0 ||
        r.offsets.back() != static_cast<int64_t>(r.tokens.size()))
      throw UserError(path + ": /" + G + "/offsets do not match /" + G + "/tokens");
    for (size_t i = 1; i < r.offsets.size(); ++i)
      if (r.offsets[i] < r.offsets[i - 1])
        throw UserError(path + ": /" + G + "/offsets decrease at index " + std::to_string(i));
    for (size_t i = 0; i < r.tokens.size(); ++i)
      if (r.tokens[i] < 0 || r.tokens[i] >= ds.vocab_size)
        throw UserError(path + ": token id " + std::to_string(r.tokens[i]) + " at /" + G +
                        "/tokens[" + std::to_string(i) + "] is outside the vocabulary (size " +
                        std::to_string(ds.vocab_size) + ")");
    if (count >= 0 && r.size() != count)
      throw UserError(path + ": groups hold different numbers of sequences");
    count = r.size();
  };
  switch (kind) {
    case DataKind::kLm: {
      if (!h5::exists(root, "text")) throw UserError(path + ": missing group '/text'");
      if (auto in_place = text_in_place(path, root, ds.vocab_size)) {
        ds.lm().text = std::move(*in_place);
      } else {
        Ragged r;
        read_group("text", r);
        ds.lm().text = Documents(std::move(r));
      }
      break;
    }
    case DataKind::kParallel:
      read_group("src", ds.parallel().src);
      read_group("tgt", ds.parallel().tgt);
      break;
    case DataKind::kGlue: {
      auto& g = ds.glue();
      read_group("a", g.a);
      read_group("b", g.b);
      if (h5::exists(root, "c")) read_group("c", g.c);  // ranking triplets
      ds.task = h5::get_attr_str(root, "task", path);
      ds.num_labels = h5::get_attr_int(root, "num_labels", path);
      g.labels = h5::read_f32(root, "labels", path);
      if (static_cast<int64_t>(g.labels.size()) != count)
        throw UserError(path + ": /labels has " + std::to_string(g.labels.size()) +
                        " entries for " + std::to_string(count) + " examples");
      break;
    }
    case DataKind::kSynthetic:
      read_group("tokens", ds.synthetic().tokens);
      read_group("scored", ds.synthetic().scored);
      if (ds.synthetic().tokens.offsets != ds.synthetic().scored.offsets)
        throw UserError(path + ": /scored does not mark the tokens of /tokens one for one");
      break;
  }
  return ds;
}

}  // namespace ropelab::data
