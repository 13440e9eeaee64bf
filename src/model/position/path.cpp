#include "model/position/path.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/linear.h>

#include <cmath>

#include "config/schema.h"
#include "model/linear.h"

namespace ropelab::model {

PathImpl::PathImpl(const config::PathConfig&, const PositionDims& d) : PositionModuleImpl(d) {
  w_proj = register_module("w_proj", torch::nn::ModuleList());
  beta_proj = register_module("beta_proj", torch::nn::ModuleList());
  for (int64_t i = 0; i < d.n_layers; ++i) {
    w_proj->push_back(torch::nn::Linear(d.d_model, d.n_heads * d.head_dim));
    beta_proj->push_back(torch::nn::Linear(d.d_model, d.n_heads));
  }
}

std::pair<torch::Tensor, torch::Tensor> PathImpl::directions(const torch::Tensor& x,
                                                             int64_t layer) {
  namespace F = torch::nn::functional;
  const int64_t B = x.size(0), T = x.size(1), N = dims_.n_heads, H = dims_.head_dim;
  auto layer_i = static_cast<size_t>(layer);
  const auto* wp = w_proj[layer_i]->as<torch::nn::Linear>();
  const auto* bp = beta_proj[layer_i]->as<torch::nn::Linear>();
  auto w_BNTH = model::linear(x, wp->weight, wp->bias).to(torch::kFloat32);
  w_BNTH = F::normalize(w_BNTH.view({B, T, N, H}).transpose(1, 2),
                        F::NormalizeFuncOptions().dim(-1).eps(1e-6));
  auto beta_BNT =
      2 *
      torch::sigmoid(model::linear(x, bp->weight, bp->bias)).to(torch::kFloat32).transpose(1, 2);
  return {w_BNTH, beta_BNT};
}

std::pair<torch::Tensor, torch::Tensor> PathImpl::ut_correction(const torch::Tensor& w,
                                                                const torch::Tensor& beta,
                                                                const torch::Tensor& q,
                                                                const torch::Tensor& k,
                                                                bool carry) {
  const int64_t T = w.size(2);
  auto eye = torch::eye(T, w.options());
  // M = I + D L, L = strictly_lower(W W^T); M Y = D C' gives Y = T C' (T = M^-1 D).
  auto lower = torch::matmul(w, w.transpose(-2, -1)).tril(-1);
  auto m = eye + beta.unsqueeze(-1) * lower;
  auto c = torch::matmul(w, k.transpose(-2, -1)).tril(-1);  // C[t, j] = w_t.k_j, t > j
  auto y = torch::linalg_solve_triangular(m, beta.unsqueeze(-1) * c, /*upper=*/false,
                                          /*left=*/true, /*unitriangular=*/true);
  auto a = torch::matmul(q, w.transpose(-2, -1)).tril();  // A[i, s] = q_i.w_s, s <= i
  auto correction = torch::matmul(a, y);
  torch::Tensor carried;
  if (carry) carried = k - torch::matmul(y.transpose(-2, -1), w);
  return {correction, carried};
}

std::pair<torch::Tensor, torch::Tensor> PathImpl::scores(const torch::Tensor& x_BTD,
                                                         const torch::Tensor& q_BNTH,
                                                         const torch::Tensor& k_new_BNTH,
                                                         const torch::Tensor& state, int64_t layer,
                                                         bool sequential) {
  const auto& x = x_BTD;
  const int64_t B = x.size(0), T = x.size(1), N = dims_.n_heads, H = dims_.head_dim;
  auto [w_BNTH, beta_BNT] = directions(x, layer);
  auto q = q_BNTH.to(torch::kFloat32), k_new = k_new_BNTH.to(torch::kFloat32);
  const double scale = 1.0 / std::sqrt(static_cast<double>(H));
  if (!state.defined() && !sequential) {
    auto [correction, carried] = ut_correction(w_BNTH, beta_BNT, q, k_new, true);
    return {(torch::matmul(q, k_new.transpose(-2, -1)) - correction) * scale, carried};
  }
  auto keys = state.defined() ? torch::cat({state, k_new}, 2) : k_new;  // [B, N, S, H]
  const int64_t S = keys.size(2), past = S - T;
  auto key_index = torch::arange(S, torch::TensorOptions().device(x.device()));
  std::vector<torch::Tensor> rows;
  for (int64_t t = 0; t < T; ++t) {
    // Query i = past + t: keys j < i take one more transform, H_i.
    auto earlier = (key_index < past + t).to(torch::kFloat32).view({1, 1, S, 1});
    auto w = w_BNTH.select(2, t).unsqueeze(2);  // [B, N, 1, H]
    auto proj = (keys * w).sum(-1, true);       // [B, N, S, 1]
    auto beta = beta_BNT.select(2, t).view({B, N, 1, 1});
    keys = keys - earlier * beta * proj * w;
    rows.push_back(torch::matmul(keys, q.select(2, t).unsqueeze(-1)).squeeze(-1));  // [B, N, S]
  }
  return {torch::stack(rows, 2) * scale, keys};
}

ScoreBias PathImpl::content_bias(const LayerContent& in, const PosCache&) {
  const int64_t T = in.x_BTD.size(1), S = in.k_BNSH.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(dims_.head_dim));
  torch::Tensor state;
  if (in.state != nullptr && in.state->defined()) state = *in.state;
  auto k_new = in.k_BNSH.narrow(2, S - T, T);
  if (!state.defined()) {
    // Attention adds q.k/sqrt(d) itself: the bias is the correction alone.
    auto [w, beta] = directions(in.x_BTD, in.layer);
    auto [correction, carried] = ut_correction(w, beta, in.q_BNTH.to(torch::kFloat32),
                                               k_new.to(torch::kFloat32), in.state != nullptr);
    if (in.state != nullptr) *in.state = carried;
    return correction * -scale;
  }
  auto [path, keys] = scores(in.x_BTD, in.q_BNTH, k_new, state, in.layer);
  *in.state = keys;
  auto plain = torch::matmul(in.q_BNTH.to(torch::kFloat32),
                             in.k_BNSH.to(torch::kFloat32).transpose(-2, -1)) *
               scale;
  return path - plain;
}

PositionModule make_position(const config::PathConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<PathImpl>(c, d)));
}

}  // namespace ropelab::model
