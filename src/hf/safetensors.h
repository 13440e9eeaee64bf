// safetensors, Hugging Face's weight format, read and written without libtorch.
//
//   [8 bytes]  N, the header's length, unsigned little-endian
//   [N bytes]  JSON: {"<name>": {"dtype": "F32", "shape": [2, 3], "data_offsets": [b, e]}, ...,
//                     "__metadata__": {"<key>": "<string>", ...}}   (padded with spaces)
//   [rest]     the tensors' bytes, little-endian, row-major; offsets count from the end of the
//              header
//
// Reading validates the header strictly, as the reference implementation does: a header length
// within the file and at most 100 MB, a JSON object, known dtypes, non-negative shapes whose
// byte size equals the offsets' span (no overflow), and offsets that tile the data region
// exactly: in range, no overlap, no gap, nothing after the last tensor. A damaged or hostile
// file is a UserError naming the file and the tensor (exit 2), never a crash; the fuzz tier
// feeds parse() random bytes.
//
// A checkpoint is one `model.safetensors` or shards listed by `model.safetensors.index.json`
// ({"weight_map": {"<name>": "<shard file>"}}); files are memory-mapped and tensors are views
// into the mapping.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace ropelab::hf {

enum class DType { kF64, kF32, kF16, kBF16, kI64, kI32, kI16, kI8, kU8, kBool };
size_t dtype_size(DType d);
const char* to_string(DType d);  // safetensors' name: "F32", "BF16", ...

// A tensor of a parsed file: its bytes stay in the file's buffer.
struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  size_t bytes = 0;
  int64_t numel() const;
};

struct Parsed {
  std::vector<TensorView> tensors;  // in offset order
  std::map<std::string, std::string> metadata;
};
// Parses and validates a whole file image; `what` names it in errors. The views point into
// `bytes`.
Parsed parse(const uint8_t* bytes, size_t size, const std::string& what);

// A checkpoint on disk: one file, or the shards of an index (`path` is the .safetensors file, the
// index file, or a directory holding either).
class Checkpoint {
 public:
  static Checkpoint open(const std::string& path);
  std::vector<std::string> names() const;  // sorted
  bool has(const std::string& name) const { return index_.count(name) != 0; }
  // UserError naming the checkpoint if absent.
  const TensorView& get(const std::string& name) const;
  // The first file's __metadata__ (shards usually repeat it).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const std::string& path() const { return path_; }

 private:
  struct Mapped;
  std::string path_;
  std::vector<std::shared_ptr<Mapped>> files_;
  std::map<std::string, const TensorView*> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `data` holds numel * dtype_size bytes, little-endian, row-major.
struct TensorOut {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};
// The file image: tensors in the order given (names must be unique, not "__metadata__"), the
// header padded with spaces to a multiple of 8 bytes, so every tensor starts 8-byte aligned.
std::string serialize(const std::vector<TensorOut>& tensors,
                      const std::map<std::string, std::string>& metadata = {});
// serialize() written atomically to `path`.
void write_file(const std::string& path, const std::vector<TensorOut>& tensors,
                const std::map<std::string, std::string>& metadata = {});

}  // namespace ropelab::hf
