// Row-major GEMM, C[M, N] = op(A)[M, K] op(B)[K, N] + beta C, through oneDNN's C API where the
// process has it: dnnl_sgemm (float32) and dnnl_gemm_bf16bf16f32 (bf16 operands, float32
// accumulators and C).
//
// Debian's libtorch links oneDNN as a shared library (libdnnl.so.2 on Debian 12, .so.3 on 13),
// but sends float32 matmuls to the BLAS (OpenBLAS). On the model's shapes oneDNN's JIT sgemm is
// faster: the LM bench step's matmuls (forward, both gradients; 4096 rows of 256 to 8000
// columns) took 611-649 ms with oneDNN against 680-780 ms with OpenBLAS's SkylakeX kernels on 2
// cores of an AVX-512 AMD EPYC, interleaved; the logits (x W^T, W 8000 x 256) 225 against 150
// GFLOP/s (BENCHMARKS.md). The symbol is looked up at run time: a libtorch that links oneDNN
// statically (PyTorch wheels hide its symbols) has none, and callers fall back to libtorch's own
// matmul. oneDNN runs on the OpenMP pool, so at::set_num_threads governs its threads.
//
// ROPELAB_FP32_GEMM=blas turns it off (libtorch's matmul, i.e. the BLAS, everywhere).
#pragma once
#include <cstdint>
#include <functional>
#include <string>

namespace ropelab::util {

// Whether sgemm() can run: oneDNN's symbol was found and ROPELAB_FP32_GEMM is not "blas".
bool fast_sgemm_available();

// C = op(A) op(B) + beta C, row-major, op = transpose when ta/tb; lda, ldb, ldc are the row
// strides of A, B and C as stored. Throws when !fast_sgemm_available() or oneDNN reports an
// error.
void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
           const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Whether oneDNN's dnnl_gemm_bf16bf16f32 runs on this CPU: its JIT kernels are the ones
// libtorch's bf16 matmuls reach through oneDNN (vdpbf16ps where the CPU has AVX512_BF16); on the
// attention's shapes (64-row blocks of 64-wide heads against up to 256 keys) they give the bits
// of libtorch's bf16 bmm rounded from its float32 result. oneDNN has them only for AVX-512 CPUs:
// on an AVX2 CPU (an AMD EPYC of the Zen 3 generation) each call answers "unimplemented", which
// one probe product, made once, finds out.
bool bf16_gemm_native();

// Whether gemm_bf16() can run: natively (bf16_gemm_native), or else on oneDNN's sgemm with both
// operands widened to float32 first. Widening is exact, and both accumulate the products in
// float32, so the two agree up to the order of the sums. Libtorch's own bf16 mm has no fast
// kernel on such a CPU (2.3 against 56 GFLOP/s for float32, 2048^2 on 2 cores of a Zen 3 EPYC).
bool bf16_gemm_available();

// C = op(A) op(B) + beta C with A and B bf16 (their bits, as util/vec_bf16.h's loops take them),
// C float32; row-major, lda, ldb, ldc the row strides as stored. Throws when
// !bf16_gemm_available() or oneDNN reports an error. The call takes no thread of its own inside
// a parallel region (one head's block per call: model/bf16_attention.cpp).
void gemm_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
               const uint16_t* B, int64_t ldb, float beta, float* C, int64_t ldc);

// out = bf16(op(A) op(B)), M x N, both out and acc (M N floats of scratch for the float32 sums)
// with row stride N: the rounding in the gemm's own pass over the rows, each block of rows
// rounded as its sgemm ends where the products are widened (in cache, on the thread that
// computed it), else shared among the threads after the bf16 gemm. The bits of gemm_bf16 then
// vec::float_to_bf16 on the sums.
void gemm_bf16_rounded(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t lda, const uint16_t* B, int64_t ldb, float* acc, uint16_t* out);

// gemm_bf16 where no bf16 gemm runs natively (!bf16_gemm_native()) and B, used for several
// products, was widened once by the caller (widen_bf16): A bf16, B float32 holding bf16 values;
// the same sums as gemm_bf16 on B's bf16 bits there. Throws when !fast_sgemm_available().
void gemm_bf16_widened(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                       int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// What a blocked product does with each block of rows of its float32 result, C [rows, N] (rows N
// apart, the computing thread's scratch), once it is computed: rows r0 .. r0 + rows.
using RowsEpilogue = std::function<void(int64_t r0, int64_t rows, const float* C)>;

// op(A) op(B) for A [M, K] (untransposed) where the products are widened (!bf16_gemm_native()
// and fast_sgemm_available(), else throws), in blocks of rows shared among the threads, each
// block's sums handed to epilogue on the thread that computed them, while they are in cache; the
// whole result is never stored (model/linear.cpp: the dense layers' bias, RoPE, GELU and dropout
// on each block). The same sums, bit for bit, as gemm_bf16 with beta 0.
void gemm_bf16_blocks(bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                      const uint16_t* B, int64_t ldb, const RowsEpilogue& epilogue);

// n bf16 values to float32 (exact), shared among the threads.
void widen_bf16(const uint16_t* src, int64_t n, float* dst);

// Whether a bf16 product whose result the model keeps in bf16 (a biased dense layer's forward,
// model/linear.cpp; the LM head's logits, tasks/loss.cpp) runs on libtorch's bf16 mm, which
// writes bf16, rather than on gemm_bf16, which writes float32 for a pass to round. Yes where the
// CPU has AMX (platform::cpu_has_amx_bf16): oneDNN's matmul then runs on the tiles, and the
// products outrun memory, so the float32 output's bytes cost more than the gemm gains (2 cores of
// an AMX Xeon: with the head's blocks, tasks/loss.cpp, the LM bench's bf16 step took 0.75-0.79x
// the time, BENCHMARKS.md). No elsewhere: on AVX-512 without
// AMX gemm_bf16 is the faster gemm (840-850 against 700-720 GFLOP/s on an EPYC) and its rounding
// is the bias pass, which runs anyway. ROPELAB_BF16_PRODUCTS=mm or =gemm picks one (to compare;
// gemm needs bf16_gemm_available()); any other value warns once and is ignored. Where it is true
// and the CPU has AMX, the bf16 attention's per-block products and the dense layers' products
// that fit run on util::amx's tiles too (model/bf16_attention.cpp, model/linear.cpp).
bool bf16_products_on_mm();

// Whether ropelab's bf16 nodes with products in them (the dense layers, the fused attention)
// beat libtorch's bf16 ops on this CPU: where the AVX-512 forms of util/vec_bf16.h run, or where
// libtorch's bf16 matmul has no kernel of its own (no bf16_gemm_native) and oneDNN's sgemm is
// there for gemm_bf16 to widen onto. On such a CPU libtorch 1.13's bf16 mm runs its own loops,
// 2.3 GFLOP/s on 2 cores of a Zen 3 EPYC, and for untransposed or transposed-A operands sums in
// bf16 (5% of the largest |value| off, K = 512); the nodes' float32 sums are exact to float32.
// The element-wise kernels ask vec::bf16_rows_vectorised() (norm, dropout, the loss) or
// vec::bf16_simd() (RoPE alone, the masked softmax: their float32 forms there).
// Elsewhere (no AVX-512 but a libtorch with bf16 kernels of its own) libtorch's ops stay.
bool bf16_nodes_pay();

// Whether bf16 products fall to libtorch's own bf16 mm on a CPU where it has no fast kernel: no
// AVX-512 (vec::bf16_simd), and neither oneDNN's bf16 gemm nor its sgemm reachable to widen onto
// (ROPELAB_FP32_GEMM=blas, or a libtorch that hides oneDNN's symbols). There libtorch 1.13's bf16
// mm runs its own loops: the LM bench step took 51 s in bf16 against 1.9 s in float32 on the same
// BLAS (2 cores of a Zen 3 EPYC, docs/platform-notes.md). The trainer warns of it.
bool bf16_products_slow();

// "libtorch's bf16 mm" (with ", the attention and the dense layers on AMX tiles" where
// util::amx::available()) or "oneDNN's gemm": what bf16_products_on_mm() chose; or, where
// oneDNN has no bf16 gemm for this CPU, "oneDNN's sgemm on bf16 widened to float32" for both.
// Where bf16_products_slow(), "libtorch's bf16 mm, with no fast kernel for this CPU".
std::string bf16_products_name();

// "oneDNN sgemm" or "BLAS (libtorch)": what float32 matmuls of the model's dense layers run on.
std::string fp32_gemm_name();

}  // namespace ropelab::util
