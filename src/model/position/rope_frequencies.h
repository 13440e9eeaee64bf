// RoPE's per-pair frequencies, and every context-extension method, in one place: pure functions
// from (base, rotated width d, method, current length L) to theta_i (i = 0..d/2-1) and an
// attention factor that multiplies q and k. Torch-free, so the tests can check them against
// hand-computed values.
//
//   none      theta_i = base^(-2i/d)                                    RoFormer Eq. 15
//   linear    theta_i / s  (position interpolation)     Chen et al. 2023          HF "linear"
//   ntk       base' = base * s^(d/(d-2))                bloc97 2023 (NTK-aware)   -
//   dynamic   base' = base * (s*L/L0 - (s-1))^(d/(d-2)) when L > L0, else RoPE   HF "dynamic"
//             (emozilla 2023): recomputed from the current length L, so keys must be rotated
//             with the same base as the queries (the KV cache keeps them unrotated).
//   yarn      Peng et al. 2023, arXiv:2309.00071, Sec. 3.2-3.4; HF "yarn". With r_i = L0 / lambda_i
//             (turns of pair i over the original length, lambda_i = 2*pi/theta_i) and the ramp
//             gamma(r) = 0 for r < alpha, 1 for r > beta, linear between:
//                 h(theta_i) = (1 - gamma(r_i)) * theta_i / s + gamma(r_i) * theta_i,
//             so fast pairs (many turns) keep their frequency and slow ones are interpolated.
//             alpha = beta_slow = 1, beta = beta_fast = 32; the ramp's ends are rounded to
//             whole pairs (floor / ceil) as in the paper's code. sqrt(1/t) = 0.1 ln(s) + 1
//             multiplies q and k.
//   llama3    Meta 2024 (Llama 3.1), HF "llama3": by wavelength lambda_i = 2*pi/theta_i,
//             lambda > L0/low_freq_factor: theta/s; lambda < L0/high_freq_factor: theta;
//             between: (1-a)*theta/s + a*theta, a = (L0/lambda - low) / (high - low).
//   longrope  Ding et al. 2024, arXiv:2402.13753, HF "longrope": theta_i / f_i with given
//             per-pair factors, short_factor for L <= L0 and long_factor beyond; attention
//             factor sqrt(1 + ln(s)/ln(L0)).
//
// p-RoPE (Barbero et al. 2024, arXiv:2410.06205) is applied on top: only the fraction p of the
// pairs with the highest frequencies rotate; the rest get theta = 0 (an identity rotation).
#pragma once
#include <cstdint>
#include <vector>

#include "config/schema.h"

namespace ropelab::model {

struct RopeFrequencies {
  std::vector<double> theta;      // [d/2] radians per position, pair i
  double attention_factor = 1.0;  // multiplies q and k (so scores by its square)
};

// theta_i = base^(-2i/d), i = 0..d/2-1.
std::vector<double> rope_theta(double base, int64_t d);

// Frequencies for a rotated width d when the longest input has `length` positions. Only the
// length-dependent methods (dynamic, longrope) look at `length`.
RopeFrequencies rope_frequencies(const config::RopeScalingConfig& s, double base, int64_t d,
                                 int64_t length);
// True when rope_frequencies depends on the current length (dynamic, longrope).
bool depends_on_length(const config::RopeScalingConfig& s);
// YaRN's ramp ends: the pair indices where pair i turns `turns` times over original_len.
double yarn_correction_dim(double turns, int64_t d, double base, int64_t original_len);

// p-RoPE: zero the frequencies of all but the round(p * d/2) fastest pairs.
void keep_fastest(std::vector<double>& theta, double fraction);

}  // namespace ropelab::model
