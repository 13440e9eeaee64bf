#include "model/position/cope.h"

#include <cmath>
#include <stdexcept>

#include "config/schema.h"

namespace ropelab::model {

CopeImpl::CopeImpl(const config::CopeConfig& c, const PositionDims& d) : PositionModuleImpl(d) {
  if (c.npos_max < 1)  // 0 means task.seq_len, which loading a config fills in
    throw std::invalid_argument("cope: npos_max must be at least 1 (got " +
                                std::to_string(c.npos_max) + ")");
  for (int64_t i = 0; i < d.n_layers; ++i)
    embeddings_.push_back(register_parameter("embeddings_" + std::to_string(i),
                                             torch::zeros({d.head_dim, c.npos_max})));
}

ParamRole CopeImpl::role_of(const std::string&) const { return ParamRole::kOwnInit; }

ScoreBias CopeImpl::content_bias(const LayerContent& in, const PosCache&) {
  const auto& e_HP = embeddings_[static_cast<size_t>(in.layer)];
  auto q = in.q_BNTH.to(torch::kFloat32), k = in.k_BNSH.to(torch::kFloat32);
  auto s_BNTS = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(static_cast<double>(q.size(3)));
  if (in.mask_B1TS.defined()) s_BNTS = s_BNTS + in.mask_B1TS;
  auto g = torch::sigmoid(s_BNTS);
  // p_ij = sum over t >= j of g_it (masked keys after the query contribute zero).
  auto p = g.flip(-1).cumsum(-1).flip(-1).clamp_max(static_cast<double>(e_HP.size(1) - 1));
  auto z_BNTP = torch::matmul(q, e_HP);
  auto lo = p.floor(), w = p - lo;
  auto z_lo = z_BNTP.gather(-1, lo.to(torch::kInt64));
  auto z_hi = z_BNTP.gather(-1, p.ceil().to(torch::kInt64));
  return z_hi * w + z_lo * (1 - w);
}

PositionModule make_position(const config::CopeConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<CopeImpl>(c, d)));
}

}  // namespace ropelab::model
