#include "util/gemm.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <dlfcn.h>
#include <omp.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "util/amx.h"
#include "util/float_rows.h"
#include "util/platform.h"
#include "util/vec_bf16.h"
#include "util/vec_kernels.h"

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

// rows x cols bf16 (row stride ld) to float32 at dst (row stride cols): a bf16 value is the top
// half of its float32, so each one is exact. Serial (the callers share out the rows).
void widen_rows(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) vec::bf16_to_float(src + r * ld, dst + r * cols, cols);
}

// The transpose of a K x rows bf16 block (row stride ld) widened to rows x K float32 at dst.
void widen_transposed(const uint16_t* src, int64_t K, int64_t rows, int64_t ld, float* dst) {
  vec::bf16_to_float_transposed(src, K, rows, ld, dst);
}

// The same for an operand already in float32 (gemm_bf16_widened's B, when the product runs as
// its transpose): copied, and transposed where it is.
void widen_rows(const float* src, int64_t rows, int64_t cols, int64_t ld, float* dst) {
  for (int64_t r = 0; r < rows; ++r) std::copy(src + r * ld, src + r * ld + cols, dst + r * cols);
}

void widen_transposed(const float* src, int64_t K, int64_t rows, int64_t ld, float* dst) {
  constexpr int64_t kStep = 16;
  for (int64_t k0 = 0; k0 < K; k0 += kStep) {
    const int64_t k1 = std::min(K, k0 + kStep);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t k = k0; k < k1; ++k) dst[r * K + k] = src[k * ld + r];
  }
}

// The whole of an operand widened, its rows shared among the threads.
void widen(const uint16_t* src, int64_t rows, int64_t cols, int64_t ld, std::vector<float>& dst) {
  float* out = scratch(dst, rows * cols);
  at::parallel_for(0, rows, std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)),
                   [&](int64_t r0, int64_t r1) {
                     widen_rows(src + r0 * ld, r1 - r0, cols, ld, out + r0 * cols);
                   });
}

// Outside an active parallel region (a single block, or one thread) oneDNN's sgemm takes
// omp_get_max_threads() threads and may split K among them: a block's call takes one, so that
// its sums do not depend on the thread count.
class OneThread {
 public:
  OneThread() : saved_(omp_in_parallel() ? 1 : omp_get_max_threads()) {
    if (saved_ != 1) omp_set_num_threads(1);
  }
  ~OneThread() {
    if (saved_ != 1) omp_set_num_threads(saved_);
  }
  OneThread(const OneThread&) = delete;
  OneThread& operator=(const OneThread&) = delete;

 private:
  int saved_;
};

// C = op(A) op(B) + beta C, A bf16 and B float32, in blocks of kRows rows of C (512 where M is
// 2048 or more, else 128: the FFN's 4096-row products ran 0.93x the step's time with 512 on 2
// cores of a Zen 3 EPYC, BENCHMARKS.md), one single-threaded sgemm each, the blocks shared among
// the threads. Each block widens its own rows of op(A) just before its sgemm reads them, from the
// cache (A is the larger operand in the model, the logits' gradient in the LM head's backward:
// widened whole up front it went out to memory and came back), and where A is transposed they
// are transposed as they widen (oneDNN's sgemm ran the weight gradients' shapes, dY^T X with
// K = 4096, 1.2-2x slower on a transposed A; the LM step took 0.95x the time untransposed). The
// blocks follow from the shape alone, so each element's sum is one call's on a block of the same
// shape whatever the thread count: the same bits on 1 and 2 threads (oneDNN's threaded sgemm may
// split K among its threads, and so sum in another order). A may also be float32 (copied, not
// widened). Each block's rows of C then go to `epilogue` (if any) on the thread that computed
// them; with no C (null) they are computed into a block of the thread's scratch (rows N apart)
// and exist only for the epilogue.
template <class TA>
void rows_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const TA* A, int64_t lda,
               const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
               const RowsEpilogue* epilogue = nullptr) {
  const int64_t kRows = M >= 2048 ? 512 : 128;
  at::parallel_for(0, (M + kRows - 1) / kRows, 1, [&](int64_t i0, int64_t i1) {
    thread_local std::vector<float> a_store, c_store;  // the block's op(A) widened; its sums
    float* a = scratch(a_store, std::min(kRows, M) * K);
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t r0 = i * kRows, rows = std::min(kRows, M - r0);
      if (ta)  // op(A)'s rows are A's columns r0 .. r0 + rows, transposed as they widen
        widen_transposed(A + r0, K, rows, lda, a);
      else
        widen_rows(A + r0 * lda, rows, K, lda, a);
      float* c = C != nullptr ? C + r0 * ldc : scratch(c_store, std::min(kRows, M) * N);
      const OneThread one;
      sgemm_unrecorded(false, tb, rows, N, K, a, K, B, ldb, beta, c, C != nullptr ? ldc : N);
      if (epilogue != nullptr) (*epilogue)(r0, rows, c);  // while the block is in cache
    }
  });
}

// C = t^T + beta C, t N x M (row stride M), C M x N; beta 0 writes C without reading it. Where
// rounded is given (row stride ldc), each row of C is rounded to bf16 there as it is written.
void add_transposed(const float* t, int64_t M, int64_t N, float beta, float* C, int64_t ldc,
                    uint16_t* rounded) {
  at::parallel_for(0, M, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* c = C + r * ldc;
      if (beta == 0.0F)
        for (int64_t n = 0; n < N; ++n) c[n] = t[n * M + r];
      else
        for (int64_t n = 0; n < N; ++n) c[n] = t[n * M + r] + beta * c[n];
      if (rounded != nullptr) vec::float_to_bf16(c, rounded + r * ldc, N);
    }
  });
}

// A product A^T B wider than tall (a weight gradient dY^T X where the layer widens its input: the
// FFN's second layer, 256 x 1024 over 4096 rows) runs as its transpose B^T A, transposed into C:
// rows_gemm splits the rows of its result, and 8 blocks of 128 x 256 x 4096 ran 1.6x the speed of
// 2 blocks of 128 x 1024 x 4096 on 2 cores of a Zen 3 EPYC (BENCHMARKS.md). A is widened whole,
// B a block at a time. Returns false, doing nothing, for any other product.
template <class TB>
bool transposed_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                     int64_t lda, const TB* B, int64_t ldb, float beta, float* C, int64_t ldc,
                     uint16_t* rounded) {
  if (!ta || tb || N <= M) return false;
  thread_local std::vector<float> a, t;
  widen(A, K, M, lda, a);
  rows_gemm(true, false, N, M, K, B, ldb, a.data(), M, 0.0F, scratch(t, N * M), M);
  add_transposed(t.data(), M, N, beta, C, ldc, rounded);
  return true;
}

// gemm_bf16 on sgemm: B widened whole (exact), then rows_gemm (or the product's transpose).
void widened_gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                  const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc,
                  uint16_t* rounded = nullptr) {
  if (transposed_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, rounded)) return;
  thread_local std::vector<float> b;
  widen(B, tb ? N : K, tb ? K : N, ldb, b);
  const RowsEpilogue round = [&](int64_t r0, int64_t rows, const float* c) {  // C's rows
    for (int64_t r = 0; r < rows; ++r) vec::float_to_bf16(c + r * ldc, rounded + (r0 + r) * ldc, N);
  };
  rows_gemm(ta, tb, M, N, K, A, lda, b.data(), tb ? K : N, beta, C, ldc,
            rounded != nullptr ? &round : nullptr);
}

void native_gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                      int64_t lda, const uint16_t* B, int64_t ldb, float beta, float* C,
                      int64_t ldc) {
  int status =
      bf16_fn()(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0F, A, lda, B, ldb, beta, C, ldc);
  if (status != 0)
    throw std::runtime_error("oneDNN bf16 gemm failed (status " + std::to_string(status) + ")");
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
  native_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void gemm_bf16_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, float* acc, uint16_t* out) {
  if (!bf16_gemm_available())
    throw std::logic_error("util::gemm_bf16_rounded: no bf16 gemm and no sgemm in this process");
  RECORD_FUNCTION("ropelab::gemm", std::vector<c10::IValue>());
  if (!bf16_gemm_native()) {
    widened_gemm(ta, tb, M, N, K, A, lda, B, ldb, 0.0F, acc, N, out);
    return;
  }
  native_gemm_bf16(ta, tb, M, N, K, A, lda, B, ldb, 0.0F, acc, N);
  at::parallel_for(0, M, std::max<int64_t>(1, 16384 / std::max<int64_t>(N, 1)),
                   [&](int64_t r0, int64_t r1) {
                     vec::float_to_bf16(acc + r0 * N, out + r0 * N, (r1 - r0) * N);
                   });
}

void gemm_bf16_blocks(bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, const RowsEpilogue& epilogue) {
  if (bf16_gemm_native() || !fast_sgemm_available())
    throw std::logic_error("util::gemm_bf16_blocks: runs where the products are widened");
  // A matmul to lab/step_split.h, with this thread's wait for the others; the epilogues inside
  // are not (as util::amx::rows_product's).
  RECORD_FUNCTION("ropelab::gemm", std::vector<c10::IValue>());
  thread_local std::vector<float> b;
  widen(B, tb ? N : K, tb ? K : N, ldb, b);
  const RowsEpilogue recorded = [&](int64_t r0, int64_t rows, const float* c) {
    RECORD_FUNCTION("ropelab::gemm_epilogue", std::vector<c10::IValue>());
    epilogue(r0, rows, c);
  };
  rows_gemm(false, tb, M, N, K, A, lda, b.data(), tb ? K : N, 0.0F, nullptr, N, &recorded);
}

void gemm_bf16_widened(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t lda, const float* B, int64_t ldb, float beta, float* C,
                       int64_t ldc) {
  if (!fast_sgemm_available())
    throw std::logic_error("util::gemm_bf16_widened: oneDNN's sgemm is not available");
  RECORD_FUNCTION("ropelab::gemm", std::vector<c10::IValue>());
  if (transposed_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc, nullptr)) return;
  rows_gemm(ta, tb, M, N, K, A, lda, B, ldb, beta, C, ldc);
}

void widen_bf16(const uint16_t* src, int64_t n, float* dst) {
  at::parallel_for(0, n, 16384, [&](int64_t i0, int64_t i1) {
    vec::bf16_to_float(src + i0, dst + i0, i1 - i0);
  });
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

bool bf16_products_slow() {
  return !bf16_gemm_available() && !vec::bf16_simd() && !platform::cpu_has_amx_bf16();
}

std::string bf16_products_name() {
  const bool on_mm = bf16_products_on_mm();  // (warns once of a bad ROPELAB_BF16_PRODUCTS)
  // Without a bf16 gemm in oneDNN, model::bf16_matmul widens libtorch's mm's share too.
  if (!bf16_gemm_native() && bf16_gemm_available())
    return "oneDNN's sgemm on bf16 widened to float32";
  if (!on_mm) return "oneDNN's gemm";
  if (amx::available())
    return "libtorch's bf16 mm, the attention and the dense layers on AMX tiles";
  return bf16_products_slow() ? "libtorch's bf16 mm, with no fast kernel for this CPU"
                              : "libtorch's bf16 mm";
}

std::string fp32_gemm_name() { return fast_sgemm_available() ? "oneDNN sgemm" : "BLAS (libtorch)"; }

}  // namespace ropelab::util
