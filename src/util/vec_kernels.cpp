#include "util/vec_kernels.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "util/random.h"
#include "util/vec_math.h"

#define ROPELAB_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))

namespace ropelab::vec {

using util::mix64;

ROPELAB_CLONES void softmax_row(const float* __restrict x, const float* __restrict b1,
                                const float* __restrict b2, float* __restrict p, int64_t S) {
  float mx = x[0] + b1[0] + b2[0];
  for (int64_t j = 0; j < S; ++j) {
    float v = x[j] + b1[j] + b2[j];
    p[j] = v;
    mx = std::fmax(mx, v);
  }
  float sum = 0;
  for (int64_t j = 0; j < S; ++j) {
    float e = exp_approx(p[j] - mx);
    p[j] = e;
    sum += e;
  }
  const float inv = 1.0F / sum;
  for (int64_t j = 0; j < S; ++j) p[j] *= inv;
}

ROPELAB_CLONES void softmax_backward_row(const float* __restrict p, const float* __restrict g,
                                         float* __restrict dx, int64_t S) {
  float dot = 0;
  for (int64_t j = 0; j < S; ++j) dot += p[j] * g[j];
  for (int64_t j = 0; j < S; ++j) dx[j] = p[j] * (g[j] - dot);
}

ROPELAB_CLONES void logits_row_stats(const float* __restrict x, int64_t V, float* max,
                                     float* sum_exp, float* sum_x) {
  float mx = x[0];
  for (int64_t j = 0; j < V; ++j) mx = std::fmax(mx, x[j]);
  float se = 0, sx = 0;
  for (int64_t j = 0; j < V; ++j) {
    se += exp_approx(x[j] - mx);
    sx += x[j];
  }
  *max = mx;
  *sum_exp = se;
  *sum_x = sx;
}

ROPELAB_CLONES void cross_entropy_row_grad(const float* __restrict x, int64_t V, float lse, float b,
                                           float w, float* __restrict g) {
  for (int64_t j = 0; j < V; ++j) g[j] = (exp_approx(x[j] - lse) - b) * w;
}

ROPELAB_CLONES void online_softmax_row(float* __restrict s, int64_t n, float* m, float* l,
                                       float* decay) {
  const float m_old = *m;
  float mx = m_old;
  for (int64_t j = 0; j < n; ++j) mx = std::fmax(mx, s[j]);
  const bool none = mx <= kMaskedBelow;  // every score so far masked
  const float shift = none ? 0.0F : mx;
  float sum = 0;
  for (int64_t j = 0; j < n; ++j) {
    const float x = s[j] - shift;
    const float e = x < kNegligibleExp ? 0.0F : exp_approx(x);
    s[j] = e;
    sum += e;
  }
  const float dx = m_old - shift;
  const float d = none || dx < kNegligibleExp ? 0.0F : exp_approx(dx);
  *decay = d;
  *l = *l * d + sum;
  *m = mx;
}

ROPELAB_CLONES void exp_shifted_row(float* __restrict s, int64_t n, float lse) {
  for (int64_t j = 0; j < n; ++j) {
    const float x = s[j] - lse;
    s[j] = s[j] <= kMaskedBelow || x < kNegligibleExp ? 0.0F : exp_approx(x);
  }
}

ROPELAB_CLONES void softmax_grad_row(float* __restrict p, const float* __restrict dp, int64_t n,
                                     float D) {
  for (int64_t j = 0; j < n; ++j) p[j] *= dp[j] - D;
}

ROPELAB_CLONES void add_reversed(float* __restrict s, const float* __restrict src, int64_t n) {
  for (int64_t j = 0; j < n; ++j) s[j] += src[-j];
}

ROPELAB_CLONES void add_diagonal_sums(const float* __restrict x, int64_t tq, int64_t tk,
                                      float* __restrict band) {
  for (int64_t t = 0; t < tq; ++t) {
    // Row t covers band[t, t + tk), read from the row's end (a vectorised reversed load).
    float* __restrict out = band + t;
    const float* __restrict row = x + t * tk;
    for (int64_t s = 0; s < tk; ++s) out[s] += row[tk - 1 - s];
  }
}

ROPELAB_CLONES void act_mask_forward(const float* __restrict h, const float* __restrict m,
                                     float* __restrict y, int64_t n, Act act) {
  if (act == Act::kGelu) {
    for (int64_t j = 0; j < n; ++j) y[j] = gelu_approx(h[j]) * m[j];
  } else if (act == Act::kGeluTanh) {
    for (int64_t j = 0; j < n; ++j) y[j] = gelu_tanh_approx(h[j]) * m[j];
  } else {
    for (int64_t j = 0; j < n; ++j) y[j] = (h[j] > 0.0F ? h[j] : 0.0F) * m[j];
  }
}

ROPELAB_CLONES void act_mask_backward(const float* __restrict h, const float* __restrict g,
                                      const float* __restrict m, float* __restrict dh, int64_t n,
                                      Act act) {
  if (act == Act::kGelu) {
    for (int64_t j = 0; j < n; ++j) dh[j] = g[j] * m[j] * gelu_grad_approx(h[j]);
  } else if (act == Act::kGeluTanh) {
    for (int64_t j = 0; j < n; ++j) dh[j] = g[j] * m[j] * gelu_tanh_grad_approx(h[j]);
  } else {
    for (int64_t j = 0; j < n; ++j) dh[j] = h[j] > 0.0F ? g[j] * m[j] : 0.0F;
  }
}

ROPELAB_CLONES void bf16_to_float(const uint16_t* __restrict src, float* __restrict dst,
                                  int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    uint32_t u = static_cast<uint32_t>(src[j]) << 16;
    std::memcpy(&dst[j], &u, sizeof u);
  }
}

ROPELAB_CLONES void float_to_bf16(const float* __restrict src, uint16_t* __restrict dst,
                                  int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    uint32_t u;
    std::memcpy(&u, &src[j], sizeof u);
    const uint32_t rounded = (u + 0x7FFFU + ((u >> 16) & 1U)) >> 16;
    dst[j] = static_cast<uint16_t>((u & 0x7FFFFFFFU) > 0x7F800000U ? 0x7FC0U : rounded);
  }
}

ROPELAB_CLONES void rope_row(const float* __restrict x, const float* __restrict c,
                             const float* __restrict s, float* __restrict y, int64_t W,
                             bool interleaved) {
  if (interleaved) {
    for (int64_t f = 0; f < W; f += 2) {
      y[f] = x[f] * c[f] + x[f + 1] * s[f];
      y[f + 1] = x[f + 1] * c[f + 1] + x[f] * s[f + 1];
    }
    return;
  }
  const int64_t h = W / 2;
  for (int64_t i = 0; i < h; ++i) y[i] = x[i] * c[i] + x[i + h] * s[i];
  for (int64_t i = 0; i < h; ++i) y[i + h] = x[i + h] * c[i + h] + x[i] * s[i + h];
}

ROPELAB_CLONES void rope_row_backward(const float* __restrict g, const float* __restrict c,
                                      const float* __restrict s, float* __restrict dx, int64_t W,
                                      bool interleaved) {
  if (interleaved) {
    for (int64_t f = 0; f < W; f += 2) {
      dx[f] = g[f] * c[f] + g[f + 1] * s[f + 1];
      dx[f + 1] = g[f + 1] * c[f + 1] + g[f] * s[f];
    }
    return;
  }
  const int64_t h = W / 2;
  for (int64_t i = 0; i < h; ++i) dx[i] = g[i] * c[i] + g[i + h] * s[i + h];
  for (int64_t i = 0; i < h; ++i) dx[i + h] = g[i + h] * c[i + h] + g[i] * s[i];
}

ROPELAB_CLONES void round_to_bf16(float* x, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    uint32_t u;
    std::memcpy(&u, &x[j], sizeof u);
    const uint32_t rounded = ((u + 0x7FFFU + ((u >> 16) & 1U)) >> 16) << 16;
    const uint32_t r = (u & 0x7FFFFFFFU) > 0x7F800000U ? 0x7FC00000U : rounded;
    std::memcpy(&x[j], &r, sizeof r);
  }
}

ROPELAB_CLONES void mul_into(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = a[j] * b[j];
}

ROPELAB_CLONES void add_into(const float* a, const float* b, float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = a[j] + b[j];
}

// The draws of a block of pairs go to a buffer first, and their 32-bit halves are read from it
// as one array, element j's at j (little-endian: the low half first), so that the compare and
// the select run on 32-bit lanes. At -O3 GCC vectorises the draws' 64-bit products (AVX2 has
// none: three 32-bit ones each), which its -O2 cost model left scalar: 0.68 ns an element on a
// Zen 3 core, against 3.5 for the loop over pairs at -O2.
__attribute__((optimize("O3"))) ROPELAB_CLONES void dropout_factors(uint64_t seed,
                                                                    uint64_t threshold,
                                                                    int64_t start, int64_t n,
                                                                    float keep,
                                                                    float* __restrict out) {
  constexpr uint64_t kC = 0xD1B54A32D192ED03ULL;
  constexpr int64_t kPairs = 256;
  if (threshold > 0xFFFFFFFFULL) {  // no draw reaches it
    for (int64_t j = 0; j < n; ++j) out[j] = 0.0F;
    return;
  }
  const auto t = static_cast<uint32_t>(threshold);
  uint64_t draw[kPairs];
  uint32_t half[2 * kPairs];
  for (int64_t p0 = 0; p0 < (n + 1) / 2; p0 += kPairs) {
    const int64_t np = std::min(kPairs, (n + 1) / 2 - p0);
    const uint64_t key0 = static_cast<uint64_t>(start / 2 + p0) * kC;
    for (int64_t j = 0; j < np; ++j) draw[j] = mix64(seed ^ (key0 + static_cast<uint64_t>(j) * kC));
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    std::memcpy(half, draw, static_cast<size_t>(np) * sizeof draw[0]);
#else
    for (int64_t j = 0; j < np; ++j) {
      half[2 * j] = static_cast<uint32_t>(draw[j]);
      half[2 * j + 1] = static_cast<uint32_t>(draw[j] >> 32);
    }
#endif
    const int64_t m = std::min(2 * np, n - 2 * p0);
    float* o = out + 2 * p0;
    for (int64_t k = 0; k < m; ++k) o[k] = half[k] >= t ? keep : 0.0F;
  }
}

ROPELAB_CLONES float sum_squares(const float* __restrict x, int64_t n) {
  float s = 0;
  for (int64_t j = 0; j < n; ++j) s += x[j] * x[j];
  return s;
}

ROPELAB_CLONES void adamw_update(float* __restrict p, const float* __restrict g,
                                 float* __restrict m, float* __restrict v, int64_t n,
                                 const AdamWScalars& k_in) {
  const AdamWScalars k = k_in;  // a local copy: the loop need not reload it through the pointer
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i] * k.decay;
    float gi = g[i] * k.grad_scale;
    float mi = m[i] * k.beta1 + gi * k.one_minus_beta1;
    float vi = v[i] * k.beta2 + (gi * gi) * k.one_minus_beta2;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi + k.neg_step * (mi / (std::sqrt(vi) / k.sqrt_bc2 + k.eps));
  }
}

}  // namespace ropelab::vec
