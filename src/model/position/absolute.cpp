#include "model/position/absolute.h"

#include "config/schema.h"
#include "util/error.h"

namespace ropelab::model {

SinusoidalImpl::SinusoidalImpl(const config::SinusoidalConfig& c, const PositionDims& d)
    : PositionModuleImpl(d), base_(c.base) {}

torch::Tensor SinusoidalImpl::table(int64_t offset, int64_t n, int64_t d, double base) {
  auto opts = torch::TensorOptions().dtype(torch::kFloat32);
  auto pos = torch::arange(offset, offset + n, opts).unsqueeze(1);                // [n, 1]
  auto i2 = torch::arange(0, d, 2, opts);                                         // 2i
  auto angle = pos * torch::pow(base, -i2 / static_cast<double>(d));              // [n, ceil(d/2)]
  auto pe = torch::stack({torch::sin(angle), torch::cos(angle)}, -1).flatten(1);  // interleave
  return pe.narrow(1, 0, d);
}

torch::Tensor SinusoidalImpl::add_to_input(const torch::Tensor& x_BTD, int64_t offset) {
  auto pe = table(offset, x_BTD.size(1), x_BTD.size(2), base_).to(x_BTD.device());
  return x_BTD + pe.to(x_BTD.scalar_type());
}

torch::Tensor SinusoidalImpl::add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) {
  // Positions are below T (they restart inside the window): the table of [0, T) covers them.
  const int64_t T = x_BTD.size(1), D = x_BTD.size(2);
  auto pe = table(0, T, D, base_).to(x_BTD.device()).index_select(0, pos_BT.reshape({-1}));
  return x_BTD + pe.view(x_BTD.sizes()).to(x_BTD.scalar_type());
}

LearnedImpl::LearnedImpl(const config::LearnedConfig& c, const PositionDims& d)
    : PositionModuleImpl(d) {
  weight_ = register_parameter("weight", torch::randn({c.max_len, d.d_model}) * 0.02);
}

torch::Tensor LearnedImpl::add_to_input(const torch::Tensor& x_BTD, int64_t offset) {
  int64_t end = offset + x_BTD.size(1);
  if (end > weight_.size(0))
    throw UserError("learned positions: input reaches position " + std::to_string(end - 1) +
                    " but the table has only " + std::to_string(weight_.size(0)) +
                    " rows (model.position.max_len)");
  return x_BTD + weight_.narrow(0, offset, x_BTD.size(1)).to(x_BTD.scalar_type());
}

torch::Tensor LearnedImpl::add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) {
  if (x_BTD.size(1) > weight_.size(0))
    throw UserError("learned positions: input reaches position " +
                    std::to_string(x_BTD.size(1) - 1) + " but the table has only " +
                    std::to_string(weight_.size(0)) + " rows (model.position.max_len)");
  auto pe = weight_.index_select(0, pos_BT.reshape({-1})).view(x_BTD.sizes());
  return x_BTD + pe.to(x_BTD.scalar_type());
}

PositionModule make_position(const config::NoPositionConfig&, const PositionDims& d) {
  return PositionModule(
      std::shared_ptr<PositionModuleImpl>(std::make_shared<PositionModuleImpl>(d)));
}
PositionModule make_position(const config::SinusoidalConfig& c, const PositionDims& d) {
  return PositionModule(
      std::shared_ptr<PositionModuleImpl>(std::make_shared<SinusoidalImpl>(c, d)));
}
PositionModule make_position(const config::LearnedConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<LearnedImpl>(c, d)));
}

}  // namespace ropelab::model
