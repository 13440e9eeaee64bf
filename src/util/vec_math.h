// Float math written so that GCC vectorises the loops that call it (no libm calls, no
// branches): exp (Cephes' expf), erf (Abramowitz & Stegun 7.1.26), the exact GELU
// (Hendrycks & Gimpel 2016: x Phi(x)) and its tanh form (their Eq. for the fast approximation,
// GPT-2's gelu_new), each with its derivative. The fused CPU kernels (attention
// softmax, cross-entropy, FFN activation) call them from functions compiled with
// target_clones for AVX-512 and AVX2: libtorch 1.13's own CPU softmax and GELU ran at 7-10 ns
// per element on this machine, scalar speed.
//
// Accuracy: exp_approx within 2 ulp of std::exp on [-87, 88] (exactly 0 below -87, where a
// masked score of -1e30 lands); erf_approx within 1.5e-7 absolute.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>

namespace ropelab::vec {

// The clamps are comparisons, not fmin/fmax: GCC vectorises those without -ffast-math (with
// -fno-trapping-math, util/vec_bf16.cpp). As fmax did, a NaN clamps to -87 (never converted to
// an integer below).
inline float exp_approx(float x) {
  float xc = x > -87.0F ? x : -87.0F;
  xc = xc < 88.0F ? xc : 88.0F;
  const float n = std::floor(xc * 1.44269504088896341F + 0.5F);
  float r = xc - n * 0.693359375F;
  r = r + n * 2.12194440e-4F;
  float p = 1.9875691500e-4F;
  p = p * r + 1.3981999507e-3F;
  p = p * r + 8.3334519073e-3F;
  p = p * r + 4.1665795894e-2F;
  p = p * r + 1.6666665459e-1F;
  p = p * r + 5.0000001201e-1F;
  p = p * r * r + r + 1.0F;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return x < -87.0F ? 0.0F : p * scale;
}

// erf(z), and in *e exp(-z^2), on which it rests.
inline float erf_with_exp(float z, float* e) {
  const float az = std::fabs(z);
  const float t = 1.0F / (1.0F + 0.3275911F * az);
  float y = 1.061405429F;
  y = y * t - 1.453152027F;
  y = y * t + 1.421413741F;
  y = y * t - 0.284496736F;
  y = y * t + 0.254829592F;
  *e = exp_approx(-az * az);
  return std::copysign(1.0F - y * t * *e, z);
}

inline float erf_approx(float x) {
  float e = 0;
  return erf_with_exp(x, &e);
}

// GELU(x) = x Phi(x) = x (1 + erf(x / sqrt 2)) / 2.
inline float gelu_approx(float x) {
  return 0.5F * x * (1.0F + erf_approx(x * 0.70710678118654752F));
}

// GELU'(x) = Phi(x) + x phi(x).
inline float gelu_grad_approx(float x) {
  const float cdf = 0.5F * (1.0F + erf_approx(x * 0.70710678118654752F));
  const float pdf = 0.39894228040143268F * exp_approx(-0.5F * x * x);
  return cdf + x * pdf;
}

// GELU and GELU' together, sharing erf's exp(-x^2 / 2) (as util/vec_bf16.cpp's AVX-512 forms
// do): one exp fewer. GELU's bits are gelu_approx's; GELU' may differ from gelu_grad_approx's in
// the last bit or two (its exp's argument is x / sqrt 2 squared, not x^2 / 2).
inline float gelu_and_grad_approx(float x, float* grad) {
  float e = 0;
  const float erf = erf_with_exp(x * 0.70710678118654752F, &e);
  *grad = 0.5F * (1.0F + erf) + x * (0.39894228040143268F * e);
  return 0.5F * x * (1.0F + erf);
}

// GELU's tanh form: x (1 + tanh(u)) / 2 = x sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3).
// sigmoid through a = exp(-|2u|) <= 1, never exp of a large positive argument (exp_approx does
// not saturate there: x < -11 overflowed its exponent bits and gave inf gradients).
inline float gelu_tanh_approx(float x) {
  const float u2 = 1.5957691216057308F * (x + 0.044715F * x * x * x);
  const float a = exp_approx(-std::fabs(u2));
  const float s = u2 >= 0.0F ? 1.0F / (1.0F + a) : a / (1.0F + a);
  return x * s;
}

// Its derivative: s + x s (1 - s) 2u', s = sigmoid(2u), 2u' = 2 sqrt(2/pi) (1 + 3 0.044715 x^2);
// s (1 - s) as a / (1 + a)^2, a = exp(-|2u|), which neither cancels where s rounds towards 1 nor
// overflows where it rounds towards 0.
inline float gelu_tanh_grad_approx(float x) {
  const float u2 = 1.5957691216057308F * (x + 0.044715F * x * x * x);
  const float a = exp_approx(-std::fabs(u2));
  const float r = 1.0F / (1.0F + a);
  const float s = u2 >= 0.0F ? r : a * r;
  return s + x * (a * r * r) * 1.5957691216057308F * (1.0F + 0.134145F * x * x);
}

}  // namespace ropelab::vec
