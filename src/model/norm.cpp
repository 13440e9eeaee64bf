#include "model/norm.h"

#include <torch/torch.h>

namespace ropelab::model {

NormImpl::NormImpl(int64_t d, double eps, config::NormType type) : d_(d), eps_(eps), type_(type) {
  weight = register_parameter(
      "weight", type == config::NormType::kRmsNormOffset ? torch::zeros({d}) : torch::ones({d}));
  if (type == config::NormType::kLayerNorm) bias = register_parameter("bias", torch::zeros({d}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x_in) {
  if (type_ == config::NormType::kLayerNorm)
    return torch::layer_norm(x_in.to(weight.scalar_type()), {d_}, weight, bias, eps_);
  auto x = x_in.to(torch::kFloat32);
  auto y = x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  if (type_ == config::NormType::kRmsNormOffset) return (weight + 1.0) * y.to(weight.scalar_type());
  return weight * y.to(weight.scalar_type());
}

ParamRole NormImpl::role_of(const std::string& local) const {
  // An offset gain starts at 0 as a shift does (init_weights zeroes kNormShift).
  if (type_ == config::NormType::kRmsNormOffset) return ParamRole::kNormShift;
  return local == "weight" ? ParamRole::kNormGain : ParamRole::kNormShift;
}

}  // namespace ropelab::model
