// Float32 views of a run of a tensor's elements, for the fused kernels (util/vec_kernels.h) that
// compute in float32 whatever the tensor's dtype: float32 is read in place, bf16 is converted
// with the vectorised loops, other dtypes element by element.
#pragma once
#include <torch/types.h>

#include <vector>

namespace ropelab::util {

// buf's data with room for n elements, its contents unspecified: buf only ever grows, so that a
// scratch buffer reused by calls of different sizes is not zero-filled again on each growth
// (std::vector::resize fills what it adds; shrinking and growing back filled it every call).
template <class T>
T* scratch(std::vector<T>& buf, int64_t n) {
  if (buf.size() < static_cast<size_t>(n)) buf.resize(static_cast<size_t>(n));
  return buf.data();
}

// Elements [offset, offset + n) of contiguous t as float32: t's own memory when it is float32,
// else converted into buf.
const float* float_run(const torch::Tensor& t, int64_t offset, int64_t n, std::vector<float>& buf);

// Writes n float32 values into elements [offset, offset + n) of contiguous t (rounded to t's
// dtype). A no-op when src already is that memory (t float32).
void store_float_run(const float* src, const torch::Tensor& t, int64_t offset, int64_t n);

// Rounds n float32 values in place to the precision of dtype (bf16, half; float32: no-op), as
// a store into a tensor of that dtype and a load back would.
void round_float_run(float* buf, int64_t n, c10::ScalarType dtype);

// A bf16 tensor's data as the bits util/vec_bf16.h's loops read and write.
uint16_t* bf16_bits(const torch::Tensor& t);

}  // namespace ropelab::util
