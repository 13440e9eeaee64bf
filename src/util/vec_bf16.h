// Loops over bf16 data that read and write bf16 in place, with float32 arithmetic in registers:
// no float32 staging copy of the operands (util/float_rows.h). Each has an AVX-512 form in
// intrinsics (F, BW, DQ, VL and FMA: x86-64-v4), chosen at run time where the CPU has them, and
// a portable form in plain loops, also compiled for x86-64-v3 (AVX2), one rounding to bf16 at
// the store, round-to-nearest-even as c10::BFloat16 does (the two forms: see namespace portable
// below). GCC's auto-vectoriser turned such mixed-width loops into half-width code with register
// spills on AVX-512 (BENCHMARKS.md), hence the intrinsics there.
//
// Used under bf16 autocast by the dense layers (model/linear.cpp: the bias added after the
// matmul, y = x W^T + b, Vaswani et al. 2017, Eq. 2, and the bias's gradient, dY's column sums),
// the FFN's activation under dropout (model/dropout.cpp: GELU, Hendrycks & Gimpel 2016, with
// Srivastava et al. 2014's dropout), the softmax cross-entropy (tasks/loss.cpp), the
// attention's softmax (Eq. 1), the pre-norm LayerNorm (model/norm.cpp, Ba et al. 2016) and RoPE
// (model/position/rotary.cpp, RoFormer Eq. 34).
#pragma once
#include <cstdint>

#include "util/vec_kernels.h"

namespace ropelab::vec {

// Whether this CPU runs the AVX-512 forms (else the portable ones run).
bool bf16_simd();
// Whether these loops run vectorised here: the AVX-512 forms, or the portable forms' clones for
// x86-64-v3 (AVX2 with FMA: the bias passes, the softmax, RoPE, LayerNorm and loss rows, and
// the element-wise ones). The callers whose portable form beats their other path there (the
// unfused ops, or a float32 form) ask this instead of bf16_simd() (docs/platform-notes.md, "bf16
// on a CPU without AVX-512").
bool bf16_rows_vectorised();
// Whether those forms round their stores with vcvtneps2bf16 (CPUs with AVX512_BF16: AMD Zen 4,
// Intel Cooper Lake, Sapphire Rapids and later): round to nearest even as c10::BFloat16, one
// instruction instead of eight, but float32 denormals become zeros of their sign, and a NaN keeps
// its sign and the top of its payload (c10::BFloat16 and the portable forms: 0x7FC0).
bool bf16_convert_instruction();

// y[r, j] = bf16(float(y[r, j]) + b[j]) for r < rows, j < cols; y's rows ld elements apart.
void add_bias_bf16(uint16_t* y, const float* b, int64_t rows, int64_t cols, int64_t ld);
// The same on a float32 gemm's output [rows, cols] (contiguous, as y): y[r, j] =
// bf16(float(bf16(acc[r, j])) + b[j]), acc first rounded as a bf16 matmul rounds its product,
// so that the bits are those of that matmul then add_bias_bf16.
void add_bias_from_float_bf16(const float* acc, const float* b, uint16_t* y, int64_t rows,
                              int64_t cols);
// acc[j] += float(g[r, j]) over r < rows, in row order, for j < cols; g's rows ld apart.
void add_column_sums_bf16(const uint16_t* g, int64_t rows, int64_t cols, int64_t ld, float* acc);

// y = bf16(act(h) m) and d = bf16(act'(h) m) over n elements, m the dropout factors (0 or the
// kept scale): the forward of act_dropout, which keeps d for its backward, dh = bf16(g d).
void act_mask_forward_bf16(const uint16_t* h, const float* m, uint16_t* y, uint16_t* d, int64_t n,
                           Act act);
// out = bf16(a b), element by element (out may be a or b).
void mul_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n);

// The residual branch under dropout in mixed precision (model/dropout.cpp): y = x + float(bf16(h
// m)) (the product rounded to h's bf16, the sum in float32, as the unfused ops), and its backward
// to h, dh = bf16(float(bf16(g)) m) (g rounded to bf16, then the product).
void dropout_add_bf16(const float* x, const uint16_t* h, const float* m, float* y, int64_t n);
void mask_to_bf16(const float* g, const float* m, uint16_t* dh, int64_t n);

// One row of V logits: its max, sum_j exp(x_j - max), sum_j x_j and the first index of the max.
void logits_row_stats_bf16(const uint16_t* x, int64_t V, float* max, float* sum_exp, float* sum_x,
                           int64_t* argmax);
// g_j = bf16((exp(x_j - lse) - b) w - [j == target] a_w): the row's softmax cross-entropy
// gradient (target < 0: none).
void cross_entropy_row_grad_bf16(const uint16_t* x, int64_t V, float lse, float b, float w,
                                 int64_t target, float a_w, uint16_t* g);

// p = bf16(softmax(x scale + b1 + b2)) over S elements (b1, b2: float32 additive biases, zeros
// for none; tmp: S floats of scratch), as vec::softmax_row computes it, with the row's max and
// 1 / sum of exp for the backward; and that backward, dx = bf16(p (g - sum_k p_k g_k) scale)
// (the gradient of x itself; scale 1 leaves every bit as it was without one), with p
// recomputed in float32 from x, b1, b2, max and inv: the same float32 p as the forward's, never
// its bf16 rounding (the attention's softmax, model/attention.cpp). Both stop at the row's last
// element with b1 + b2 above -1e29 and write zeros after it (p is exactly 0 there: a causal
// row's masked half is never computed); a row masked throughout stays whole (uniform p).
// The forward takes x as bf16 bits (In = uint16_t) or float32 (In = float: a gemm's output, each
// element rounded to bf16 first as a bf16 matmul rounds its product, the bits of float_to_bf16
// then the bf16 row).
template <class In>
void softmax_row_bf16(const In* x, const float* b1, const float* b2, uint16_t* p, int64_t S,
                      float* tmp, float* max, float* inv, float scale = 1.0F);
void softmax_backward_row_bf16(const uint16_t* x, const float* b1, const float* b2, float max,
                               float inv, const uint16_t* g, uint16_t* dx, int64_t S, float* tmp,
                               float scale = 1.0F);

// The same backward from the forward's bf16 p itself (nothing recomputed): dx = bf16(p (g -
// sum_k p_k g_k) scale) with g = bf16(dp), the float32 gradient of p rounded as a bf16 matmul
// rounds its product; the sums in float32. Where p is 0 (masked, or a causal row's far part),
// dx is 0 (model/bf16_attention.cpp keeps p and reads it back here).
void softmax_backward_from_p_bf16(const uint16_t* p, const float* dp, uint16_t* dx, int64_t S,
                                  float scale = 1.0F);

// Both at once, while the row is in cache: the row's stats as logits_row_stats_bf16, and its
// gradient g_j = bf16((exp(x_j - lse) - b) w - [j == target] a_w) (tmp: V floats of scratch).
// x: bf16 bits, or float32 (uint16_t or float), a float32 x rounded to bf16 first, as a bf16
// matmul rounds its product: a bf16 gemm's float32 output gives the values of its bf16 output.
// `next` (optional): the row the caller reads next, V elements of x's type that the AVX-512 form
// requests into cache while its exps run (streaming from memory, each row's first pass otherwise
// waits on it). The AVX-512 form writes a 32-byte aligned g past the cache (non-temporal
// stores: the backward's matmuls read it, long after) unless `cached` (the caller's next gemm
// reads it), any other g through it: the same bits. g may be x itself (bf16 bits): each row is
// read before it is written.
template <class In>
void cross_entropy_row_fused_bf16(const In* x, int64_t V, float b, float w, int64_t target,
                                  float a_w, uint16_t* g, float* tmp, float* max, float* sum_exp,
                                  float* sum_x, int64_t* argmax, const void* next = nullptr,
                                  bool cached = false);

// LayerNorm (Ba et al. 2016) of one row of D float32, written as bf16 for the matmul that reads
// it: y = bf16((x - mean) rstd w + b), rstd = 1 / sqrt(var + eps) (biased var), with mean and
// rstd for the backward. The backward, from the bf16 gradient g of y: dx = rstd (g w - mean(g w)
// - xhat mean(g w xhat)) in float32, xhat = (x - mean) rstd, and dw += g xhat, db += g. With
// dres (else null), x's gradient from elsewhere (a pre-norm block's residual), dx = that + dres:
// the same float32 sum as adding the two gradients afterwards, in the same pass.
void layer_norm_row_bf16(const float* x, int64_t D, const float* w, const float* b, float eps,
                         uint16_t* y, float* mean, float* rstd);
void layer_norm_backward_row_bf16(const float* x, int64_t D, const float* w, float mean, float rstd,
                                  const uint16_t* g, const float* dres, float* dx, float* dw,
                                  float* db);

// RoPE (RoFormer Eq. 34) on one row of W (even) bf16 values, with float32 tables c and s spread
// to the row's width (model/position/rotary.cpp: the sine's sign folded in): forward y = bf16(x c
// + swap(x) s); backward (x the gradient of y) y = bf16(x c + swap(x s)). swap exchanges the
// halves, or each adjacent pair where interleaved. In float32, rounded once.
void rope_row_bf16(const uint16_t* x, const float* c, const float* s, uint16_t* y, int64_t W,
                   bool interleaved, bool backward);

// The transpose of a K x rows block of bf16 (row stride ld), widened to float32 (exact):
// dst[r K + k] = float(src[k ld + r]), r < rows, k < K. The widened gemm's transposed operands
// (util/gemm.cpp: the weight gradients dY^T X): in 8 x 8 tiles, each a register transpose, where
// the CPU has AVX2 (0.54 against 0.75 ns an element one at a time, 4096 x 128 blocks of a
// 4096 x 1024 operand, one thread of a Zen 3 EPYC).
void bf16_to_float_transposed(const uint16_t* src, int64_t K, int64_t rows, int64_t ld, float* dst);

// The portable forms, whatever the CPU (what an AVX2 CPU runs; for the tests). Bias and sums: the
// same bits as the forms above; the math: the same to float32 rounding (the AVX-512 forms fuse
// multiply-adds, and their exp, a table and a cubic, is within 1.7 ulp of exp where exp_approx is
// within 2).
namespace portable {
void add_bias_bf16(uint16_t* y, const float* b, int64_t rows, int64_t cols, int64_t ld);
void add_bias_from_float_bf16(const float* acc, const float* b, uint16_t* y, int64_t rows,
                              int64_t cols);
void add_column_sums_bf16(const uint16_t* g, int64_t rows, int64_t cols, int64_t ld, float* acc);
void act_mask_forward_bf16(const uint16_t* h, const float* m, uint16_t* y, uint16_t* d, int64_t n,
                           Act act);
void mul_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n);
void dropout_add_bf16(const float* x, const uint16_t* h, const float* m, float* y, int64_t n);
void mask_to_bf16(const float* g, const float* m, uint16_t* dh, int64_t n);
void logits_row_stats_bf16(const uint16_t* x, int64_t V, float* max, float* sum_exp, float* sum_x,
                           int64_t* argmax);
void cross_entropy_row_grad_bf16(const uint16_t* x, int64_t V, float lse, float b, float w,
                                 int64_t target, float a_w, uint16_t* g);
template <class In>
void cross_entropy_row_fused_bf16(const In* x, int64_t V, float b, float w, int64_t target,
                                  float a_w, uint16_t* g, float* tmp, float* max, float* sum_exp,
                                  float* sum_x, int64_t* argmax);
template <class In>
void softmax_row_bf16(const In* x, const float* b1, const float* b2, uint16_t* p, int64_t S,
                      float* tmp, float* max, float* inv, float scale = 1.0F);
void softmax_backward_row_bf16(const uint16_t* x, const float* b1, const float* b2, float max,
                               float inv, const uint16_t* g, uint16_t* dx, int64_t S, float* tmp,
                               float scale = 1.0F);
void softmax_backward_from_p_bf16(const uint16_t* p, const float* dp, uint16_t* dx, int64_t S,
                                  float scale = 1.0F);
void layer_norm_row_bf16(const float* x, int64_t D, const float* w, const float* b, float eps,
                         uint16_t* y, float* mean, float* rstd);
void layer_norm_backward_row_bf16(const float* x, int64_t D, const float* w, float mean, float rstd,
                                  const uint16_t* g, const float* dres, float* dx, float* dw,
                                  float* db);
void rope_row_bf16(const uint16_t* x, const float* c, const float* s, uint16_t* y, int64_t W,
                   bool interleaved, bool backward);
}  // namespace portable

}  // namespace ropelab::vec
