#include "model/position/fire.h"

#include <torch/nn/functional.h>

#include "config/schema.h"
#include "model/linear.h"

namespace ropelab::model {

FireImpl::FireImpl(const config::FireConfig& c, const PositionDims& d)
    : PositionModuleImpl(d), threshold_(c.threshold) {
  fc1 = register_module("fc1", torch::nn::Linear(1, c.mlp_width));
  fc2 = register_module("fc2", torch::nn::Linear(c.mlp_width, d.n_heads));
  c_ = register_parameter("c", torch::tensor(c.init_c, torch::kFloat32));
  threshold_scale_ = register_parameter("threshold_scale", torch::tensor(1.0F));
}

ParamRole FireImpl::role_of(const std::string&) const { return ParamRole::kOwnInit; }

torch::Tensor FireImpl::bias(const torch::Tensor& q_pos_T, const torch::Tensor& k_pos_S) {
  constexpr double kEps = 1e-6;
  auto psi = [&](const torch::Tensor& x) { return torch::log1p(torch::abs(c_ * x)); };
  auto threshold = torch::abs(threshold_scale_ * threshold_);
  auto norm_T1 = (psi(torch::maximum(q_pos_T, threshold)) + kEps).unsqueeze(1);
  auto mlp = [&](const torch::Tensor& rows_T) {
    auto rel_TS = psi(q_pos_T.index({rows_T}).unsqueeze(1) - k_pos_S.unsqueeze(0));
    auto x = (rel_TS / norm_T1.index({rows_T})).unsqueeze(-1);      // [t, S, 1]
    return model::linear(fc2, torch::relu(model::linear(fc1, x)));  // [t, S, N]
  };
  int64_t T = q_pos_T.size(0);
  // The MLP's hidden layer is [T, S, mlp_width]; without autograd, query rows go in chunks so
  // long evaluations stay within memory.
  constexpr int64_t kRows = 256;
  torch::Tensor out_TSN;
  auto all = torch::arange(T, torch::TensorOptions().dtype(torch::kInt64).device(q_pos_T.device()));
  if (torch::GradMode::is_enabled() || T <= kRows) {
    out_TSN = mlp(all);
  } else {
    std::vector<torch::Tensor> parts;
    for (int64_t s = 0; s < T; s += kRows)
      parts.push_back(mlp(all.narrow(0, s, std::min(kRows, T - s))));
    out_TSN = torch::cat(parts, 0);
  }
  return out_TSN.permute({2, 0, 1}).unsqueeze(0);
}

PosCache FireImpl::make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                               torch::Device device) {
  PosCache c = PositionModuleImpl::make_tables(T, S, q_offset, k_offset, device);
  // A function of t - s and t: the tiled kernel computes each tile's bias from the positions.
  c.bias.T = T;
  c.bias.S = S;
  c.bias.fn = [this, q_pos_T = c.q_pos_T, k_pos_S = c.k_pos_S](int64_t q0, int64_t q1, int64_t k0,
                                                               int64_t k1) {
    return bias(q_pos_T.narrow(0, q0, q1 - q0), k_pos_S.narrow(0, k0, k1 - k0));
  };
  c.bias.params = parameters();
  return c;
}

PositionModule make_position(const config::FireConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<FireImpl>(c, d)));
}

}  // namespace ropelab::model
