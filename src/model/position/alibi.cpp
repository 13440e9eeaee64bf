#include "model/position/alibi.h"

#include "config/schema.h"

namespace ropelab::model {

torch::Tensor AlibiImpl::slopes(int64_t n) {
  auto pow2 = [](int64_t k) {
    std::vector<double> s;
    double start = std::pow(2.0, -8.0 / static_cast<double>(k));
    for (int64_t i = 0; i < k; ++i) s.push_back(std::pow(start, static_cast<double>(i + 1)));
    return s;
  };
  int64_t closest = 1;
  while (closest * 2 <= n) closest *= 2;
  std::vector<double> s = pow2(closest);
  if (closest < n) {
    auto extra = pow2(2 * closest);
    for (int64_t i = 0; static_cast<int64_t>(s.size()) < n; i += 2) s.push_back(extra[i]);
  }
  return torch::tensor(s, torch::kFloat32);
}

AlibiImpl::AlibiImpl(const config::AlibiConfig&, const PositionDims& d) : PositionModuleImpl(d) {
  slopes_ = register_buffer("slopes", slopes(d.n_heads));
}

PosCache AlibiImpl::make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                                torch::Device device) {
  PosCache c = PositionModuleImpl::make_tables(T, S, q_offset, k_offset, device);
  c.bias = relative_bias(T, S, q_offset, k_offset, device, [&](const torch::Tensor& d_R) {
    return -(slopes_.view({-1, 1}) * d_R.abs().to(torch::kFloat32).view({1, -1}));
  });
  return c;
}

PositionModule make_position(const config::AlibiConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<AlibiImpl>(c, d)));
}

}  // namespace ropelab::model
