// The inner loops of ropelab's fused CPU kernels, on plain float arrays: no libtorch here, so
// that this one file is compiled with -O3 -ffast-math (CMakeLists.txt) and its reductions and
// math (util/vec_math.h) vectorise; each function is also compiled for x86-64-v4 (AVX-512 with
// FMA) and x86-64-v3 (AVX2 with FMA) (target_clones) and picked at load time. bf16 data has its
// own loops in util/vec_bf16.h. The callers (model/attention.cpp, model/dropout.cpp,
// tasks/loss.cpp, train/optim.cpp) own the tensors, the threads and autograd.
//
// Equations: softmax and its backward (Vaswani et al. 2017, Eq. 1), softmax cross-entropy with
// label smoothing (Szegedy et al. 2016, Sec. 7), GELU (Hendrycks & Gimpel 2016) under dropout
// (Srivastava et al. 2014), AdamW (Loshchilov & Hutter 2019, Algorithm 2).
#pragma once
#include <cstdint>

namespace ropelab::vec {

// p = softmax(x + b1 + b2) over S elements (b1, b2: additive biases; pass zeros for none).
void softmax_row(const float* x, const float* b1, const float* b2, float* p, int64_t S);
// dx = p (g - sum_k p_k g_k).
void softmax_backward_row(const float* p, const float* g, float* dx, int64_t S);

// Tiled attention's rows (FlashAttention-2, Dao 2023, Alg. 1 and 2). Scores at or below
// kMaskedBelow are masked (callers fill them with kMaskedScore: finite, for -ffast-math), and
// exp(x) of x < kNegligibleExp is taken as 0 (a weight below 1e-26 of the row's largest: no
// subnormal floats, which x86 computes in microcode).
constexpr float kMaskedScore = -1e30F, kMaskedBelow = -1e29F, kNegligibleExp = -60.0F;
// Online softmax of one row of a score tile, in place: m' = max(m, max_j s_j);
// s_j <- exp(s_j - m') (0 where masked); decay = exp(m - m'); l <- l decay + sum_j s_j; m <- m'.
// A row with no unmasked score yet keeps m = kMaskedScore, l = 0 and gets zeros.
void online_softmax_row(float* s, int64_t n, float* m, float* l, float* decay);
// s_j <- exp(s_j - lse) (0 where masked or negligible), in place.
void exp_shifted_row(float* s, int64_t n, float lse);
// p_j <- p_j (dp_j - D), in place (the softmax backward with D = rowsum(dO o O)).
void softmax_grad_row(float* p, const float* dp, int64_t n, float D);

// s_j += src[-j] for j in [0, n): a row of a Toeplitz tile, read backwards from src.
void add_reversed(float* s, const float* src, int64_t n);
// The diagonal sums of a tq x tk tile x (row-major), added into band[0, tq + tk - 1):
// band[t - s + tk - 1] += x[t, s] (the gradient of a Toeplitz tile's generating values).
void add_diagonal_sums(const float* x, int64_t tq, int64_t tk, float* band);

// max_j x_j, sum_j exp(x_j - max), sum_j x_j over V elements.
void logits_row_stats(const float* x, int64_t V, float* max, float* sum_exp, float* sum_x);
// g_j = (exp(x_j - lse) - b) w.
void cross_entropy_row_grad(const float* x, int64_t V, float lse, float b, float w, float* g);

// y = act(h) m and dh = g m act'(h), act = ReLU, GELU (exact form) or GELU's tanh form; m holds
// each element's dropout factor (0 or 1/(1-p)).
enum class Act { kRelu, kGelu, kGeluTanh };
void act_mask_forward(const float* h, const float* m, float* y, int64_t n, Act act);
void act_mask_backward(const float* h, const float* g, const float* m, float* dh, int64_t n,
                       Act act);

// bf16 <-> float32 (bf16 = the high 16 bits of a float32; to bf16 rounds to nearest even, NaN
// stays NaN), as c10::BFloat16 converts, but vectorised.
void bf16_to_float(const uint16_t* src, float* dst, int64_t n);
void float_to_bf16(const float* src, uint16_t* dst, int64_t n);

// RoPE on one row of W channels (RoFormer Eq. 34 with the sign folded into s):
// y_f = x_f c_f + x_{p(f)} s_f, p = the pair swap (interleaved: 2i <-> 2i+1; half-split:
// i <-> i + W/2); and its backward dx_j = g_j c_j + g_{p(j)} s_{p(j)}. W even.
void rope_row(const float* x, const float* c, const float* s, float* y, int64_t W,
              bool interleaved);
void rope_row_backward(const float* g, const float* c, const float* s, float* dx, int64_t W,
                       bool interleaved);

// x rounded to bf16 precision in place (as float_to_bf16 then bf16_to_float).
void round_to_bf16(float* x, int64_t n);
// y = a * b and y = a + b, element by element (y may be a or b).
void mul_into(const float* a, const float* b, float* y, int64_t n);
void add_into(const float* a, const float* b, float* y, int64_t n);

// The dropout factors of elements [start, start + n) of one dropout call (model/dropout.cpp's
// mask: element i is kept when its 32-bit draw, half of mix64(seed ^ (i / 2) * C), is >=
// threshold): out[j] = kept ? keep : 0. start must be even.
void dropout_factors(uint64_t seed, uint64_t threshold, int64_t start, int64_t n, float keep,
                     float* out);

// sum_j x_j^2 over n elements, in float32 lanes (for a piece of a gradient: train/optim.cpp sums
// the pieces in double).
float sum_squares(const float* x, int64_t n);

// One AdamW update over n elements, in libtorch's order of operations, the gradient first scaled
// (the clipping's factor: g = g grad_scale, as g.mul_(factor) before the step, 1 for none):
// p *= decay; m = m b1 + g (1 - b1); v = v b2 + g g (1 - b2); p += neg_step m / (sqrt(v) /
// sqrt_bc2 + eps).
struct AdamWScalars {
  float decay, beta1, beta2, one_minus_beta1, one_minus_beta2, sqrt_bc2, eps, neg_step;
  float grad_scale = 1;
};
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n,
                  const AdamWScalars& k_in);

}  // namespace ropelab::vec
