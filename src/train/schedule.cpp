#include "train/schedule.h"

#include <algorithm>
#include <cmath>

namespace ropelab::train {

double learning_rate(const config::TrainConfig& t, int64_t d_model, int64_t step) {
  const auto& s = t.schedule;
  double peak = t.lr, w = static_cast<double>(s.warmup), n = static_cast<double>(step);
  double total = static_cast<double>(t.max_steps);
  double min_lr = peak * s.min_lr_ratio;
  using config::ScheduleType;
  if (s.type == ScheduleType::kNoam) {
    double ws = std::max(1.0, w);
    return peak * std::pow(static_cast<double>(d_model), -0.5) *
           std::min(std::pow(n, -0.5), n * std::pow(ws, -1.5));
  }
  if (s.type == ScheduleType::kInverseSqrt) {
    if (n < w) return s.init_lr + (peak - s.init_lr) * n / w;
    return peak * std::sqrt(std::max(1.0, w) / n);
  }
  if (n < w) return peak * n / w;
  if (s.type == ScheduleType::kConstant) return peak;
  double progress = total > w ? std::clamp((n - w) / (total - w), 0.0, 1.0) : 1.0;
  if (s.type == ScheduleType::kLinear) return min_lr + (peak - min_lr) * (1.0 - progress);
  return min_lr + (peak - min_lr) * 0.5 * (1.0 + std::cos(M_PI * progress));  // cosine
}

}  // namespace ropelab::train
