#include "model/position/rope_frequencies.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace ropelab::model {

namespace {

constexpr double kPi = 3.14159265358979323846;

double ntk_exponent(int64_t d) {
  return d > 2 ? static_cast<double>(d) / static_cast<double>(d - 2) : 1.0;
}

RopeFrequencies plain(std::vector<double> theta) { return {std::move(theta), 1.0}; }

RopeFrequencies frequencies(const config::NoScaling&, double base, int64_t d, int64_t) {
  return plain(rope_theta(base, d));
}

RopeFrequencies frequencies(const config::LinearScaling& s, double base, int64_t d, int64_t) {
  auto theta = rope_theta(base, d);
  for (auto& t : theta) t /= s.factor;
  return plain(std::move(theta));
}

RopeFrequencies frequencies(const config::NtkScaling& s, double base, int64_t d, int64_t) {
  return plain(rope_theta(base * std::pow(s.factor, ntk_exponent(d)), d));
}

RopeFrequencies frequencies(const config::DynamicNtkScaling& s, double base, int64_t d,
                            int64_t length) {
  if (length <= s.original_len) return plain(rope_theta(base, d));
  double ratio = s.factor * static_cast<double>(length) / static_cast<double>(s.original_len) -
                 (s.factor - 1.0);
  return plain(rope_theta(base * std::pow(ratio, ntk_exponent(d)), d));
}

RopeFrequencies frequencies(const config::YarnScaling& s, double base, int64_t d, int64_t) {
  auto theta = rope_theta(base, d);
  // Pairs below `low` turn more than beta_fast times over the original length: extrapolated
  // (kept); pairs above `high` turn fewer than beta_slow times: interpolated (theta / s).
  double low = std::max(0.0, std::floor(yarn_correction_dim(s.beta_fast, d, base, s.original_len)));
  double high = std::min(static_cast<double>(d - 1),
                         std::ceil(yarn_correction_dim(s.beta_slow, d, base, s.original_len)));
  if (high == low) high += 0.001;
  for (size_t i = 0; i < theta.size(); ++i) {
    double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    double gamma = 1.0 - ramp;  // 1: extrapolate, 0: interpolate
    theta[i] = (1.0 - gamma) * theta[i] / s.factor + gamma * theta[i];
  }
  double af = s.attention_factor > 0 ? s.attention_factor : 0.1 * std::log(s.factor) + 1.0;
  return {std::move(theta), af};
}

RopeFrequencies frequencies(const config::Llama3Scaling& s, double base, int64_t d, int64_t) {
  auto theta = rope_theta(base, d);
  double L0 = static_cast<double>(s.original_len);
  double low_wavelen = L0 / s.low_freq_factor, high_wavelen = L0 / s.high_freq_factor;
  for (auto& t : theta) {
    double wavelen = 2.0 * kPi / t;
    if (wavelen > low_wavelen) {
      t /= s.factor;
    } else if (wavelen >= high_wavelen) {
      double a = (L0 / wavelen - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
      t = (1.0 - a) * t / s.factor + a * t;
    }
  }
  return plain(std::move(theta));
}

RopeFrequencies frequencies(const config::LongRopeScaling& s, double base, int64_t d,
                            int64_t length) {
  auto theta = rope_theta(base, d);
  const auto& f = length > s.original_len ? s.long_factor : s.short_factor;
  if (f.size() != theta.size())
    throw std::invalid_argument("longrope: " + std::to_string(f.size()) + " factors for " +
                                std::to_string(theta.size()) + " rotated pairs");
  for (size_t i = 0; i < theta.size(); ++i) theta[i] /= f[i];
  double af = s.attention_factor;
  if (af <= 0)
    af = s.factor <= 1.0
             ? 1.0
             : std::sqrt(1.0 + std::log(s.factor) / std::log(static_cast<double>(s.original_len)));
  return {std::move(theta), af};
}

}  // namespace

std::vector<double> rope_theta(double base, int64_t d) {
  std::vector<double> theta(static_cast<size_t>(d / 2));
  for (size_t i = 0; i < theta.size(); ++i)
    theta[i] = std::pow(base, -2.0 * static_cast<double>(i) / static_cast<double>(d));
  return theta;
}

double yarn_correction_dim(double turns, int64_t d, double base, int64_t original_len) {
  return static_cast<double>(d) *
         std::log(static_cast<double>(original_len) / (turns * 2.0 * kPi)) / (2.0 * std::log(base));
}

RopeFrequencies rope_frequencies(const config::RopeScalingConfig& s, double base, int64_t d,
                                 int64_t length) {
  return std::visit([&](const auto& m) { return frequencies(m, base, d, length); }, s.opts);
}

bool depends_on_length(const config::RopeScalingConfig& s) {
  return std::holds_alternative<config::DynamicNtkScaling>(s.opts) ||
         std::holds_alternative<config::LongRopeScaling>(s.opts);
}

void keep_fastest(std::vector<double>& theta, double fraction) {
  auto keep = static_cast<size_t>(std::llround(fraction * static_cast<double>(theta.size())));
  for (size_t i = keep; i < theta.size(); ++i) theta[i] = 0.0;
}

}  // namespace ropelab::model
