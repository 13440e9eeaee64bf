#include "model/norm.h"

#include <torch/torch.h>

namespace ropelab::model {

NormImpl::NormImpl(int64_t d, double eps, config::NormType type) : d_(d), eps_(eps), type_(type) {
  weight = register_parameter("weight", torch::ones({d}));
  if (type == config::NormType::kLayerNorm) bias = register_parameter("bias", torch::zeros({d}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x_in) {
  if (type_ == config::NormType::kLayerNorm)
    return torch::layer_norm(x_in.to(weight.scalar_type()), {d_}, weight, bias, eps_);
  auto x = x_in.to(torch::kFloat32);
  auto y = x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  return weight * y.to(weight.scalar_type());
}

ParamRole NormImpl::role_of(const std::string& local) const {
  return local == "weight" ? ParamRole::kNormGain : ParamRole::kNormShift;
}

}  // namespace ropelab::model
