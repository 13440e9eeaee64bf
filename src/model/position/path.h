// PaTH attention (Yang et al. 2025, arXiv:2505.16381, Eq. 2-4): position as accumulated
// data-dependent Householder transforms, in place of RoPE's fixed rotations. Each step t of
// each head has
//
//     H_t = I - beta_t w_t w_t^T,   w_t = normalize(W_w x_t),   beta_t = 2 sigmoid(u . x_t + b),
//     score_ij = q_i^T (H_i H_{i-1} ... H_{j+1}) k_j / sqrt(d)        (j <= i; identity at j = i)
//
// from the layer's input x_t. With beta in (0, 2), H_t is a reflection (beta = 2) or a
// contraction along w_t. This is the quadratic reference form: query by query, every earlier
// key is carried one transform further (T sequential steps of [B, N, S, d] work, and autograd
// keeps each step: O(T^2 d) memory per head). The transformed keys are the decoding state kept
// in the KV cache. A fast form needs the paper's chunked UT-transform (WY representation of the
// Householder products) and a FlashAttention-style kernel; neither is built here. Left out:
// the paper's short convolution on w, and its combination with FoX's forget gate.
// The module adds score - q.k/sqrt(d) as a score bias, so attention itself is unchanged.
#pragma once
#include <torch/nn/modules/container/modulelist.h>

#include "model/position/position.h"

namespace ropelab::config {
struct PathConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class PathImpl : public PositionModuleImpl {
 public:
  PathImpl(const config::PathConfig& c, const PositionDims& d);
  torch::Tensor content_bias(const LayerContent& in, const PosCache& c) override;
  bool uses_content() const override { return true; }
  // The PaTH scores (already divided by sqrt(d)) of T new queries over S keys, of which the
  // first S - T are `state` (keys already carried up to the previous query; undefined for
  // none) and the last T are k_new. Returns {scores [B, N, T, S], the new state}.
  std::pair<torch::Tensor, torch::Tensor> scores(const torch::Tensor& x_BTD,
                                                 const torch::Tensor& q_BNTH,
                                                 const torch::Tensor& k_new_BNTH,
                                                 const torch::Tensor& state, int64_t layer);

 private:
  torch::nn::ModuleList w_proj{nullptr}, beta_proj{nullptr};  // per layer
};

PositionModule make_position(const config::PathConfig& c, const PositionDims& d);

}  // namespace ropelab::model
