#include "util/gemm.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <dlfcn.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "util/amx.h"
#include "util/platform.h"
#include "util/vec_bf16.h"

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

namespace {

void sgemm_unrecorded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A,
                      int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  auto f = fn();
  if (f == nullptr) throw std::logic_error("util::sgemm: oneDNN's sgemm is not available");
  int status = f(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0F, A, lda, B, ldb, beta, C, ldc);
  if (status != 0)
    throw std::runtime_error("oneDNN sgemm failed (status " + std::to_string(status) + ")");
}

}  // namespace

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  RECORD_FUNCTION("ropelab::gemm", std::vector<c10::IValue>());  // a matmul to lab/step_split.h
  sgemm_unrecorded(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

namespace {

// oneDNN's bf16 gemm has kernels only for CPUs with AVX-512 (avx512_core and up); elsewhere (an
// AVX2 CPU) the symbol is there and each call returns dnnl_unimplemented. One 1 x 1 x 1 product
// tells which, once.
bool probe_native_bf16() {
  auto f = bf16_fn();
  if (f == nullptr) return false;
  const uint16_t one = 0x3F80;  // 1.0 in bf16
  float c = 0;
  return f('N', 'N', 1, 1, 1, 1.0F, &one, 1, &one, 1, 0.0F, &c, 1) == 0 && c == 1.0F;
}

// rows x cols bf16 (row stride ld) to float32, contiguous: a bf16 value is the top half of its
// float32, so each one is exact.
void widen(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& dst) {
  dst.resize(static_cast<size_t>(rows * cols));
  float* out = dst.data();
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
                   [&](int64_t r0, int64_t r1) {
                     for (int64_t r = r0; r < r1; ++r) {
                       const uint16_t* s = src + r * ld;
                       auto* d = reinterpret_cast<uint32_t*>(out + r * cols);  // NOLINT
                       for (int64_t j = 0; j < cols; ++j) d[j] = static_cast<uint32_t>(s[j]) << 16;
                     }
                   });
}

// gemm_bf16 on sgemm: both operands widened (exact), then C in blocks of kRows rows, one
// single-threaded sgemm each, the blocks shared among the threads. Each element's sum is one
// call's on a block of the same shape whatever the thread count: the same bits on 1 and 2
// threads (oneDNN's threaded sgemm may split K among its threads, and so sum in another order).
void widened_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                  const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  constexpr int64_t kRows = 128;
  thread_local std::vector<float> a, b;
  widen(A, ta ? K : M, ta ? M : K, lda, a);
  widen(B, tb ? N : K, tb ? K : N, ldb, b);
  const int64_t a_ld = ta ? M : K, b_ld = tb ? K : N;
  const float *a0 = a.data(), *b0 = b.data();
  at::parallel_for(0, (M + kRows - 1) / kRows, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r0 = i * kRows, rows = std::min(kRows, M - r0);
      sgemm_unrecorded(ta, tb, rows, N, K, ta ? a0 + r0 : a0 + r0 * a_ld, a_ld, b0, b_ld, beta,
                       C + r0 * ldc, ldc);
    }
  });
}

}  // namespace

bool bf16_gemm_native() {
  static const bool yes = probe_native_bf16();
  return yes;
}

bool bf16_gemm_available() { return bf16_gemm_native() || fast_sgemm_available(); }

void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (!bf16_gemm_available())
    throw std::logic_error("util::gemm_bf16: no bf16 gemm and no sgemm in this process");
  RECORD_FUNCTION("ropelab::gemm", std::vector<c10::IValue>());
  if (!bf16_gemm_native()) {
    widened_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  int status =
      bf16_fn()(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0F, A, lda, B, ldb, beta, C, ldc);
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

bool bf16_nodes_pay() {
  static const bool yes = vec::bf16_simd() || (!bf16_gemm_native() && fast_sgemm_available());
  return yes;
}

std::string bf16_products_name() {
  const bool on_mm = bf16_products_on_mm();  // (warns once of a bad ROPELAB_BF16_PRODUCTS)
  // Without a bf16 gemm in oneDNN, model::bf16_matmul widens libtorch's mm's share too.
  if (!bf16_gemm_native() && bf16_gemm_available())
    return "oneDNN's sgemm on bf16 widened to float32";
  if (!on_mm) return "oneDNN's gemm";
  return amx::available() ? "libtorch's bf16 mm, the attention and the dense layers on AMX tiles"
                          : "libtorch's bf16 mm";
}

std::string fp32_gemm_name() { return fast_sgemm_available() ? "oneDNN sgemm" : "BLAS (libtorch)"; }

}  // namespace ropelab::util
