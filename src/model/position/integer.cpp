#include "model/position/integer.h"

#include "config/positions/integer.h"

namespace ropelab::model {

IntegerImpl::IntegerImpl(const config::IntegerConfig& c, const PositionDims& d)
    : PositionModuleImpl(d), gain_(c.gain) {}

torch::Tensor IntegerImpl::add_to_input(const torch::Tensor& x_BTD, int64_t offset) {
  const int64_t T = x_BTD.size(1);
  auto pos = torch::arange(offset, offset + T, x_BTD.options().dtype(torch::kFloat32));
  return x_BTD + (pos * gain_).view({1, T, 1}).to(x_BTD.scalar_type());
}

torch::Tensor IntegerImpl::add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) {
  auto pe = pos_BT.to(x_BTD.device(), torch::kFloat32).unsqueeze(-1) * gain_;
  return x_BTD + pe.to(x_BTD.scalar_type());
}

PositionModule make_position(const config::IntegerConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<IntegerImpl>(c, d)));
}

}  // namespace ropelab::model
