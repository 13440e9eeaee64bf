#include "hf/safetensors.h"

#include <fcntl.h>
#include <spdlog/fmt/fmt.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "util/error.h"
#include "util/fs.h"

namespace ropelab::hf {

namespace {

using json = nlohmann::json;
namespace stdfs = std::filesystem;

constexpr uint64_t kMaxHeader = 100'000'000;  // the reference implementation's limit
constexpr int kMaxDepth = 16;                 // a header is 3 levels deep; JSON bombs are not

struct DTypeName {
  DType dtype;
  const char* name;
  size_t size;
};
constexpr DTypeName kDTypes[] = {{DType::kF64, "F64", 8}, {DType::kF32, "F32", 4},
                                 {DType::kF16, "F16", 2}, {DType::kBF16, "BF16", 2},
                                 {DType::kI64, "I64", 8}, {DType::kI32, "I32", 4},
                                 {DType::kI16, "I16", 2}, {DType::kI8, "I8", 1},
                                 {DType::kU8, "U8", 1},   {DType::kBool, "BOOL", 1}};

const DTypeName& info(DType d) {
  for (const auto& t : kDTypes)
    if (t.dtype == d) return t;
  throw std::logic_error("safetensors: unknown dtype");
}

// The deepest nesting of [ and { outside strings (nlohmann parses recursively: a hostile header
// of a million '[' would overflow the stack before it failed).
int nesting(const std::string& s) {
  int depth = 0, most = 0;
  bool in_string = false, escaped = false;
  for (char c : s) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    if (c == '[' || c == '{') most = std::max(most, ++depth);
    if (c == ']' || c == '}') --depth;
    if (most > kMaxDepth) break;
  }
  return most;
}

uint64_t read_u64_le(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

}  // namespace

size_t dtype_size(DType d) { return info(d).size; }
const char* to_string(DType d) { return info(d).name; }

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  return n;
}

Parsed parse(const uint8_t* bytes, size_t size, const std::string& what) {
  auto bad = [&](const std::string& why) {
    return UserError(what + ": not a valid safetensors file: " + why);
  };
  if (size < 8) throw bad(fmt::format("{} bytes, shorter than the 8-byte header length", size));
  const uint64_t n = read_u64_le(bytes);
  if (n > kMaxHeader) throw bad(fmt::format("header length {} is over 100 MB", n));
  if (n > size - 8)
    throw bad(fmt::format("header length {} runs past the end of the file ({} bytes)", n, size));
  const std::string header(reinterpret_cast<const char*>(bytes) + 8, static_cast<size_t>(n));
  if (header.empty() || header[0] != '{') throw bad("the header is not a JSON object");
  if (nesting(header) > kMaxDepth) throw bad("the header nests deeper than a safetensors header");
  std::set<std::string> keys;
  std::string duplicate;
  json h;
  try {
    h = json::parse(header, [&](int depth, json::parse_event_t event, json& parsed) {
      if (depth == 1 && event == json::parse_event_t::key &&
          !keys.insert(parsed.get<std::string>()).second)
        duplicate = parsed.get<std::string>();
      return true;
    });
  } catch (const json::exception& e) {
    throw bad(std::string("the header is not JSON (") + e.what() + ")");
  }
  if (!h.is_object()) throw bad("the header is not a JSON object");
  if (!duplicate.empty()) throw bad("tensor '" + duplicate + "' appears twice in the header");
  const uint8_t* data = bytes + 8 + n;
  const uint64_t data_size = size - 8 - n;
  Parsed p;
  for (const auto& [name, entry] : h.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) throw bad("__metadata__ is not an object of strings");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) throw bad("__metadata__ '" + k + "' is not a string");
        p.metadata[k] = v.get<std::string>();
      }
      continue;
    }
    const std::string tensor = name;  // (a structured binding cannot be captured in C++17)
    auto tbad = [&](const std::string& why) { return bad("tensor '" + tensor + "': " + why); };
    if (!entry.is_object()) throw tbad("not an object with dtype, shape and data_offsets");
    for (const char* k : {"dtype", "shape", "data_offsets"})
      if (!entry.contains(k)) throw tbad(std::string("no ") + k);
    if (entry.size() != 3) throw tbad("keys other than dtype, shape and data_offsets");
    TensorView t;
    t.name = name;
    const auto& dt = entry["dtype"];
    const DTypeName* found = nullptr;
    if (dt.is_string())
      for (const auto& d : kDTypes)
        if (dt.get<std::string>() == d.name) found = &d;
    if (found == nullptr)
      throw tbad("dtype " + dt.dump() +
                 " is not one of F64, F32, F16, BF16, I64, I32, I16, I8, U8, BOOL");
    t.dtype = found->dtype;
    const auto& shape = entry["shape"];
    if (!shape.is_array()) throw tbad("shape is not a list");
    uint64_t numel = 1;
    bool overflow = false;
    for (const auto& s : shape) {
      if (!s.is_number_unsigned()) throw tbad("shape " + shape.dump() + " has a non-natural size");
      uint64_t d = s.get<uint64_t>();
      if (d > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) overflow = true;
      t.shape.push_back(static_cast<int64_t>(d));
      if (d != 0 && numel > std::numeric_limits<uint64_t>::max() / d) overflow = true;
      numel *= d;
    }
    if (overflow || numel > std::numeric_limits<uint64_t>::max() / found->size)
      throw tbad("shape " + shape.dump() + " overflows");
    const auto& off = entry["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() ||
        !off[1].is_number_unsigned())
      throw tbad("data_offsets is not [begin, end]");
    const uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
    if (b > e) throw tbad(fmt::format("data_offsets [{}, {}] end before they begin", b, e));
    if (e > data_size)
      throw tbad(
          fmt::format("data_offsets [{}, {}] run past the data ({} bytes)", b, e, data_size));
    if (e - b != numel * found->size)
      throw tbad(fmt::format("shape {} of {} needs {} bytes, data_offsets [{}, {}] hold {}",
                             shape.dump(), found->name, numel * found->size, b, e, e - b));
    t.data = data + b;
    t.bytes = static_cast<size_t>(e - b);
    p.tensors.push_back(std::move(t));
  }
  // The tensors tile the data region: sorted by offset, each begins where the previous ended.
  std::sort(p.tensors.begin(), p.tensors.end(), [](const TensorView& a, const TensorView& b) {
    return a.data != b.data ? a.data < b.data : a.bytes < b.bytes;
  });
  uint64_t at = 0;
  std::string prev;
  for (const auto& t : p.tensors) {
    const auto b = static_cast<uint64_t>(t.data - data);
    if (b < at)
      throw bad(fmt::format("tensor '{}' (bytes {}..{}) overlaps tensor '{}' (ending at {})",
                            t.name, b, b + t.bytes, prev, at));
    if (b > at)
      throw bad(fmt::format("a gap of {} bytes before tensor '{}' (bytes {}..{})", b - at, t.name,
                            b, b + t.bytes));
    at = b + t.bytes;
    prev = t.name;
  }
  if (at != data_size)
    throw bad(
        fmt::format("{} bytes after the last tensor (the data region is {} bytes, the "
                    "tensors cover {})",
                    data_size - at, data_size, at));
  return p;
}

// ---- files on disk

struct Checkpoint::Mapped {
  std::string path;
  void* addr = nullptr;
  size_t size = 0;
  Parsed parsed;
  explicit Mapped(const std::string& p) : path(p) {
    int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) throw UserError(p + ": cannot open (" + std::strerror(errno) + ")");
    struct stat st = {};
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
      ::close(fd);
      throw UserError(p + ": not a regular file");
    }
    size = static_cast<size_t>(st.st_size);
    if (size > 0) {
      addr = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
      if (addr == MAP_FAILED) {
        addr = nullptr;
        int err = errno;
        ::close(fd);
        throw UserError(p + ": cannot map (" + std::strerror(err) + ")");
      }
    }
    ::close(fd);
    parsed = parse(static_cast<const uint8_t*>(addr), size, p);
  }
  ~Mapped() {
    if (addr != nullptr) munmap(addr, size);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
};

Checkpoint Checkpoint::open(const std::string& path) {
  stdfs::path p(path);
  if (stdfs::is_directory(p)) {
    if (stdfs::exists(p / "model.safetensors.index.json"))
      p /= "model.safetensors.index.json";
    else if (stdfs::exists(p / "model.safetensors"))
      p /= "model.safetensors";
    else
      throw UserError(path + ": no model.safetensors or model.safetensors.index.json in it");
  }
  if (!stdfs::exists(p)) throw UserError(p.string() + ": no such file");
  Checkpoint c;
  c.path_ = p.string();
  if (p.extension() != ".json") {
    c.files_.push_back(std::make_shared<Mapped>(p.string()));
    for (const auto& t : c.files_[0]->parsed.tensors) c.index_[t.name] = &t;
    c.metadata_ = c.files_[0]->parsed.metadata;
    return c;
  }
  // Shards: {"weight_map": {"<tensor>": "<file>"}}, files beside the index.
  json idx;
  try {
    idx = json::parse(fs::read_file(p.string()));
  } catch (const json::exception& e) {
    throw UserError(p.string() + ": not JSON (" + e.what() + ")");
  }
  if (!idx.is_object() || !idx.contains("weight_map") || !idx["weight_map"].is_object())
    throw UserError(p.string() + ": no \"weight_map\" object");
  std::map<std::string, std::shared_ptr<Mapped>> shards;
  for (const auto& [name, file] : idx["weight_map"].items()) {
    if (!file.is_string())
      throw UserError(p.string() + ": weight_map['" + name + "'] is not a file name");
    const std::string f = file.get<std::string>();
    if (f.empty() || f.find('/') != std::string::npos || f == "." || f == "..")
      throw UserError(p.string() + ": weight_map['" + name + "'] = '" + f +
                      "' is not a file beside the index");
    auto& shard = shards[f];
    if (!shard) {
      shard = std::make_shared<Mapped>((p.parent_path() / f).string());
      c.files_.push_back(shard);
      if (c.files_.size() == 1) c.metadata_ = shard->parsed.metadata;
    }
    const TensorView* found = nullptr;
    for (const auto& t : shard->parsed.tensors)
      if (t.name == name) found = &t;
    if (found == nullptr)
      throw UserError(p.string() + ": lists tensor '" + name + "' in " + f + ", which lacks it");
    c.index_[name] = found;
  }
  return c;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> out;
  for (const auto& [name, t] : index_) out.push_back(name);
  return out;
}

const TensorView& Checkpoint::get(const std::string& name) const {
  auto it = index_.find(name);
  if (it == index_.end()) throw UserError(path_ + ": has no tensor '" + name + "'");
  return *it->second;
}

// ---- writing

std::string serialize(const std::vector<TensorOut>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t at = 0;
  std::vector<std::pair<const void*, uint64_t>> blobs;
  for (const auto& t : tensors) {
    if (t.name == "__metadata__" || h.contains(t.name))
      throw std::invalid_argument("safetensors: tensor name '" + t.name + "' is taken");
    uint64_t numel = 1;
    for (auto s : t.shape) {
      if (s < 0) throw std::invalid_argument("safetensors: negative size in '" + t.name + "'");
      numel *= static_cast<uint64_t>(s);
    }
    const uint64_t bytes = numel * dtype_size(t.dtype);
    h[t.name] = {
        {"dtype", to_string(t.dtype)}, {"shape", t.shape}, {"data_offsets", {at, at + bytes}}};
    blobs.emplace_back(t.data, bytes);
    at += bytes;
  }
  std::string header = h.dump();
  header.append((8 - header.size() % 8) % 8, ' ');
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  out.reserve(8 + header.size() + at);
  out += header;
  for (const auto& [data, bytes] : blobs)
    if (bytes > 0) out.append(static_cast<const char*>(data), static_cast<size_t>(bytes));
  return out;
}

void write_file(const std::string& path, const std::vector<TensorOut>& tensors,
                const std::map<std::string, std::string>& metadata) {
  fs::write_file_atomic(path, serialize(tensors, metadata));
}

}  // namespace ropelab::hf
