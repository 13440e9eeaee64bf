#include "model/position/kerple.h"

#include "config/schema.h"

namespace ropelab::model {

namespace {
constexpr double kMin = 0.01;
}

KerpleImpl::KerpleImpl(const config::KerpleConfig& c, const PositionDims& d)
    : PositionModuleImpl(d), log_(c.kernel == config::KerpleKernel::kLog) {
  r1_ = register_parameter("r1", torch::rand({d.n_heads}) * (log_ ? 2.0 : 1.0));
  r2_ = register_parameter("r2", torch::rand({d.n_heads}) * (log_ ? 1.0 : 2.0));
}

ParamRole KerpleImpl::role_of(const std::string&) const { return ParamRole::kOwnInit; }

PosCache KerpleImpl::make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                                 torch::Device device) {
  PosCache c = PositionModuleImpl::make_tables(T, S, q_offset, k_offset, device);
  c.bias = relative_bias(T, S, q_offset, k_offset, device, [&](const torch::Tensor& d_R) {
    auto dist_1R = d_R.abs().to(torch::kFloat32).view({1, -1});
    auto r1 = r1_.clamp_min(kMin).view({-1, 1});
    auto r2 = (log_ ? r2_.clamp_min(kMin) : r2_.clamp(kMin, 2.0)).view({-1, 1});
    return log_ ? -r1 * torch::log1p(r2 * dist_1R) : -r1 * torch::pow(dist_1R, r2);
  });
  return c;
}

PositionModule make_position(const config::KerpleConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<KerpleImpl>(c, d)));
}

}  // namespace ropelab::model
