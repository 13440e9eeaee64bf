#include "model/position/rotary.h"

#include "config/schema.h"

namespace ropelab::model {

RotaryImpl::RotaryImpl(const config::RopeConfig& c, const PositionDims& d)
    : PositionModuleImpl(d),
      base_(c.base),
      interleaved_(c.pairing == config::RopePairing::kInterleaved),
      rotary_dim_(c.rotary_dim) {
  int64_t rd = rotary_dim_ == 0 ? d.head_dim : rotary_dim_;
  if (c.scaling == config::RopeScaling::kLinear) pos_scale_ = 1.0 / c.scale;
  if (c.scaling == config::RopeScaling::kNtk && rd > 2)
    base_ = c.base * std::pow(c.scale, static_cast<double>(rd) / static_cast<double>(rd - 2));
}

RotaryImpl::RotaryImpl(const config::XposConfig& c, const PositionDims& d)
    : PositionModuleImpl(d), base_(c.base), scale_base_(c.scale_base), xpos_(true) {}

const PosCache::Tables& RotaryImpl::tables(const PosCache& c, int64_t width) const {
  auto it = c.rot.find(width);
  if (it != c.rot.end()) return it->second;
  ++table_count_;
  // Partial rotary applies to the head; a linear kernel's feature maps are rotated whole.
  int64_t r = (rotary_dim_ > 0 && width == dims_.head_dim) ? rotary_dim_ : width;
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(c.q_pos_T.device());
  auto i = torch::arange(0, r / 2, opts);
  auto inv_freq_R = torch::pow(base_, -2.0 * i / static_cast<double>(r));  // theta_i
  auto table = [&](const torch::Tensor& pos) {
    auto angle = torch::outer(pos * pos_scale_, inv_freq_R);  // [T, r/2]
    return std::make_pair(torch::cos(angle), torch::sin(angle));
  };
  PosCache::Tables t;
  std::tie(t.cos_q, t.sin_q) = table(c.q_pos_T);
  std::tie(t.cos_k, t.sin_k) = table(c.k_pos_S);
  if (xpos_) {
    // zeta_i = (2i/r + 0.4) / 1.4 ; queries scaled by zeta^(m/gamma), keys by zeta^(-n/gamma).
    auto zeta = (2.0 * i / static_cast<double>(r) + 0.4) / 1.4;
    t.scale_q = torch::pow(zeta.unsqueeze(0), c.q_pos_T.unsqueeze(1) / scale_base_);
    t.scale_k = torch::pow(zeta.unsqueeze(0), -c.k_pos_S.unsqueeze(1) / scale_base_);
  }
  return c.rot.emplace(width, std::move(t)).first->second;
}

torch::Tensor RotaryImpl::rotate(const torch::Tensor& x, const torch::Tensor& cos_TR,
                                 const torch::Tensor& sin_TR, bool interleaved) {
  int64_t r = 2 * cos_TR.size(-1);
  int64_t width = x.size(-1);
  auto xr = r == width ? x : x.narrow(-1, 0, r);
  auto xf = xr.to(torch::kFloat32);
  torch::Tensor x1, x2;
  if (interleaved) {
    auto pairs = xf.unflatten(-1, {r / 2, 2});
    x1 = pairs.select(-1, 0);
    x2 = pairs.select(-1, 1);
  } else {
    x1 = xf.narrow(-1, 0, r / 2);
    x2 = xf.narrow(-1, r / 2, r / 2);
  }
  // [x1, x2] -> [x1 cos - x2 sin, x1 sin + x2 cos]   (RoFormer Eq. 34)
  auto y1 = x1 * cos_TR - x2 * sin_TR;
  auto y2 = x1 * sin_TR + x2 * cos_TR;
  auto y = interleaved ? torch::stack({y1, y2}, -1).flatten(-2) : torch::cat({y1, y2}, -1);
  y = y.to(x.scalar_type());
  return r == width ? y : torch::cat({y, x.narrow(-1, r, width - r)}, -1);
}

namespace {
torch::Tensor apply_scale(const torch::Tensor& y, const torch::Tensor& scale_TR, bool interleaved) {
  if (!scale_TR.defined()) return y;
  // Each pair shares its decay factor.
  auto s = interleaved ? scale_TR.repeat_interleave(2, -1) : torch::cat({scale_TR, scale_TR}, -1);
  int64_t r = s.size(-1);
  if (r == y.size(-1)) return (y.to(torch::kFloat32) * s).to(y.scalar_type());
  auto head = (y.narrow(-1, 0, r).to(torch::kFloat32) * s).to(y.scalar_type());
  return torch::cat({head, y.narrow(-1, r, y.size(-1) - r)}, -1);
}
}  // namespace

torch::Tensor RotaryImpl::rotate_q(const torch::Tensor& x, const PosCache& c) {
  const auto& t = tables(c, x.size(-1));
  return apply_scale(rotate(x, t.cos_q, t.sin_q, interleaved_), t.scale_q, interleaved_);
}

torch::Tensor RotaryImpl::rotate_k(const torch::Tensor& x, const PosCache& c) {
  const auto& t = tables(c, x.size(-1));
  return apply_scale(rotate(x, t.cos_k, t.sin_k, interleaved_), t.scale_k, interleaved_);
}

PositionModule make_position(const config::RopeConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<RotaryImpl>(c, d)));
}
PositionModule make_position(const config::XposConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<RotaryImpl>(c, d)));
}

}  // namespace ropelab::model
