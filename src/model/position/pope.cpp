#include "model/position/pope.h"

#include <torch/nn/functional.h>

#include "config/schema.h"

namespace ropelab::model {

PopeImpl::PopeImpl(const config::PopeConfig& c, const PositionDims& d) : PositionModuleImpl(d) {
  auto c_H = torch::arange(d.head_dim, torch::kFloat64) / static_cast<double>(d.head_dim);
  theta_H_ = register_buffer("theta", torch::pow(c.base, -c_H).to(torch::kFloat32));
  phase_NH_ = register_parameter("phase", torch::zeros({d.n_heads, d.head_dim}));
}

ParamRole PopeImpl::role_of(const std::string&) const { return ParamRole::kOwnInit; }

torch::Tensor PopeImpl::polar(const torch::Tensor& x, const torch::Tensor& pos_T, bool key) {
  auto angle = pos_T.unsqueeze(1) * theta_H_.unsqueeze(0);              // [T, H]
  if (key) angle = angle + phase_NH_.clamp(-2 * M_PI, 0).unsqueeze(1);  // [N, T, H]
  auto mag = torch::nn::functional::softplus(x.to(torch::kFloat32));
  auto out = torch::stack({mag * angle.cos(), mag * angle.sin()}, -1);  // [B, N, T, H, 2]
  return out.flatten(-2).to(x.scalar_type());
}

torch::Tensor PopeImpl::rotate_q(const torch::Tensor& x, const PosCache& c) {
  return polar(x, c.q_pos_T, false);
}

torch::Tensor PopeImpl::rotate_k(const torch::Tensor& x, const PosCache& c) {
  return polar(x, c.k_pos_S, true);
}

PositionModule make_position(const config::PopeConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<PopeImpl>(c, d)));
}

}  // namespace ropelab::model
