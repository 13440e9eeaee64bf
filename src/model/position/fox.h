// FoX, the Forgetting Transformer (Lin et al. 2025, ICLR; arXiv:2503.02130, Eq. 3-5): each
// head of each layer has a scalar forget gate per step, computed from the layer's input x_t,
//
//     f_t = sigmoid(w_f . x_t + b_f),      o_i = sum_j F_ij exp(q_i . k_j) v_j / sum_j F_ij exp(q_i
//     . k_j), F_ij = prod_{l=j+1..i} f_l,   so   log F_ij = c_i - c_j,   c_i = sum_{l<=i} log f_l:
//
// a data-dependent ALiBi added to the scores (causal self-attention only). The gate projection
// is a Linear(d_model, n_heads) per layer (normal(init_std) weight, zero bias, as the paper's
// code initialises it). It works with or without RoPE (`rope: true` rotates q and k as well).
// With a KV cache, the cumulative sums c of the cached keys are the layer's decoding state.
// Left out: FoX (Pro)'s output gate, QK-norm and key/value shift, which are not positions.
#pragma once
#include <torch/nn/modules/container/modulelist.h>

#include "model/position/rotary.h"

namespace ropelab::config {
struct FoxConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class FoxImpl : public RotaryImpl {
 public:
  FoxImpl(const config::FoxConfig& c, const PositionDims& d);
  torch::Tensor rotate_q(const torch::Tensor& x, const PosCache& c) override;
  torch::Tensor rotate_k(const torch::Tensor& x, const PosCache& c) override;
  std::optional<Rotation> rotation(const PosCache& c, int64_t width) const override;
  ScoreBias content_bias(const LayerContent& in, const PosCache& c) override;
  bool uses_content() const override { return true; }
  // log f_t [B, N, T] of layer `layer` for its input x_BTD.
  torch::Tensor log_forget(const torch::Tensor& x_BTD, int64_t layer);

 private:
  bool rope_;
  torch::nn::ModuleList gates{nullptr};  // per layer: Linear(d_model, n_heads)
};

PositionModule make_position(const config::FoxConfig& c, const PositionDims& d);

}  // namespace ropelab::model
