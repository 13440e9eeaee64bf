#include "util/gemm.h"

#include <ATen/record_function.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "util/amx.h"
#include "util/platform.h"

namespace ropelab::util {

namespace {

// dnnl_status_t dnnl_sgemm(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N, dnnl_dim_t K,
//                          float alpha, const float *A, dnnl_dim_t lda, const float *B,
//                          dnnl_dim_t ldb, float beta, float *C, dnnl_dim_t ldc);
// (oneDNN's C API, the same in 2.x and 3.x; row-major; dnnl_success == 0.)
using SgemmFn = int (*)(char, char, int64_t, int64_t, int64_t, float, const float*, int64_t,
                        const float*, int64_t, float, float*, int64_t);

// dnnl_status_t dnnl_gemm_bf16bf16f32(char transa, char transb, dnnl_dim_t M, dnnl_dim_t N,
//     dnnl_dim_t K, float alpha, const bfloat16_t *A, dnnl_dim_t lda, const bfloat16_t *B,
//     dnnl_dim_t ldb, float beta, float *C, dnnl_dim_t ldc);  (the same in 2.x and 3.x)
using GemmBf16Fn = int (*)(char, char, int64_t, int64_t, int64_t, float, const uint16_t*, int64_t,
                           const uint16_t*, int64_t, float, float*, int64_t);

GemmBf16Fn bf16_fn() {
  static const auto f =
      reinterpret_cast<GemmBf16Fn>(dlsym(RTLD_DEFAULT, "dnnl_gemm_bf16bf16f32"));  // NOLINT
  return f;
}

SgemmFn lookup() {
  const char* want = std::getenv("ROPELAB_FP32_GEMM");
  if (want != nullptr && std::strcmp(want, "blas") == 0) return nullptr;
  return reinterpret_cast<SgemmFn>(dlsym(RTLD_DEFAULT, "dnnl_sgemm"));  // NOLINT
}

SgemmFn fn() {
  static const SgemmFn f = lookup();
  return f;
}

}  // namespace

bool fast_sgemm_available() { return fn() != nullptr; }

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  auto f = fn();
  if (f == nullptr) throw std::logic_error("util::sgemm: oneDNN's sgemm is not available");
  RECORD_FUNCTION("ropelab::gemm", std::vector<c10::IValue>());  // a matmul to lab/step_split.h
  int status = f(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0F, A, lda, B, ldb, beta, C, ldc);
  if (status != 0)
    throw std::runtime_error("oneDNN sgemm failed (status " + std::to_string(status) + ")");
}

bool bf16_gemm_available() { return bf16_fn() != nullptr; }

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  auto f = bf16_fn();
  if (f == nullptr) throw std::logic_error("util::gemm_bf16: oneDNN's bf16 gemm is not available");
  RECORD_FUNCTION("ropelab::gemm", std::vector<c10::IValue>());
  int status = f(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0F, A, lda, B, ldb, beta, C, ldc);
  if (status != 0)
    throw std::runtime_error("oneDNN bf16 gemm failed (status " + std::to_string(status) + ")");
}

bool bf16_products_on_mm() {
  const char* v = std::getenv("ROPELAB_BF16_PRODUCTS");  // read on each call: tests set it
  if (v != nullptr && std::strcmp(v, "mm") == 0) return true;
  if (v != nullptr && std::strcmp(v, "gemm") == 0) return !bf16_gemm_available();
  if (v != nullptr && *v != '\0') {
    static std::once_flag warned;
    std::call_once(
        warned, [v] { spdlog::warn("ROPELAB_BF16_PRODUCTS={}: expected mm or gemm; ignored", v); });
  }
  return !bf16_gemm_available() || platform::cpu_has_amx_bf16();
}

std::string bf16_products_name() {
  if (!bf16_products_on_mm()) return "oneDNN's gemm";
  return amx::available() ? "libtorch's bf16 mm, the attention and the dense layers on AMX tiles"
                          : "libtorch's bf16 mm";
}

std::string fp32_gemm_name() { return fast_sgemm_available() ? "oneDNN sgemm" : "BLAS (libtorch)"; }

}  // namespace ropelab::util
