#include "util/float_rows.h"

#include <ATen/Dispatch.h>

#include "util/vec_kernels.h"

namespace ropelab::util {

const float* float_run(const torch::Tensor& t, int64_t offset, int64_t n, std::vector<float>& buf) {
  if (t.scalar_type() == torch::kFloat32) return t.data_ptr<float>() + offset;
  float* out = scratch(buf, n);
  if (t.scalar_type() == torch::kBFloat16) {
    vec::bf16_to_float(reinterpret_cast<const uint16_t*>(t.data_ptr<at::BFloat16>() + offset), out,
                       n);
    return out;
  }
  AT_DISPATCH_FLOATING_TYPES_AND(at::kHalf, t.scalar_type(), "float_run", [&] {
    const auto* src = t.data_ptr<scalar_t>() + offset;
    for (int64_t j = 0; j < n; ++j) out[j] = static_cast<float>(src[j]);
  });
  return out;
}

void store_float_run(const float* src, const torch::Tensor& t, int64_t offset, int64_t n) {
  if (t.scalar_type() == torch::kFloat32) {
    float* dst = t.data_ptr<float>() + offset;
    if (dst != src) std::copy(src, src + n, dst);
    return;
  }
  if (t.scalar_type() == torch::kBFloat16) {
    vec::float_to_bf16(src, reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>() + offset), n);
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND(at::kHalf, t.scalar_type(), "store_float_run", [&] {
    auto* dst = t.data_ptr<scalar_t>() + offset;
    for (int64_t j = 0; j < n; ++j) dst[j] = static_cast<scalar_t>(src[j]);
  });
}

void round_float_run(float* buf, int64_t n, c10::ScalarType dtype) {
  if (dtype == torch::kFloat32) return;
  if (dtype == torch::kBFloat16) {
    vec::round_to_bf16(buf, n);
    return;
  }
  AT_DISPATCH_FLOATING_TYPES_AND(at::kHalf, dtype, "round_float_run", [&] {
    for (int64_t j = 0; j < n; ++j) buf[j] = static_cast<float>(static_cast<scalar_t>(buf[j]));
  });
}

uint16_t* bf16_bits(const torch::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}

}  // namespace ropelab::util
