// The safetensors reader on arbitrary bytes: a parsed file or a UserError, nothing else. Every
// tensor it returns lies inside the input and holds exactly its shape's bytes, and writing the
// tensors back parses to the same names, dtypes, shapes and bytes.
#include <cstring>

#include "fuzz_util.h"
#include "hf/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace ropelab::hf;
  Parsed p;
  try {
    p = parse(data, size, "input");
  } catch (const ropelab::UserError&) {
    return 0;
  }
  std::vector<TensorOut> out;
  for (const auto& t : p.tensors) {
    if (t.data < data || t.data + t.bytes > data + size)
      fuzz::violated("a tensor outside the input");
    if (static_cast<uint64_t>(t.numel()) * dtype_size(t.dtype) != t.bytes)
      fuzz::violated("a tensor whose bytes differ from its shape's");
    out.push_back({t.name, t.dtype, t.shape, t.data});
  }
  const std::string image = serialize(out, p.metadata);
  Parsed again;
  try {
    again = parse(reinterpret_cast<const uint8_t*>(image.data()), image.size(), "written");
  } catch (const ropelab::UserError& e) {
    fuzz::violated(std::string("a written file does not parse: ") + e.what());
  }
  if (again.metadata != p.metadata || again.tensors.size() != p.tensors.size())
    fuzz::violated("round trip differs");
  for (const auto& a : again.tensors) {
    const TensorView* b = nullptr;
    for (const auto& t : p.tensors)
      if (t.name == a.name) b = &t;
    if (b == nullptr || b->dtype != a.dtype || b->shape != a.shape || b->bytes != a.bytes ||
        (a.bytes > 0 && std::memcmp(a.data, b->data, a.bytes) != 0))
      fuzz::violated("round trip differs for tensor " + a.name);
  }
  return 0;
}
