#include "model/position/comrope.h"

#include <algorithm>
#include <cmath>

#include "config/schema.h"

namespace ropelab::model {

ComropeImpl::ComropeImpl(const config::ComropeConfig& c, const PositionDims& d)
    : PositionModuleImpl(d), block_(c.block) {
  // RoPE's generator: pair i = (2i, 2i+1) turns at theta_i = base^(-2i/d); P holds the lower
  // entry of each pair, so A = P - P^T = [[0, -theta_i], [theta_i, 0]].
  int64_t H = d.head_dim, K = H / block_;
  auto p = torch::zeros({d.n_heads, K, block_, block_});
  for (int64_t i = 0; i < H / 2; ++i) {
    double theta = std::pow(c.base, -2.0 * static_cast<double>(i) / static_cast<double>(H));
    int64_t k = (2 * i) / block_, r = (2 * i) % block_;
    p.index_put_({torch::indexing::Slice(), k, r + 1, r}, theta);
  }
  generators_ = register_parameter("generators", p);
}

ParamRole ComropeImpl::role_of(const std::string&) const { return ParamRole::kOwnInit; }

namespace {
// exp(A) for the small generators, by scaling and squaring with a fixed Taylor degree: matmuls
// only, so nothing is read back to the host (torch's matrix_exp picks its degree from the norm
// on the host, a sync per call on a GPU). In float64, so that the squarings (and the powers
// after them) do not amplify float32 rounding; accurate to float32 for |A| up to about 100.
torch::Tensor expm_fixed(const torch::Tensor& a) {
  constexpr int kSquarings = 8, kDegree = 12;
  auto x = a / static_cast<double>(1 << kSquarings);
  auto eye = torch::eye(a.size(-1), a.options()).expand_as(a);
  auto out = eye, term = eye;
  for (int k = 1; k <= kDegree; ++k) {
    term = torch::matmul(term, x) / static_cast<double>(k);
    out = out + term;
  }
  for (int k = 0; k < kSquarings; ++k) out = torch::matmul(out, out);
  return out;
}
}  // namespace

torch::Tensor ComropeImpl::rotations(const torch::Tensor& pos_T, int64_t length) const {
  // exp(p A) = exp(A)^p for integer p, by binary powers: exp(A), exp(2A), exp(4A), ... each
  // multiplied in where p has that bit. The number of bits comes from the host-side length.
  auto a = (generators_ - generators_.transpose(-2, -1)).to(torch::kFloat64);  // [N, K, b, b]
  auto power = expm_fixed(a);
  auto p_T = pos_T.round().to(torch::kInt64);
  auto sizes = a.sizes().vec();
  sizes.insert(sizes.begin(), pos_T.size(0));
  auto r = torch::eye(block_, a.options()).expand(sizes).contiguous();  // [T, N, K, b, b]
  for (int64_t bit = 0; (int64_t{1} << bit) <= std::max<int64_t>(length, 1); ++bit) {
    auto has = p_T.bitwise_right_shift(bit).bitwise_and(1).to(torch::kBool).view({-1, 1, 1, 1, 1});
    r = torch::where(has, torch::matmul(r, power), r);
    power = torch::matmul(power, power);
  }
  return r.to(torch::kFloat32);
}

torch::Tensor ComropeImpl::rotate(const torch::Tensor& x, const torch::Tensor& pos_T,
                                  int64_t length) const {
  auto sizes = x.sizes().vec();                                // [B, N, T, H]
  auto r = rotations(pos_T, length).permute({1, 0, 2, 3, 4});  // [N, T, K, b, b]
  auto xb = x.to(torch::kFloat32).reshape({sizes[0], sizes[1], sizes[2], -1, block_, 1});
  return torch::matmul(r.unsqueeze(0), xb).reshape(sizes).to(x.scalar_type());
}

torch::Tensor ComropeImpl::rotate_q(const torch::Tensor& x, const PosCache& c) {
  return rotate(x, c.q_pos_T, c.length);
}

torch::Tensor ComropeImpl::rotate_k(const torch::Tensor& x, const PosCache& c) {
  return rotate(x, c.k_pos_S, c.length);
}

PositionModule make_position(const config::ComropeConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<ComropeImpl>(c, d)));
}

}  // namespace ropelab::model
