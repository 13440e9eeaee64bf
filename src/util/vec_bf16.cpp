#include "util/vec_bf16.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "util/vec_math.h"

#if defined(__x86_64__) && defined(__GNUC__)
// GCC 12's AVX-512 headers start some conversions from _mm512_undefined_*(), which its
// -Wmaybe-uninitialized and -Wuninitialized report at every inlined use (GCC bug 105593).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#define ROPELAB_HAVE_X86 1
#else
#define ROPELAB_HAVE_X86 0
#endif

namespace ropelab::vec {

namespace {

// bf16 bits -> float32 (exact) and float32 -> bf16 bits (nearest even; NaN -> 0x7FC0).
inline float load1(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
// The NaN case is a mask, not a branch: GCC if-converts a branch only in the loops it vectorises
// as loops; in those it vectorises as groups of lanes (a pair of RoPE's channels, kLanes below)
// the branch kept the whole loop scalar.
inline uint16_t store1(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  const uint32_t nan = 0U - static_cast<uint32_t>((u & 0x7FFFFFFFU) > 0x7F800000U);
  const uint32_t r = (u + 0x7FFFU + ((u >> 16) & 1U)) >> 16;
  return static_cast<uint16_t>((0x7FC0U & nan) | (r & ~nan));
}

// A softmax row's length up to its last unmasked element: 1 + the last j with b1[j] + b2[j] above
// kMaskedBelow, or S when every element is masked (such a row stays whole: its softmax is
// uniform). Beyond it p is exactly 0 (exp of less than -87 is 0), so the loops stop there: the
// causal half of each row is never computed.
// Groups of 8 from the end, each tested at once (in one vector where the clone has AVX2), then
// the group that holds it one by one: a causal row's masked half took a quarter of its softmax
// one element at a time.
constexpr float kMaskedBelow = -1e29F;
#if ROPELAB_HAVE_X86
__attribute__((target_clones("arch=x86-64-v3", "default"), optimize("O3")))
#endif
int64_t
unmasked_end(const float* b1, const float* b2, int64_t n) {  // 0: none in [0, n)
  int64_t j = n;
  for (; j >= 8; j -= 8) {
    bool any = false;
    for (int64_t l = j - 8; l < j; ++l) any |= b1[l] + b2[l] > kMaskedBelow;
    if (any) break;
  }
  for (; j > 0; --j)
    if (b1[j - 1] + b2[j - 1] > kMaskedBelow) return j;
  return 0;
}
int64_t unmasked_length_scalar(const float* b1, const float* b2, int64_t S) {
  const int64_t e = unmasked_end(b1, b2, S);
  return e == 0 ? S : e;
}

#if ROPELAB_HAVE_X86
// avx512bf16 is in the target only for vcvtneps2bf16 (round16<true>), which runs only where the
// CPU has it (bf16_convert_instruction()); the compiler emits no bf16 instruction of its own from
// these loops.
#define ROPELAB_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma,avx512bf16")))

// 16 bf16 at p (the first n < 16 of them when masked) as float32.
ROPELAB_AVX512 inline __m512 load16(const uint16_t* p) {
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
ROPELAB_AVX512 inline __m512 load16(const uint16_t* p, __mmask16 k) {
  const __m256i h = _mm256_maskz_loadu_epi16(k, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
// 16 float32 rounded to bf16: as store1 (kNe false), or by vcvtneps2bf16 (kNe true, on CPUs
// with AVX512_BF16): the same round-to-nearest-even, one instruction instead of eight, except
// that float32 denormals become zeros of their sign and a NaN keeps its sign and payload's top
// bits (store1: 0x7FC0).
template <bool kNe>
ROPELAB_AVX512 inline __m256i round16(__m512 x) {
  if constexpr (kNe) {
    return reinterpret_cast<__m256i>(_mm512_cvtneps_pbh(x));
  } else {
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7FFF))), 16);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7FFFFFFF)), _mm512_set1_epi32(0x7F800000));
    return _mm512_cvtepi32_epi16(_mm512_mask_mov_epi32(r, nan, _mm512_set1_epi32(0x7FC0)));
  }
}
template <bool kNe>
ROPELAB_AVX512 inline void store16(uint16_t* p, __m512 x) {
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), round16<kNe>(x));
}
template <bool kNe>
ROPELAB_AVX512 inline void store16(uint16_t* p, __m512 x, __mmask16 k) {
  _mm256_mask_storeu_epi16(p, k, round16<kNe>(x));
}
// store16 bypassing the cache (a non-temporal store: no read of the line first), for a p that
// is 32-byte aligned; the caller ends its stores with _mm_sfence().
template <bool kNe>
ROPELAB_AVX512 inline void stream16(uint16_t* p, __m512 x) {
  _mm256_stream_si256(reinterpret_cast<__m256i*>(p), round16<kNe>(x));
}
// 16 float32 as a bf16 matmul rounds its product: rounded to bf16, back in float32.
template <bool kNe>
ROPELAB_AVX512 inline __m512 bf16_round16(__m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(round16<kNe>(x)), 16));
}

ROPELAB_AVX512 inline __mmask16 tail_mask(int64_t n) {
  return static_cast<__mmask16>((1U << static_cast<unsigned>(n)) - 1U);
}

template <bool kNe>
ROPELAB_AVX512 void add_bias_avx512(uint16_t* y, const float* b, int64_t rows, int64_t cols,
                                    int64_t ld) {
  const int64_t full = cols - cols % 16;
  const __mmask16 k = tail_mask(cols - full);
  for (int64_t r = 0; r < rows; ++r) {
    uint16_t* row = y + r * ld;
    for (int64_t j = 0; j < full; j += 16)
      store16<kNe>(row + j, _mm512_add_ps(load16(row + j), _mm512_loadu_ps(b + j)));
    if (k != 0)
      store16<kNe>(row + full,
                   _mm512_add_ps(load16(row + full, k), _mm512_maskz_loadu_ps(k, b + full)), k);
  }
}

template <bool kNe>
ROPELAB_AVX512 void add_bias_from_float_avx512(const float* acc, const float* b, uint16_t* y,
                                               int64_t rows, int64_t cols) {
  const int64_t full = cols - cols % 16;
  const __mmask16 k = tail_mask(cols - full);
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = acc + r * cols;
    uint16_t* row = y + r * cols;
    for (int64_t j = 0; j < full; j += 16)
      store16<kNe>(row + j, _mm512_add_ps(bf16_round16<kNe>(_mm512_loadu_ps(a + j)),
                                          _mm512_loadu_ps(b + j)));
    if (k != 0)
      store16<kNe>(row + full,
                   _mm512_add_ps(bf16_round16<kNe>(_mm512_maskz_loadu_ps(k, a + full)),
                                 _mm512_maskz_loadu_ps(k, b + full)),
                   k);
  }
}

ROPELAB_AVX512 void add_column_sums_avx512(const uint16_t* g, int64_t rows, int64_t cols,
                                           int64_t ld, float* acc) {
  // 64 columns at a time in four registers, every row added in order (the portable order).
  int64_t j = 0;
  for (; j + 64 <= cols; j += 64) {
    __m512 a0 = _mm512_loadu_ps(acc + j), a1 = _mm512_loadu_ps(acc + j + 16);
    __m512 a2 = _mm512_loadu_ps(acc + j + 32), a3 = _mm512_loadu_ps(acc + j + 48);
    for (int64_t r = 0; r < rows; ++r) {
      const uint16_t* row = g + r * ld + j;
      a0 = _mm512_add_ps(a0, load16(row));
      a1 = _mm512_add_ps(a1, load16(row + 16));
      a2 = _mm512_add_ps(a2, load16(row + 32));
      a3 = _mm512_add_ps(a3, load16(row + 48));
    }
    _mm512_storeu_ps(acc + j, a0);
    _mm512_storeu_ps(acc + j + 16, a1);
    _mm512_storeu_ps(acc + j + 32, a2);
    _mm512_storeu_ps(acc + j + 48, a3);
  }
  for (; j < cols; j += 16) {
    const __mmask16 k = tail_mask(cols - j < 16 ? cols - j : 16);
    __m512 a = _mm512_maskz_loadu_ps(k, acc + j);
    for (int64_t r = 0; r < rows; ++r) a = _mm512_add_ps(a, load16(g + r * ld + j, k));
    _mm512_mask_storeu_ps(acc + j, k, a);
  }
}

ROPELAB_AVX512 inline __m512 set1(float v) { return _mm512_set1_ps(v); }

// exp on 16 lanes, within 1.7 ulp of exp on [-87, 88] (exp_approx, util/vec_math.h: 2), 0 below
// -87 (and for NaN), exp(88) above 88: x = (k + j/16) ln 2 + r with |r| <= ln 2 / 32, so that
// exp(x) = 2^k 2^(j/16) e^r: 2^(j/16) from a 16-entry table (one vpermps on the low bits of
// round(16 x / ln 2), which a shifter constant leaves in the mantissa), e^r a cubic (error
// r^4 / 24 < 1e-8), 2^k by vscalefps (which takes k + j/16 and floors it). Three multiply-adds
// fewer than the Cephes polynomial of exp_approx, and no rounding instruction: the
// cross-entropy's row kernel, bound by its exps, ran 18% faster (6.2 -> 5.1 ms for 4096 x 8000
// logits, 2 threads).
ROPELAB_AVX512 inline __m512 exp16(__m512 x) {
  const __m512 table =
      _mm512_setr_ps(1.0F, 1.04427373F, 1.09050775F, 1.13878858F, 1.18920708F, 1.24185777F,
                     1.29683959F, 1.35425556F, 1.41421354F, 1.47682619F, 1.54221082F, 1.61049032F,
                     1.68179286F, 1.75625217F, 1.8340081F, 1.91520655F);
  const __m512 shifter = set1(786432.0F);  // 1.5 * 2^19: its last 4 mantissa bits get round(16 t)
  const __m512 xc = _mm512_min_ps(x, set1(88.0F));
  const __m512 s = _mm512_fmadd_ps(xc, set1(1.44269504088896341F), shifter);
  const __m512 k = _mm512_sub_ps(s, shifter);  // round(16 x / ln 2) / 16
  __m512 r = _mm512_fnmadd_ps(k, set1(0.693359375F), xc);
  r = _mm512_fmadd_ps(k, set1(2.12194440e-4F), r);
  __m512 p = _mm512_fmadd_ps(set1(1.0F / 6), r, set1(0.5F));
  p = _mm512_fmadd_ps(p, r, set1(1.0F));
  p = _mm512_fmadd_ps(p, r, set1(1.0F));
  const __m512 t = _mm512_permutexvar_ps(_mm512_castps_si512(s), table);
  return _mm512_maskz_scalef_ps(_mm512_cmp_ps_mask(x, set1(-87.0F), _CMP_GE_OQ),
                                _mm512_mul_ps(t, p), k);
}

// 1 / d, to about float32 precision (vrcp14ps and one Newton step).
ROPELAB_AVX512 inline __m512 recip16(__m512 d) {
  const __m512 t = _mm512_rcp14_ps(d);
  return _mm512_mul_ps(t, _mm512_fnmadd_ps(d, t, set1(2.0F)));
}

// act(h) and act'(h) on 16 lanes (vec_math.h's gelu_approx and gelu_grad_approx, which share
// exp(-h^2 / 2); gelu_tanh_approx and its gradient; ReLU).
ROPELAB_AVX512 inline __m512 act16(__m512 h, Act act, __m512* grad) {
  if (act == Act::kGelu) {
    const __m512 z = _mm512_mul_ps(h, set1(0.70710678118654752F));
    const __m512 t = recip16(_mm512_fmadd_ps(_mm512_abs_ps(z), set1(0.3275911F), set1(1.0F)));
    __m512 y = set1(1.061405429F);
    y = _mm512_fmadd_ps(y, t, set1(-1.453152027F));
    y = _mm512_fmadd_ps(y, t, set1(1.421413741F));
    y = _mm512_fmadd_ps(y, t, set1(-0.284496736F));
    y = _mm512_fmadd_ps(y, t, set1(0.254829592F));
    const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_mul_ps(z, z)));
    const __m512 erf_abs = _mm512_fnmadd_ps(_mm512_mul_ps(y, t), e, set1(1.0F));
    const __m512 erf = _mm512_or_ps(erf_abs, _mm512_and_ps(z, set1(-0.0F)));
    const __m512 cdf = _mm512_fmadd_ps(erf, set1(0.5F), set1(0.5F));
    *grad = _mm512_fmadd_ps(_mm512_mul_ps(h, set1(0.39894228040143268F)), e, cdf);
    return _mm512_mul_ps(h, cdf);
  }
  if (act == Act::kGeluTanh) {
    const __m512 h2 = _mm512_mul_ps(h, h);
    const __m512 u2 = _mm512_mul_ps(set1(1.5957691216057308F),
                                    _mm512_fmadd_ps(_mm512_mul_ps(set1(0.044715F), h2), h, h));
    const __m512 a = exp16(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(u2)));
    const __m512 r = recip16(_mm512_add_ps(set1(1.0F), a));
    const __m512 ar = _mm512_mul_ps(a, r);
    const __m512 s =
        _mm512_mask_mov_ps(ar, _mm512_cmp_ps_mask(u2, _mm512_setzero_ps(), _CMP_GE_OQ), r);
    const __m512 du =
        _mm512_mul_ps(set1(1.5957691216057308F), _mm512_fmadd_ps(set1(0.134145F), h2, set1(1.0F)));
    *grad = _mm512_fmadd_ps(_mm512_mul_ps(h, _mm512_mul_ps(ar, r)), du, s);
    return _mm512_mul_ps(h, s);
  }
  const __mmask16 pos = _mm512_cmp_ps_mask(h, _mm512_setzero_ps(), _CMP_GT_OQ);
  *grad = _mm512_mask_mov_ps(_mm512_setzero_ps(), pos, set1(1.0F));
  return _mm512_maskz_mov_ps(pos, h);
}

template <bool kNe>
ROPELAB_AVX512 void act_mask_forward_avx512(const uint16_t* h, const float* m, uint16_t* y,
                                            uint16_t* d, int64_t n, Act act) {
  // Whole vectors unmasked (masked loads and stores in the loop cost half its speed), then
  // the tail.
  const int64_t full = n - n % 16;
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 mj = _mm512_loadu_ps(m + j);
    __m512 grad;
    const __m512 a = act16(load16(h + j), act, &grad);
    store16<kNe>(y + j, _mm512_mul_ps(a, mj));
    store16<kNe>(d + j, _mm512_mul_ps(grad, mj));
  }
  if (full < n) {
    const __mmask16 k = tail_mask(n - full);
    const __m512 mj = _mm512_maskz_loadu_ps(k, m + full);
    __m512 grad;
    const __m512 a = act16(load16(h + full, k), act, &grad);
    store16<kNe>(y + full, _mm512_mul_ps(a, mj), k);
    store16<kNe>(d + full, _mm512_mul_ps(grad, mj), k);
  }
}

template <bool kNe>
ROPELAB_AVX512 void mul_avx512(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n) {
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) store16<kNe>(out + j, _mm512_mul_ps(load16(a + j), load16(b + j)));
  if (j < n) {
    const __mmask16 k = tail_mask(n - j);
    store16<kNe>(out + j, _mm512_mul_ps(load16(a + j, k), load16(b + j, k)), k);
  }
}

// x rounded to bf16 and back (as store16 then load16).
template <bool kNe>
ROPELAB_AVX512 inline __m512 round_trip16(__m512 x) {
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(round16<kNe>(x)), 16));
}

template <bool kNe>
ROPELAB_AVX512 void dropout_add_avx512(const float* x, const uint16_t* h, const float* m, float* y,
                                       int64_t n) {
  const int64_t full = n - n % 16;
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 hm = round_trip16<kNe>(_mm512_mul_ps(load16(h + j), _mm512_loadu_ps(m + j)));
    _mm512_storeu_ps(y + j, _mm512_add_ps(_mm512_loadu_ps(x + j), hm));
  }
  if (full < n) {
    const __mmask16 k = tail_mask(n - full);
    const __m512 hm =
        round_trip16<kNe>(_mm512_mul_ps(load16(h + full, k), _mm512_maskz_loadu_ps(k, m + full)));
    _mm512_mask_storeu_ps(y + full, k, _mm512_add_ps(_mm512_maskz_loadu_ps(k, x + full), hm));
  }
}

template <bool kNe>
ROPELAB_AVX512 void mask_to_bf16_avx512(const float* g, const float* m, uint16_t* dh, int64_t n) {
  const int64_t full = n - n % 16;
  for (int64_t j = 0; j < full; j += 16)
    store16<kNe>(dh + j,
                 _mm512_mul_ps(round_trip16<kNe>(_mm512_loadu_ps(g + j)), _mm512_loadu_ps(m + j)));
  if (full < n) {
    const __mmask16 k = tail_mask(n - full);
    store16<kNe>(dh + full,
                 _mm512_mul_ps(round_trip16<kNe>(_mm512_maskz_loadu_ps(k, g + full)),
                               _mm512_maskz_loadu_ps(k, m + full)),
                 k);
  }
}

// A softmax row's input as float32: bf16 as it is, float32 rounded to bf16 first (the scores
// as a bf16 matmul rounds its product).
template <bool kNe>
ROPELAB_AVX512 inline __m512 in16(const uint16_t* x) {
  return load16(x);
}
template <bool kNe>
ROPELAB_AVX512 inline __m512 in16(const uint16_t* x, __mmask16 k) {
  return load16(x, k);
}
template <bool kNe>
ROPELAB_AVX512 inline __m512 in16(const float* x) {
  return bf16_round16<kNe>(_mm512_loadu_ps(x));
}
template <bool kNe>
ROPELAB_AVX512 inline __m512 in16(const float* x, __mmask16 k) {
  return bf16_round16<kNe>(_mm512_maskz_loadu_ps(k, x));
}

// The row's max and sum (one pass; two of each accumulator, so that the loop is not bound by
// the latency of the adds), of x as in16 reads it; with kStage, each element also stored in tmp
// as float32.
template <bool kNe, class In, bool kStage>
ROPELAB_AVX512 float row_max_sum_avx512(const In* x, int64_t V, float* tmp, float* sum) {
  const int64_t full = V - V % 16;
  __m512 mx = set1(-INFINITY), sx = _mm512_setzero_ps(), mx2 = mx, sx2 = sx;
  int64_t j = 0;
  for (; j + 32 <= full; j += 32) {
    const __m512 v = in16<kNe>(x + j), v2 = in16<kNe>(x + j + 16);
    if constexpr (kStage) {
      _mm512_storeu_ps(tmp + j, v);
      _mm512_storeu_ps(tmp + j + 16, v2);
    }
    mx = _mm512_max_ps(mx, v);
    sx = _mm512_add_ps(sx, v);
    mx2 = _mm512_max_ps(mx2, v2);
    sx2 = _mm512_add_ps(sx2, v2);
  }
  mx = _mm512_max_ps(mx, mx2);
  sx = _mm512_add_ps(sx, sx2);
  for (; j < full; j += 16) {
    const __m512 v = in16<kNe>(x + j);
    if constexpr (kStage) _mm512_storeu_ps(tmp + j, v);
    mx = _mm512_max_ps(mx, v);
    sx = _mm512_add_ps(sx, v);
  }
  if (full < V) {
    const __mmask16 k = tail_mask(V - full);
    const __m512 v = in16<kNe>(x + full, k);  // masked lanes load as 0
    if constexpr (kStage) _mm512_mask_storeu_ps(tmp + full, k, v);
    mx = _mm512_mask_max_ps(mx, k, mx, v);
    sx = _mm512_add_ps(sx, v);
  }
  *sum = _mm512_reduce_add_ps(sx);
  return _mm512_reduce_max_ps(mx);
}

// The first index of m in the bf16 row (0 if none).
ROPELAB_AVX512 int64_t first_index_avx512(const uint16_t* x, int64_t V, float m) {
  const __m512 mv = set1(m);
  for (int64_t i = 0; i < V; i += 16) {
    const __mmask16 k = tail_mask(V - i < 16 ? V - i : 16);
    const auto eq =
        static_cast<unsigned>(_mm512_mask_cmp_ps_mask(k, load16(x + i, k), mv, _CMP_EQ_OQ));
    if (eq != 0) return i + __builtin_ctz(eq);
  }
  return 0;
}

ROPELAB_AVX512 void logits_row_stats_avx512(const uint16_t* x, int64_t V, float* max,
                                            float* sum_exp, float* sum_x, int64_t* argmax) {
  const float m = row_max_sum_avx512<false, uint16_t, false>(x, V, nullptr, sum_x);
  const int64_t full = V - V % 16;
  const __m512 mv = set1(m);
  __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
  int64_t j = 0;
  for (; j + 32 <= full; j += 32) {
    s0 = _mm512_add_ps(s0, exp16(_mm512_sub_ps(load16(x + j), mv)));
    s1 = _mm512_add_ps(s1, exp16(_mm512_sub_ps(load16(x + j + 16), mv)));
  }
  for (; j < full; j += 16) s0 = _mm512_add_ps(s0, exp16(_mm512_sub_ps(load16(x + j), mv)));
  if (full < V) {
    const __mmask16 k = tail_mask(V - full);
    s1 = _mm512_add_ps(s1, _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(load16(x + full, k), mv))));
  }
  *max = m;
  *sum_exp = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
  *argmax = first_index_avx512(x, V, m);
}

template <bool kNe>
ROPELAB_AVX512 void cross_entropy_row_grad_avx512(const uint16_t* x, int64_t V, float lse, float b,
                                                  float w, uint16_t* g) {
  const __m512 l = set1(lse), bv = set1(b), wv = set1(w);
  const int64_t full = V - V % 16;
  for (int64_t j = 0; j < full; j += 16)
    store16<kNe>(g + j,
                 _mm512_mul_ps(_mm512_sub_ps(exp16(_mm512_sub_ps(load16(x + j), l)), bv), wv));
  if (full < V) {
    const __mmask16 k = tail_mask(V - full);
    const __m512 e = exp16(_mm512_sub_ps(load16(x + full, k), l));
    store16<kNe>(g + full, _mm512_mul_ps(_mm512_sub_ps(e, bv), wv), k);
  }
}

// tmp = x scale + b1 + b2 over S elements; returns their max.
template <bool kNe, class In>
ROPELAB_AVX512 float biased_row_avx512(const In* x, float scale, const float* b1, const float* b2,
                                       int64_t S, float* tmp) {
  const int64_t full = S - S % 16;
  const __m512 sv = set1(scale);
  __m512 mx = set1(-INFINITY);
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 v =
        _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(in16<kNe>(x + j), sv), _mm512_loadu_ps(b1 + j)),
                      _mm512_loadu_ps(b2 + j));
    _mm512_storeu_ps(tmp + j, v);
    mx = _mm512_max_ps(mx, v);
  }
  if (full < S) {
    const __mmask16 k = tail_mask(S - full);
    const __m512 v = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(in16<kNe>(x + full, k), sv),
                                                 _mm512_maskz_loadu_ps(k, b1 + full)),
                                   _mm512_maskz_loadu_ps(k, b2 + full));
    _mm512_mask_storeu_ps(tmp + full, k, v);
    mx = _mm512_mask_max_ps(mx, k, mx, v);
  }
  return _mm512_reduce_max_ps(mx);
}

// tmp = exp(tmp - m) over S elements (the tail's unused lanes stay out); returns their sum.
ROPELAB_AVX512 float exp_row_avx512(float* tmp, int64_t S, float m) {
  const int64_t full = S - S % 16;
  const __m512 mv = set1(m);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(tmp + j), mv));
    _mm512_storeu_ps(tmp + j, e);
    sum = _mm512_add_ps(sum, e);
  }
  if (full < S) {
    const __mmask16 k = tail_mask(S - full);
    const __m512 e =
        _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, tmp + full), mv)));
    _mm512_mask_storeu_ps(tmp + full, k, e);
    sum = _mm512_add_ps(sum, e);
  }
  return _mm512_reduce_add_ps(sum);
}

// The first index of m in the float32 row t (0 if none).
ROPELAB_AVX512 int64_t first_index_f32_avx512(const float* t, int64_t V, float m) {
  const __m512 mv = set1(m);
  for (int64_t i = 0; i < V; i += 16) {
    const __mmask16 k = tail_mask(V - i < 16 ? V - i : 16);
    const auto eq = static_cast<unsigned>(
        _mm512_mask_cmp_ps_mask(k, _mm512_maskz_loadu_ps(k, t + i), mv, _CMP_EQ_OQ));
    if (eq != 0) return i + __builtin_ctz(eq);
  }
  return 0;
}

// The fused row (the target's correction is the caller's): the stats as
// logits_row_stats_avx512 (of x staged in tmp as float32: each element read from x once),
// tmp = exp(tmp - max), g written.
template <bool kNe, class In>
ROPELAB_AVX512 void cross_entropy_row_fused_avx512(const In* x, int64_t V, float b, float w,
                                                   uint16_t* g, float* tmp, float* max,
                                                   float* sum_exp, float* sum_x, int64_t* argmax,
                                                   const void* next, bool cached) {
  *max = row_max_sum_avx512<kNe, In, true>(x, V, tmp, sum_x);
  const int64_t am = first_index_f32_avx512(tmp, V, *max);
  const int64_t full = V - V % 16;
  const __mmask16 k = tail_mask(V - full);
  const __m512 mv = set1(*max);
  __m512 s0 = _mm512_setzero_ps();
  // The next row's cache lines requested while the exps run (one per 64 bytes of it), so that
  // its first pass finds it in cache.
  const char* pf = static_cast<const char*>(next != nullptr ? next : x);
  constexpr int64_t kLine = 64 / static_cast<int64_t>(sizeof(In));  // elements per cache line
  for (int64_t j = 0; j < full; j += 16) {
    if (j % kLine == 0) _mm_prefetch(pf + j * static_cast<int64_t>(sizeof(In)), _MM_HINT_T1);
    const __m512 e = exp16(_mm512_sub_ps(_mm512_loadu_ps(tmp + j), mv));
    _mm512_storeu_ps(tmp + j, e);
    s0 = _mm512_add_ps(s0, e);
  }
  if (k != 0) {
    const __m512 e =
        _mm512_maskz_mov_ps(k, exp16(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, tmp + full), mv)));
    _mm512_mask_storeu_ps(tmp + full, k, e);
    s0 = _mm512_add_ps(s0, e);
  }
  const float se = _mm512_reduce_add_ps(s0);
  const __m512 inv = set1(1.0F / se), bv = set1(b), wv = set1(w);
  if (!cached && (reinterpret_cast<uintptr_t>(g) & 31U) == 0) {
    for (int64_t j = 0; j < full; j += 16)
      stream16<kNe>(g + j, _mm512_mul_ps(_mm512_fmsub_ps(_mm512_loadu_ps(tmp + j), inv, bv), wv));
    _mm_sfence();
  } else {
    for (int64_t j = 0; j < full; j += 16)
      store16<kNe>(g + j, _mm512_mul_ps(_mm512_fmsub_ps(_mm512_loadu_ps(tmp + j), inv, bv), wv));
  }
  if (k != 0)
    store16<kNe>(g + full,
                 _mm512_mul_ps(_mm512_fmsub_ps(_mm512_maskz_loadu_ps(k, tmp + full), inv, bv), wv),
                 k);
  *sum_exp = se;
  *argmax = am;
}

ROPELAB_AVX512 int64_t unmasked_length_avx512(const float* b1, const float* b2, int64_t S) {
  int64_t j = S;
  for (; j >= 16; j -= 16) {
    const auto keep = static_cast<unsigned>(_mm512_cmp_ps_mask(
        _mm512_add_ps(_mm512_loadu_ps(b1 + j - 16), _mm512_loadu_ps(b2 + j - 16)),
        set1(kMaskedBelow), _CMP_GT_OQ));
    if (keep != 0) return j - 16 + 32 - __builtin_clz(keep);
  }
  const int64_t e = unmasked_end(b1, b2, j);
  return e == 0 ? S : e;
}

template <bool kNe, class In>
ROPELAB_AVX512 void softmax_row_avx512(const In* x, const float* b1, const float* b2, uint16_t* p,
                                       int64_t S_all, float* tmp, float* max, float* inv,
                                       float scale) {
  const int64_t S = unmasked_length_avx512(b1, b2, S_all);
  std::memset(p + S, 0, sizeof(uint16_t) * static_cast<size_t>(S_all - S));
  const float m = biased_row_avx512<kNe>(x, scale, b1, b2, S, tmp);
  const float r = 1.0F / exp_row_avx512(tmp, S, m);
  const int64_t full = S - S % 16;
  const __m512 rv = set1(r);
  for (int64_t j = 0; j < full; j += 16)
    store16<kNe>(p + j, _mm512_mul_ps(_mm512_loadu_ps(tmp + j), rv));
  if (full < S) {
    const __mmask16 k = tail_mask(S - full);
    store16<kNe>(p + full, _mm512_mul_ps(_mm512_maskz_loadu_ps(k, tmp + full), rv), k);
  }
  *max = m;
  *inv = r;
}

template <bool kNe>
ROPELAB_AVX512 void softmax_backward_row_avx512(const uint16_t* x, const float* b1, const float* b2,
                                                float max, float inv, const uint16_t* g,
                                                uint16_t* dx, int64_t S_all, float* tmp,
                                                float scale) {
  const int64_t S = unmasked_length_avx512(b1, b2, S_all);
  std::memset(dx + S, 0, sizeof(uint16_t) * static_cast<size_t>(S_all - S));
  biased_row_avx512<kNe>(x, scale, b1, b2, S, tmp);
  exp_row_avx512(tmp, S, max);
  const int64_t full = S - S % 16;
  const __mmask16 k = tail_mask(S - full);
  const __m512 rv = set1(inv);
  __m512 dot = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 p = _mm512_mul_ps(_mm512_loadu_ps(tmp + j), rv);
    _mm512_storeu_ps(tmp + j, p);
    dot = _mm512_fmadd_ps(p, load16(g + j), dot);
  }
  if (k != 0) {
    const __m512 p = _mm512_mul_ps(_mm512_maskz_loadu_ps(k, tmp + full), rv);
    _mm512_mask_storeu_ps(tmp + full, k, p);
    dot = _mm512_fmadd_ps(p, load16(g + full, k), dot);
  }
  const __m512 d = set1(_mm512_reduce_add_ps(dot)), sv = set1(scale);
  for (int64_t j = 0; j < full; j += 16)
    store16<kNe>(dx + j,
                 _mm512_mul_ps(
                     _mm512_mul_ps(_mm512_loadu_ps(tmp + j), _mm512_sub_ps(load16(g + j), d)), sv));
  if (k != 0)
    store16<kNe>(dx + full,
                 _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(k, tmp + full),
                                             _mm512_sub_ps(load16(g + full, k), d)),
                               sv),
                 k);
}

template <bool kNe>
ROPELAB_AVX512 void softmax_backward_from_p_avx512(const uint16_t* p, const float* dp, uint16_t* dx,
                                                   int64_t S, float scale) {
  const int64_t full = S - S % 16;
  const __mmask16 k = tail_mask(S - full);
  __m512 dot = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16)
    dot = _mm512_fmadd_ps(load16(p + j), bf16_round16<kNe>(_mm512_loadu_ps(dp + j)), dot);
  if (k != 0)
    dot = _mm512_fmadd_ps(load16(p + full, k),
                          bf16_round16<kNe>(_mm512_maskz_loadu_ps(k, dp + full)), dot);
  const __m512 d = set1(_mm512_reduce_add_ps(dot)), sv = set1(scale);
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 g = bf16_round16<kNe>(_mm512_loadu_ps(dp + j));
    store16<kNe>(dx + j, _mm512_mul_ps(_mm512_mul_ps(load16(p + j), _mm512_sub_ps(g, d)), sv));
  }
  if (k != 0) {
    const __m512 g = bf16_round16<kNe>(_mm512_maskz_loadu_ps(k, dp + full));
    store16<kNe>(dx + full,
                 _mm512_mul_ps(_mm512_mul_ps(load16(p + full, k), _mm512_sub_ps(g, d)), sv), k);
  }
}

// LayerNorm over one row of D float32 (two passes for the moments, as the row is in cache).
template <bool kNe>
ROPELAB_AVX512 void layer_norm_row_avx512(const float* x, int64_t D, const float* w, const float* b,
                                          float eps, uint16_t* y, float* mean, float* rstd) {
  const int64_t full = D - D % 16;
  const __mmask16 k = tail_mask(D - full);
  __m512 s = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(x + j));
  if (k != 0) s = _mm512_add_ps(s, _mm512_maskz_loadu_ps(k, x + full));
  const float m = _mm512_reduce_add_ps(s) / static_cast<float>(D);
  const __m512 mv = set1(m);
  __m512 v = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 d = _mm512_sub_ps(_mm512_loadu_ps(x + j), mv);
    v = _mm512_fmadd_ps(d, d, v);
  }
  if (k != 0) {
    const __m512 d = _mm512_maskz_sub_ps(k, _mm512_maskz_loadu_ps(k, x + full), mv);
    v = _mm512_fmadd_ps(d, d, v);
  }
  const float r = 1.0F / std::sqrt(_mm512_reduce_add_ps(v) / static_cast<float>(D) + eps);
  const __m512 rv = set1(r);
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv), rv);
    store16<kNe>(y + j, _mm512_fmadd_ps(xh, _mm512_loadu_ps(w + j), _mm512_loadu_ps(b + j)));
  }
  if (k != 0) {
    const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + full), mv), rv);
    store16<kNe>(
        y + full,
        _mm512_fmadd_ps(xh, _mm512_maskz_loadu_ps(k, w + full), _mm512_maskz_loadu_ps(k, b + full)),
        k);
  }
  *mean = m;
  *rstd = r;
}

ROPELAB_AVX512 void layer_norm_backward_row_avx512(const float* x, int64_t D, const float* w,
                                                   float mean, float rstd, const uint16_t* g,
                                                   const float* dres, float* dx, float* dw,
                                                   float* db) {
  const int64_t full = D - D % 16;
  const __mmask16 k = tail_mask(D - full);
  const __m512 mv = set1(mean), rv = set1(rstd);
  // First pass: a = sum g w, c = sum g w xhat; the parameters' dw += g xhat, db += g.
  __m512 a = _mm512_setzero_ps(), c = _mm512_setzero_ps();
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv), rv);
    const __m512 gj = load16(g + j), gw = _mm512_mul_ps(gj, _mm512_loadu_ps(w + j));
    a = _mm512_add_ps(a, gw);
    c = _mm512_fmadd_ps(gw, xh, c);
    _mm512_storeu_ps(dw + j, _mm512_fmadd_ps(gj, xh, _mm512_loadu_ps(dw + j)));
    _mm512_storeu_ps(db + j, _mm512_add_ps(gj, _mm512_loadu_ps(db + j)));
  }
  if (k != 0) {
    const __m512 xh =
        _mm512_maskz_mul_ps(k, _mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + full), mv), rv);
    const __m512 gj = load16(g + full, k),
                 gw = _mm512_mul_ps(gj, _mm512_maskz_loadu_ps(k, w + full));
    a = _mm512_add_ps(a, gw);
    c = _mm512_fmadd_ps(gw, xh, c);
    _mm512_mask_storeu_ps(dw + full, k,
                          _mm512_fmadd_ps(gj, xh, _mm512_maskz_loadu_ps(k, dw + full)));
    _mm512_mask_storeu_ps(db + full, k, _mm512_add_ps(gj, _mm512_maskz_loadu_ps(k, db + full)));
  }
  const float inv_d = 1.0F / static_cast<float>(D);
  const __m512 am = set1(_mm512_reduce_add_ps(a) * inv_d),
               cm = set1(_mm512_reduce_add_ps(c) * inv_d);
  for (int64_t j = 0; j < full; j += 16) {
    const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_loadu_ps(x + j), mv), rv);
    const __m512 gw = _mm512_mul_ps(load16(g + j), _mm512_loadu_ps(w + j));
    const __m512 d = _mm512_mul_ps(rv, _mm512_sub_ps(_mm512_sub_ps(gw, am), _mm512_mul_ps(xh, cm)));
    _mm512_storeu_ps(dx + j, dres != nullptr ? _mm512_add_ps(d, _mm512_loadu_ps(dres + j)) : d);
  }
  if (k != 0) {
    const __m512 xh = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(k, x + full), mv), rv);
    const __m512 gw = _mm512_mul_ps(load16(g + full, k), _mm512_maskz_loadu_ps(k, w + full));
    const __m512 d = _mm512_mul_ps(rv, _mm512_sub_ps(_mm512_sub_ps(gw, am), _mm512_mul_ps(xh, cm)));
    _mm512_mask_storeu_ps(
        dx + full, k,
        dres != nullptr ? _mm512_add_ps(d, _mm512_maskz_loadu_ps(k, dres + full)) : d);
  }
}

// rope_row_bf16: halves (a, b) of h = W / 2: forward y_a = x_a c_a + x_b s_a, y_b = x_b c_b +
// x_a s_b; backward the sines swap halves (y_a = x_a c_a + x_b s_b, y_b = x_b c_b + x_a s_a).
// Pairs: vpermilps swaps each pair of lanes.
template <bool kNe>
ROPELAB_AVX512 void rope_halves_avx512(const uint16_t* x, const float* c, const float* s,
                                       uint16_t* y, int64_t W, bool backward) {
  const int64_t h = W / 2;
  const float* s_a = backward ? s + h : s;
  const float* s_b = backward ? s : s + h;
  for (int64_t i = 0; i < h; i += 16) {
    const __mmask16 k = tail_mask(h - i < 16 ? h - i : 16);
    const __m512 xa = load16(x + i, k), xb = load16(x + h + i, k);
    const __m512 ya = _mm512_fmadd_ps(xa, _mm512_maskz_loadu_ps(k, c + i),
                                      _mm512_mul_ps(xb, _mm512_maskz_loadu_ps(k, s_a + i)));
    const __m512 yb = _mm512_fmadd_ps(xb, _mm512_maskz_loadu_ps(k, c + h + i),
                                      _mm512_mul_ps(xa, _mm512_maskz_loadu_ps(k, s_b + i)));
    store16<kNe>(y + i, ya, k);
    store16<kNe>(y + h + i, yb, k);
  }
}

template <bool kNe>
ROPELAB_AVX512 void rope_pairs_avx512(const uint16_t* x, const float* c, const float* s,
                                      uint16_t* y, int64_t W, bool backward) {
  constexpr int kSwapPairs = 0xB1;  // lanes (1, 0, 3, 2) of each four
  for (int64_t j = 0; j < W; j += 16) {
    const __mmask16 k = tail_mask(W - j < 16 ? W - j : 16);
    const __m512 xv = load16(x + j, k), sv = _mm512_maskz_loadu_ps(k, s + j);
    const __m512 t = backward ? _mm512_permute_ps(_mm512_mul_ps(xv, sv), kSwapPairs)
                              : _mm512_mul_ps(_mm512_permute_ps(xv, kSwapPairs), sv);
    store16<kNe>(y + j, _mm512_fmadd_ps(xv, _mm512_maskz_loadu_ps(k, c + j), t), k);
  }
}

bool detect_avx512_bf16() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
}

bool detect_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
         __builtin_cpu_supports("fma");
}
#else
bool detect_avx512() { return false; }
bool detect_avx512_bf16() { return false; }
#endif

}  // namespace

bool bf16_simd() {
  static const bool yes = detect_avx512();
  return yes;
}

bool bf16_rows_vectorised() {
#if ROPELAB_HAVE_X86
  // The clones' x86-64-v3 also has BMI, F16C and MOVBE, which every AVX2 CPU with FMA has.
  static const bool yes =
      bf16_simd() || (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"));
#else
  static const bool yes = false;
#endif
  return yes;
}

bool bf16_convert_instruction() {
  static const bool yes = bf16_simd() && detect_avx512_bf16();
  return yes;
}

// The AVX-512 form F with the given arguments, its stores by vcvtneps2bf16 where the CPU has it.
#define ROPELAB_AVX512_CALL(F, ...) \
  (bf16_convert_instruction() ? F<true>(__VA_ARGS__) : F<false>(__VA_ARGS__))

namespace portable {

// The portable forms that AVX2 CPUs run in a training step (util::bf16_nodes_pay and
// vec::bf16_rows_vectorised: the dense layers' bias passes, the attention's softmax rows, RoPE's
// rows, LayerNorm, the dropouts and the loss's rows) are also compiled for x86-64-v3, at -O3 so
// that GCC vectorises them (this file is compiled with -fno-trapping-math,
// which exp_approx's loops need, and -ffp-contract=off: CMakeLists.txt). Their sums and maxima
// run over kLanes lanes in a fixed order (no reassociation needed): every clone gives the same
// bits.
#if ROPELAB_HAVE_X86
#define ROPELAB_PORTABLE_CLONES \
  __attribute__((target_clones("arch=x86-64-v3", "default"), optimize("O3")))
#else
#define ROPELAB_PORTABLE_CLONES
#endif
#define ROPELAB_INLINE inline __attribute__((always_inline))

// Element j to lane j % kLanes: one vector of AVX2's float32 registers.
constexpr int64_t kLanes = 8;
ROPELAB_INLINE float lanes_sum(const float* a) {
  return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]));
}
ROPELAB_INLINE float lanes_max(const float* a) {
  float m = a[0];
  for (int64_t l = 1; l < kLanes; ++l) m = a[l] > m ? a[l] : m;
  return m;
}
// f(j, j % kLanes) for j in [0, n): whole groups of kLanes (which GCC turns into vector code),
// then the rest.
template <class F>
ROPELAB_INLINE void for_lanes(int64_t n, const F& f) {
  int64_t j0 = 0;
  for (; j0 + kLanes <= n; j0 += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) f(j0 + l, l);
  for (int64_t l = 0; j0 + l < n; ++l) f(j0 + l, l);
}

ROPELAB_PORTABLE_CLONES void add_bias_bf16(uint16_t* y, const float* b, int64_t rows, int64_t cols,
                                           int64_t ld) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) y[r * ld + j] = store1(load1(y[r * ld + j]) + b[j]);
}

ROPELAB_PORTABLE_CLONES void add_bias_from_float_bf16(const float* acc, const float* b, uint16_t* y,
                                                      int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* a = acc + r * cols;
    uint16_t* out = y + r * cols;
    for (int64_t j = 0; j < cols; ++j) out[j] = store1(load1(store1(a[j])) + b[j]);
  }
}

ROPELAB_PORTABLE_CLONES void add_column_sums_bf16(const uint16_t* g, int64_t rows, int64_t cols,
                                                  int64_t ld, float* acc) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < cols; ++j) acc[j] += load1(g[r * ld + j]);
}

// y = bf16(f(h) m), d = bf16(f'(h) m), each element's f and f' from fd(x, &grad).
template <class F>
ROPELAB_INLINE void act_mask_loop(const uint16_t* h, const float* m, uint16_t* y, uint16_t* d,
                                  int64_t n, const F& fd) {
  for (int64_t j = 0; j < n; ++j) {
    float grad = 0;
    const float a = fd(load1(h[j]), &grad);
    y[j] = store1(a * m[j]);
    d[j] = store1(grad * m[j]);
  }
}

ROPELAB_PORTABLE_CLONES void act_mask_forward_bf16(const uint16_t* h, const float* m, uint16_t* y,
                                                   uint16_t* d, int64_t n, Act act) {
  if (act == Act::kGelu)
    return act_mask_loop(h, m, y, d, n,
                         [](float x, float* grad) { return gelu_and_grad_approx(x, grad); });
  if (act == Act::kGeluTanh)
    return act_mask_loop(h, m, y, d, n, [](float x, float* grad) {
      *grad = gelu_tanh_grad_approx(x);
      return gelu_tanh_approx(x);
    });
  act_mask_loop(h, m, y, d, n, [](float x, float* grad) {
    *grad = x > 0.0F ? 1.0F : 0.0F;
    return x > 0.0F ? x : 0.0F;
  });
}

ROPELAB_PORTABLE_CLONES void mul_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out,
                                      int64_t n) {
  for (int64_t j = 0; j < n; ++j) out[j] = store1(load1(a[j]) * load1(b[j]));
}

ROPELAB_PORTABLE_CLONES void dropout_add_bf16(const float* x, const uint16_t* h, const float* m,
                                              float* y, int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] = x[j] + load1(store1(load1(h[j]) * m[j]));
}

ROPELAB_PORTABLE_CLONES void mask_to_bf16(const float* g, const float* m, uint16_t* dh, int64_t n) {
  for (int64_t j = 0; j < n; ++j) dh[j] = store1(load1(store1(g[j])) * m[j]);
}

// A softmax row's input as float32 (in16 above): bf16 as it is, float32 rounded to bf16 first.
inline float in1(uint16_t x) { return load1(x); }
// load1(store1(x)) without the trip through 16 bits: written as that, GCC left the loss row's
// first pass scalar again (3.5 against 1.5 ns an element for the row).
inline float in1(float x) {
  uint32_t u;
  std::memcpy(&u, &x, sizeof u);
  const uint32_t r = (u + 0x7FFFU + ((u >> 16) & 1U)) & 0xFFFF0000U;
  const uint32_t nan = 0U - static_cast<uint32_t>((u & 0x7FFFFFFFU) > 0x7F800000U);
  const uint32_t b = (0x7FC00000U & nan) | (r & ~nan);
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

// A loss row's first pass (In as in1): returns the max, and gives the first index that holds it
// and the sum. Each lane keeps its largest value and where it first came (index < 2^31, the
// lanes' width), x[0] at 0 to start with; the row's max is the lanes' largest, and its first
// index the least of the lanes' that hold it (x[0] NaN: NaN at 0, as a scan with > gives).
template <class In>
ROPELAB_INLINE float row_max_first_sum(const In* x, int64_t V, int64_t* argmax, float* sum_x) {
  float mx[kLanes], sx[kLanes] = {};
  int32_t am[kLanes] = {}, at[kLanes];  // at: each lane's index, in int32 so that GCC vectorises
  for (int64_t l = 0; l < kLanes; ++l) {
    mx[l] = in1(x[0]);
    at[l] = static_cast<int32_t>(l);
  }
  for_lanes(V, [&](int64_t j, int64_t l) {
    const float v = in1(x[j]);
    const int32_t more = -static_cast<int32_t>(v > mx[l]);
    am[l] = (at[l] & more) | (am[l] & ~more);
    mx[l] = more ? v : mx[l];
    sx[l] += v;
    at[l] += static_cast<int32_t>(kLanes);
  });
  const float m = lanes_max(mx);
  int64_t first = V;
  for (int64_t l = 0; l < kLanes; ++l)
    if (mx[l] == m) first = std::min<int64_t>(first, am[l]);
  *argmax = first == V ? 0 : first;
  *sum_x = lanes_sum(sx);
  return m;
}

ROPELAB_PORTABLE_CLONES void logits_row_stats_bf16(const uint16_t* x, int64_t V, float* max,
                                                   float* sum_exp, float* sum_x, int64_t* argmax) {
  float se[kLanes] = {};
  const float m = row_max_first_sum(x, V, argmax, sum_x);
  for_lanes(V, [&](int64_t j, int64_t l) { se[l] += exp_approx(load1(x[j]) - m); });
  *max = m;
  *sum_exp = lanes_sum(se);
}

ROPELAB_PORTABLE_CLONES void cross_entropy_row_grad_bf16(const uint16_t* x, int64_t V, float lse,
                                                         float b, float w, int64_t target,
                                                         float a_w, uint16_t* g) {
  const float at_target =
      target >= 0 ? (exp_approx(load1(x[target]) - lse) - b) * w - a_w : 0.0F;  // (g may be x)
  for (int64_t j = 0; j < V; ++j) g[j] = store1((exp_approx(load1(x[j]) - lse) - b) * w);
  if (target >= 0) g[target] = store1(at_target);
}

// The loss's row in three passes over V elements (In as in1): the max, its first index and the
// sum; tmp_j = exp(x_j - max) and their sum; g_j = bf16((tmp_j / sum_exp - b) w - [j == target]
// a_w). g may be x: it is written only in the last pass. The same bits as logits_row_stats_bf16
// and cross_entropy_row_grad_bf16 on the bf16 row.
template <class In>
ROPELAB_INLINE void cross_entropy_fused_row(const In* x, int64_t V, float b, float w,
                                            int64_t target, float a_w, uint16_t* g, float* tmp,
                                            float* max, float* sum_exp, float* sum_x,
                                            int64_t* argmax) {
  float se[kLanes] = {};
  const float m = row_max_first_sum(x, V, argmax, sum_x);
  // The exps in a loop of their own, then their sums: in one group-of-lanes loop GCC checked
  // tmp against x on every group and kept the sums in memory (1.97 against 1.49 ns an element
  // for the whole row on a Zen 3 core).
  for (int64_t j = 0; j < V; ++j) tmp[j] = exp_approx(in1(x[j]) - m);
  for_lanes(V, [&](int64_t j, int64_t l) { se[l] += tmp[j]; });
  *max = m;
  *sum_exp = lanes_sum(se);
  const float inv = 1.0F / *sum_exp;
  for (int64_t j = 0; j < V; ++j) g[j] = store1((tmp[j] * inv - b) * w);
  if (target >= 0) g[target] = store1((tmp[target] * inv - b) * w - a_w);
}

// Not a template, so that both get clones (softmax_row_of's reason).
ROPELAB_PORTABLE_CLONES void cross_entropy_fused_row_of(const uint16_t* x, int64_t V, float b,
                                                        float w, int64_t target, float a_w,
                                                        uint16_t* g, float* tmp, float* max,
                                                        float* sum_exp, float* sum_x,
                                                        int64_t* argmax) {
  cross_entropy_fused_row(x, V, b, w, target, a_w, g, tmp, max, sum_exp, sum_x, argmax);
}
ROPELAB_PORTABLE_CLONES void cross_entropy_fused_row_of(const float* x, int64_t V, float b, float w,
                                                        int64_t target, float a_w, uint16_t* g,
                                                        float* tmp, float* max, float* sum_exp,
                                                        float* sum_x, int64_t* argmax) {
  cross_entropy_fused_row(x, V, b, w, target, a_w, g, tmp, max, sum_exp, sum_x, argmax);
}

template <class In>
void cross_entropy_row_fused_bf16(const In* x, int64_t V, float b, float w, int64_t target,
                                  float a_w, uint16_t* g, float* tmp, float* max, float* sum_exp,
                                  float* sum_x, int64_t* argmax) {
  cross_entropy_fused_row_of(x, V, b, w, target, a_w, g, tmp, max, sum_exp, sum_x, argmax);
}
template void cross_entropy_row_fused_bf16(const uint16_t*, int64_t, float, float, int64_t, float,
                                           uint16_t*, float*, float*, float*, float*, int64_t*);
template void cross_entropy_row_fused_bf16(const float*, int64_t, float, float, int64_t, float,
                                           uint16_t*, float*, float*, float*, float*, int64_t*);

// tmp = exp(x scale + b1 + b2 - m) over S elements, m = m_in, or their max where m_in is NaN;
// returns the sum, and m in *m_out. The max ignores NaN scores, as std::fmax.
template <class In>
ROPELAB_INLINE float exp_biased_row(const In* x, float scale, const float* b1, const float* b2,
                                    int64_t S, float* tmp, float m_in, float* m_out) {
  float mx[kLanes], sum[kLanes] = {};
  for (float& m : mx) m = -INFINITY;
  for (int64_t j = 0; j < S; ++j) tmp[j] = in1(x[j]) * scale + b1[j] + b2[j];
  for_lanes(S, [&](int64_t j, int64_t l) { mx[l] = tmp[j] > mx[l] ? tmp[j] : mx[l]; });
  const float m = std::isnan(m_in) ? lanes_max(mx) : m_in;
  for_lanes(S, [&](int64_t j, int64_t l) {
    tmp[j] = exp_approx(tmp[j] - m);
    sum[l] += tmp[j];
  });
  *m_out = m;
  return lanes_sum(sum);
}

template <class In>
ROPELAB_INLINE void softmax_row_body(const In* x, const float* b1, const float* b2, uint16_t* p,
                                     int64_t S_all, float* tmp, float* max, float* inv,
                                     float scale) {
  const int64_t S = unmasked_length_scalar(b1, b2, S_all);
  std::memset(p + S, 0, sizeof(uint16_t) * static_cast<size_t>(S_all - S));
  const float r = 1.0F / exp_biased_row(x, scale, b1, b2, S, tmp, NAN, max);
  for (int64_t j = 0; j < S; ++j) p[j] = store1(tmp[j] * r);
  *inv = r;
}
// Its two inputs' clones (target_clones takes no template in Clang).
ROPELAB_PORTABLE_CLONES void softmax_row_of(const uint16_t* x, const float* b1, const float* b2,
                                            uint16_t* p, int64_t S, float* tmp, float* max,
                                            float* inv, float scale) {
  softmax_row_body(x, b1, b2, p, S, tmp, max, inv, scale);
}
ROPELAB_PORTABLE_CLONES void softmax_row_of(const float* x, const float* b1, const float* b2,
                                            uint16_t* p, int64_t S, float* tmp, float* max,
                                            float* inv, float scale) {
  softmax_row_body(x, b1, b2, p, S, tmp, max, inv, scale);
}

template <class In>
void softmax_row_bf16(const In* x, const float* b1, const float* b2, uint16_t* p, int64_t S,
                      float* tmp, float* max, float* inv, float scale) {
  softmax_row_of(x, b1, b2, p, S, tmp, max, inv, scale);
}
template void softmax_row_bf16(const uint16_t*, const float*, const float*, uint16_t*, int64_t,
                               float*, float*, float*, float);
template void softmax_row_bf16(const float*, const float*, const float*, uint16_t*, int64_t, float*,
                               float*, float*, float);

ROPELAB_PORTABLE_CLONES void softmax_backward_row_bf16(const uint16_t* x, const float* b1,
                                                       const float* b2, float max, float inv,
                                                       const uint16_t* g, uint16_t* dx,
                                                       int64_t S_all, float* tmp, float scale) {
  const int64_t S = unmasked_length_scalar(b1, b2, S_all);
  std::memset(dx + S, 0, sizeof(uint16_t) * static_cast<size_t>(S_all - S));
  float m = max, dots[kLanes] = {};
  exp_biased_row(x, scale, b1, b2, S, tmp, max, &m);
  for_lanes(S, [&](int64_t j, int64_t l) {
    tmp[j] *= inv;
    dots[l] += tmp[j] * load1(g[j]);
  });
  const float dot = lanes_sum(dots);
  for (int64_t j = 0; j < S; ++j) dx[j] = store1(tmp[j] * (load1(g[j]) - dot) * scale);
}

ROPELAB_PORTABLE_CLONES void softmax_backward_from_p_bf16(const uint16_t* p, const float* dp,
                                                          uint16_t* dx, int64_t S, float scale) {
  float dots[kLanes] = {};
  for_lanes(S, [&](int64_t j, int64_t l) { dots[l] += load1(p[j]) * load1(store1(dp[j])); });
  const float dot = lanes_sum(dots);
  for (int64_t j = 0; j < S; ++j)
    dx[j] = store1(load1(p[j]) * (load1(store1(dp[j])) - dot) * scale);
}

ROPELAB_PORTABLE_CLONES void layer_norm_row_bf16(const float* x, int64_t D, const float* w,
                                                 const float* b, float eps, uint16_t* y,
                                                 float* mean, float* rstd) {
  float s[kLanes] = {}, v[kLanes] = {};
  for_lanes(D, [&](int64_t j, int64_t l) { s[l] += x[j]; });
  const float m = lanes_sum(s) / static_cast<float>(D);
  for_lanes(D, [&](int64_t j, int64_t l) { v[l] += (x[j] - m) * (x[j] - m); });
  const float r = 1.0F / std::sqrt(lanes_sum(v) / static_cast<float>(D) + eps);
  for (int64_t j = 0; j < D; ++j) y[j] = store1((x[j] - m) * r * w[j] + b[j]);
  *mean = m;
  *rstd = r;
}

// dx, dw and db are distinct from the inputs and from each other (__restrict: GCC vectorises the
// first loop only so), and the residual's gradient is a loop of its own (a load under a select
// is not vectorised).
ROPELAB_PORTABLE_CLONES void layer_norm_backward_row_bf16(const float* x, int64_t D, const float* w,
                                                          float mean, float rstd, const uint16_t* g,
                                                          const float* dres, float* __restrict dx,
                                                          float* __restrict dw,
                                                          float* __restrict db) {
  float a[kLanes] = {}, c[kLanes] = {};
  for_lanes(D, [&](int64_t j, int64_t l) {
    const float xh = (x[j] - mean) * rstd, gj = load1(g[j]), gw = gj * w[j];
    a[l] += gw;
    c[l] += gw * xh;
    dw[j] += gj * xh;
    db[j] += gj;
  });
  const float am = lanes_sum(a) / static_cast<float>(D), cm = lanes_sum(c) / static_cast<float>(D);
  for (int64_t j = 0; j < D; ++j) {
    const float xh = (x[j] - mean) * rstd;
    dx[j] = rstd * (load1(g[j]) * w[j] - am - xh * cm);
  }
  if (dres != nullptr)
    for (int64_t j = 0; j < D; ++j) dx[j] += dres[j];
}

// y[j] = x[j] c[j] + x[o] s[j] (backward: x[o] s[o]) for j in [j0, j1), o = j + shift.
ROPELAB_INLINE void rope_run(const uint16_t* x, const float* c, const float* s, uint16_t* y,
                             int64_t j0, int64_t j1, int64_t shift, bool backward) {
  const float* so = backward ? s + shift : s;
  for (int64_t j = j0; j < j1; ++j)
    y[j] = store1(std::fma(load1(x[j]), c[j], load1(x[j + shift]) * so[j]));
}

// The interleaved form: each adjacent pair (j, j + 1). The direction is a template argument, not
// a select in the loop: with the select GCC left the loop scalar (1.5 ns an element).
template <bool kBackward>
ROPELAB_INLINE void rope_pairs(const uint16_t* x, const float* c, const float* s, uint16_t* y,
                               int64_t W) {
  for (int64_t j = 0; j < W; j += 2) {
    const float x0 = load1(x[j]), x1 = load1(x[j + 1]);
    y[j] = store1(std::fma(x0, c[j], x1 * s[kBackward ? j + 1 : j]));
    y[j + 1] = store1(std::fma(x1, c[j + 1], x0 * s[kBackward ? j : j + 1]));
  }
}

ROPELAB_PORTABLE_CLONES void rope_row_bf16(const uint16_t* x, const float* c, const float* s,
                                           uint16_t* y, int64_t W, bool interleaved,
                                           bool backward) {
  if (!interleaved) {  // each half's partner is the other half
    rope_run(x, c, s, y, 0, W / 2, W / 2, backward);
    rope_run(x, c, s, y, W / 2, W, -W / 2, backward);
    return;
  }
  if (backward)
    rope_pairs<true>(x, c, s, y, W);
  else
    rope_pairs<false>(x, c, s, y, W);
}

}  // namespace portable

void add_bias_bf16(uint16_t* y, const float* b, int64_t rows, int64_t cols, int64_t ld) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return ROPELAB_AVX512_CALL(add_bias_avx512, y, b, rows, cols, ld);
#endif
  portable::add_bias_bf16(y, b, rows, cols, ld);
}

void add_bias_from_float_bf16(const float* acc, const float* b, uint16_t* y, int64_t rows,
                              int64_t cols) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return ROPELAB_AVX512_CALL(add_bias_from_float_avx512, acc, b, y, rows, cols);
#endif
  portable::add_bias_from_float_bf16(acc, b, y, rows, cols);
}

void add_column_sums_bf16(const uint16_t* g, int64_t rows, int64_t cols, int64_t ld, float* acc) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return add_column_sums_avx512(g, rows, cols, ld, acc);
#endif
  portable::add_column_sums_bf16(g, rows, cols, ld, acc);
}

void act_mask_forward_bf16(const uint16_t* h, const float* m, uint16_t* y, uint16_t* d, int64_t n,
                           Act act) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return ROPELAB_AVX512_CALL(act_mask_forward_avx512, h, m, y, d, n, act);
#endif
  portable::act_mask_forward_bf16(h, m, y, d, n, act);
}

void mul_bf16(const uint16_t* a, const uint16_t* b, uint16_t* out, int64_t n) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return ROPELAB_AVX512_CALL(mul_avx512, a, b, out, n);
#endif
  portable::mul_bf16(a, b, out, n);
}

template <class In>
void cross_entropy_row_fused_bf16(const In* x, int64_t V, float b, float w, int64_t target,
                                  float a_w, uint16_t* g, float* tmp, float* max, float* sum_exp,
                                  float* sum_x, int64_t* argmax, const void* next, bool cached) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) {
    ROPELAB_AVX512_CALL(cross_entropy_row_fused_avx512, x, V, b, w, g, tmp, max, sum_exp, sum_x,
                        argmax, next, cached);
    if (target >= 0 && target < V)
      g[target] = store1((tmp[target] * (1.0F / *sum_exp) - b) * w - a_w);
    return;
  }
#endif
  portable::cross_entropy_row_fused_bf16(x, V, b, w, target, a_w, g, tmp, max, sum_exp, sum_x,
                                         argmax);
}
template void cross_entropy_row_fused_bf16(const uint16_t*, int64_t, float, float, int64_t, float,
                                           uint16_t*, float*, float*, float*, float*, int64_t*,
                                           const void*, bool);
template void cross_entropy_row_fused_bf16(const float*, int64_t, float, float, int64_t, float,
                                           uint16_t*, float*, float*, float*, float*, int64_t*,
                                           const void*, bool);

void dropout_add_bf16(const float* x, const uint16_t* h, const float* m, float* y, int64_t n) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return ROPELAB_AVX512_CALL(dropout_add_avx512, x, h, m, y, n);
#endif
  portable::dropout_add_bf16(x, h, m, y, n);
}

void mask_to_bf16(const float* g, const float* m, uint16_t* dh, int64_t n) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return ROPELAB_AVX512_CALL(mask_to_bf16_avx512, g, m, dh, n);
#endif
  portable::mask_to_bf16(g, m, dh, n);
}

void logits_row_stats_bf16(const uint16_t* x, int64_t V, float* max, float* sum_exp, float* sum_x,
                           int64_t* argmax) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return logits_row_stats_avx512(x, V, max, sum_exp, sum_x, argmax);
#endif
  portable::logits_row_stats_bf16(x, V, max, sum_exp, sum_x, argmax);
}

template <class In>
void softmax_row_bf16(const In* x, const float* b1, const float* b2, uint16_t* p, int64_t S,
                      float* tmp, float* max, float* inv, float scale) {
#if ROPELAB_HAVE_X86
  if (bf16_simd())
    return ROPELAB_AVX512_CALL(softmax_row_avx512, x, b1, b2, p, S, tmp, max, inv, scale);
#endif
  portable::softmax_row_bf16(x, b1, b2, p, S, tmp, max, inv, scale);
}
template void softmax_row_bf16(const uint16_t*, const float*, const float*, uint16_t*, int64_t,
                               float*, float*, float*, float);
template void softmax_row_bf16(const float*, const float*, const float*, uint16_t*, int64_t, float*,
                               float*, float*, float);

void softmax_backward_row_bf16(const uint16_t* x, const float* b1, const float* b2, float max,
                               float inv, const uint16_t* g, uint16_t* dx, int64_t S, float* tmp,
                               float scale) {
#if ROPELAB_HAVE_X86
  if (bf16_simd())
    return ROPELAB_AVX512_CALL(softmax_backward_row_avx512, x, b1, b2, max, inv, g, dx, S, tmp,
                               scale);
#endif
  portable::softmax_backward_row_bf16(x, b1, b2, max, inv, g, dx, S, tmp, scale);
}

void softmax_backward_from_p_bf16(const uint16_t* p, const float* dp, uint16_t* dx, int64_t S,
                                  float scale) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return ROPELAB_AVX512_CALL(softmax_backward_from_p_avx512, p, dp, dx, S, scale);
#endif
  portable::softmax_backward_from_p_bf16(p, dp, dx, S, scale);
}

void cross_entropy_row_grad_bf16(const uint16_t* x, int64_t V, float lse, float b, float w,
                                 int64_t target, float a_w, uint16_t* g) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) {
    ROPELAB_AVX512_CALL(cross_entropy_row_grad_avx512, x, V, lse, b, w, g);
    if (target >= 0 && target < V)
      g[target] = store1((exp_approx(load1(x[target]) - lse) - b) * w - a_w);
    return;
  }
#endif
  portable::cross_entropy_row_grad_bf16(x, V, lse, b, w, target, a_w, g);
}

void layer_norm_row_bf16(const float* x, int64_t D, const float* w, const float* b, float eps,
                         uint16_t* y, float* mean, float* rstd) {
#if ROPELAB_HAVE_X86
  if (bf16_simd())
    return ROPELAB_AVX512_CALL(layer_norm_row_avx512, x, D, w, b, eps, y, mean, rstd);
#endif
  portable::layer_norm_row_bf16(x, D, w, b, eps, y, mean, rstd);
}

void layer_norm_backward_row_bf16(const float* x, int64_t D, const float* w, float mean, float rstd,
                                  const uint16_t* g, const float* dres, float* dx, float* dw,
                                  float* db) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) return layer_norm_backward_row_avx512(x, D, w, mean, rstd, g, dres, dx, dw, db);
#endif
  portable::layer_norm_backward_row_bf16(x, D, w, mean, rstd, g, dres, dx, dw, db);
}

namespace {

// dst[r K + k] = float(src[k ld + r]) for k in [k0, k1), one element at a time.
void widen_transposed_scalar(const uint16_t* src, int64_t K, int64_t rows, int64_t ld, float* dst,
                             int64_t k0, int64_t k1) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = k0; k < k1; ++k) dst[r * K + k] = load1(src[k * ld + r]);
}

#if ROPELAB_HAVE_X86
// Eight rows of eight bf16 widened, then the 8 x 8 float32 transpose in registers (unpacks
// within 128-bit lanes, then across them), each of its rows stored to dst's row.
__attribute__((target("avx2"))) void widen_transposed_tile(const uint16_t* src, int64_t ld,
                                                           float* dst, int64_t K) {
  __m256 v[8];
  for (int i = 0; i < 8; ++i) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i * ld));
    v[i] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  __m256 t[8], u[8];
  for (int i = 0; i < 8; i += 2) {
    t[i] = _mm256_unpacklo_ps(v[i], v[i + 1]);
    t[i + 1] = _mm256_unpackhi_ps(v[i], v[i + 1]);
  }
  for (int i = 0; i < 8; i += 4)
    for (int j = 0; j < 2; ++j) {
      u[i + 2 * j] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], 0x44);
      u[i + 2 * j + 1] = _mm256_shuffle_ps(t[i + j], t[i + j + 2], 0xEE);
    }
  for (int i = 0; i < 4; ++i) {
    _mm256_storeu_ps(dst + i * K, _mm256_permute2f128_ps(u[i], u[i + 4], 0x20));
    _mm256_storeu_ps(dst + (i + 4) * K, _mm256_permute2f128_ps(u[i], u[i + 4], 0x31));
  }
}

__attribute__((target("avx2"))) void widen_transposed_avx2(const uint16_t* src, int64_t K,
                                                           int64_t rows, int64_t ld, float* dst) {
  const int64_t K8 = K / 8 * 8, rows8 = rows / 8 * 8;
  for (int64_t k0 = 0; k0 < K8; k0 += 8)
    for (int64_t r0 = 0; r0 < rows8; r0 += 8)
      widen_transposed_tile(src + k0 * ld + r0, ld, dst + r0 * K + k0, K);
  widen_transposed_scalar(src + rows8, K, rows - rows8, ld, dst + rows8 * K, 0, K8);
  widen_transposed_scalar(src, K, rows, ld, dst, K8, K);
}
#endif

}  // namespace

void bf16_to_float_transposed(const uint16_t* src, int64_t K, int64_t rows, int64_t ld,
                              float* dst) {
#if ROPELAB_HAVE_X86
  static const bool avx2 = __builtin_cpu_supports("avx2");
  if (avx2) return widen_transposed_avx2(src, K, rows, ld, dst);
#endif
  constexpr int64_t kStep = 16;  // each row of dst written a cache line at a time
  for (int64_t k0 = 0; k0 < K; k0 += kStep)
    widen_transposed_scalar(src, K, rows, ld, dst, k0, std::min(K, k0 + kStep));
}

void rope_row_bf16(const uint16_t* x, const float* c, const float* s, uint16_t* y, int64_t W,
                   bool interleaved, bool backward) {
#if ROPELAB_HAVE_X86
  if (bf16_simd()) {
    if (interleaved) return ROPELAB_AVX512_CALL(rope_pairs_avx512, x, c, s, y, W, backward);
    return ROPELAB_AVX512_CALL(rope_halves_avx512, x, c, s, y, W, backward);
  }
#endif
  portable::rope_row_bf16(x, c, s, y, W, interleaved, backward);
}

}  // namespace ropelab::vec
