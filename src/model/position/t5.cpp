#include "model/position/t5.h"

#include "config/schema.h"

namespace ropelab::model {

torch::Tensor t5_bucket(const torch::Tensor& rp, bool bidirectional, int64_t num_buckets,
                        int64_t max_distance) {
  auto ret = torch::zeros_like(rp);
  auto n = rp;
  if (bidirectional) {
    num_buckets /= 2;
    ret = ret + (n > 0).to(torch::kInt64) * num_buckets;  // keys after the query
    n = n.abs();
  } else {
    n = -torch::clamp_max(n, 0);  // only keys at or before the query carry distance
  }
  int64_t max_exact = num_buckets / 2;
  auto is_small = n < max_exact;
  auto nf = n.to(torch::kFloat32).clamp_min(1.0);
  auto large =
      max_exact + (torch::log(nf / static_cast<double>(max_exact)) /
                   std::log(static_cast<double>(max_distance) / static_cast<double>(max_exact)) *
                   static_cast<double>(num_buckets - max_exact))
                      .to(torch::kInt64);
  large = torch::clamp_max(large, num_buckets - 1);
  return ret + torch::where(is_small, n, large);
}

T5BiasImpl::T5BiasImpl(const config::T5Config& c, const PositionDims& d)
    : PositionModuleImpl(d), num_buckets_(c.num_buckets), max_distance_(c.max_distance) {
  table_ = register_parameter("table", torch::randn({c.num_buckets, d.n_heads}) * 0.02);
}

PosCache T5BiasImpl::make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                                 torch::Device device) {
  PosCache c = PositionModuleImpl::make_tables(T, S, q_offset, k_offset, device);
  // One bucket per distance: table[bucket(s - t)] -> [R, N] -> [N, R].
  c.bias = relative_bias(T, S, q_offset, k_offset, device, [&](const torch::Tensor& d_R) {
    auto bucket_R = t5_bucket(-d_R, !dims_.causal, num_buckets_, max_distance_);
    return torch::embedding(table_, bucket_R).t();
  });
  return c;
}

PositionModule make_position(const config::T5Config& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<T5BiasImpl>(c, d)));
}

}  // namespace ropelab::model
