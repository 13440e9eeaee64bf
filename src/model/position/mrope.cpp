#include "model/position/mrope.h"

#include <cmath>

#include "config/schema.h"
#include "model/position/rotary.h"

namespace ropelab::model {

MropeImpl::MropeImpl(const config::MropeConfig& c, const PositionDims& d)
    : PositionModuleImpl(d),
      base_(c.base),
      grid_width_(c.grid_width),
      interleaved_sections_(c.sections == config::MropeSections::kInterleaved) {}

torch::Tensor MropeImpl::angles(const torch::Tensor& pos_T, int64_t width) const {
  const int64_t R = width / 2;
  auto opts = torch::TensorOptions().dtype(torch::kFloat64).device(pos_T.device());
  auto i = torch::arange(R, opts);
  auto theta_R = torch::pow(base_, -2.0 * i / static_cast<double>(width)).to(torch::kFloat32);
  auto row_T = pos_T, col_T = pos_T;
  if (grid_width_ > 0) {
    row_T = torch::floor(pos_T / static_cast<double>(grid_width_));
    col_T = pos_T - row_T * static_cast<double>(grid_width_);
  }
  auto is_col_R = interleaved_sections_ ? torch::remainder(i, 2) == 1 : i >= R / 2;
  auto coord_TR = torch::where(is_col_R.unsqueeze(0), col_T.unsqueeze(1), row_T.unsqueeze(1));
  return coord_TR * theta_R.unsqueeze(0);
}

torch::Tensor MropeImpl::rotate(const torch::Tensor& x, const torch::Tensor& pos_T) const {
  auto a = angles(pos_T, x.size(-1));
  return RotaryImpl::rotate(x, torch::cos(a), torch::sin(a), /*interleaved=*/true);
}

torch::Tensor MropeImpl::rotate_q(const torch::Tensor& x, const PosCache& c) {
  return rotate(x, c.q_pos_T);
}

torch::Tensor MropeImpl::rotate_k(const torch::Tensor& x, const PosCache& c) {
  return rotate(x, c.k_pos_S);
}

PositionModule make_position(const config::MropeConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<MropeImpl>(c, d)));
}

}  // namespace ropelab::model
