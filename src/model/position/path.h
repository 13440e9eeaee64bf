// PaTH attention (Yang et al. 2025, arXiv:2505.16381, Eq. 2-4): position as accumulated
// data-dependent Householder transforms, in place of RoPE's fixed rotations. Each step t of
// each head has
//
//     H_t = I - beta_t w_t w_t^T,   w_t = normalize(W_w x_t),   beta_t = 2 sigmoid(u . x_t + b),
//     score_ij = q_i^T (H_i H_{i-1} ... H_{j+1}) k_j / sqrt(d)        (j <= i; identity at j = i)
//
// from the layer's input x_t. With beta in (0, 2), H_t is a reflection (beta = 2) or a
// contraction along w_t.
//
// Two exact forms of the same scores:
// - parallel (training, evaluation, a decoding prompt): the UT transform. A product of
//   Householders in reverse order is H_b ... H_a = I - W^T T W, with W the rows w_a..w_b and
//   T = (I + D L)^{-1} D, where D = diag(beta) and L = strictly_lower(W W^T). T is lower
//   triangular, so the T of any range (j, i] is the block of the whole sequence's T: one
//   triangular solve serves every pair. With A = Q W^T masked to s <= i and C = W K^T masked to
//   t > j,
//       score = (Q K^T - A T C) / sqrt(d)
//   in O(T^2 d + T^3) per head, all batched matrix products (the paper's Eq. 6 without its
//   chunking). The keys carried to the end, the decoding state, are K - (T C)^T W.
// - sequential (decoding with a cache): query by query, every earlier key is carried one
//   transform further, from the state. It is also the reference the parallel form is tested
//   against.
// The paper's chunked form (T per chunk, for long sequences) and a FlashAttention-style kernel
// are not built. Left out: the paper's short convolution on w, and its combination with FoX's
// forget gate. The module adds score - q.k/sqrt(d) as a score bias, so attention itself is
// unchanged.
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
  ScoreBias content_bias(const LayerContent& in, const PosCache& c) override;
  bool uses_content() const override { return true; }
  // The PaTH scores (already divided by sqrt(d)) of T new queries over S keys, of which the
  // first S - T are `state` (keys already carried up to the previous query; undefined for
  // none) and the last T are k_new. Returns {scores [B, N, T, S], the new state}. Without a
  // state the parallel form runs unless `sequential`.
  std::pair<torch::Tensor, torch::Tensor> scores(const torch::Tensor& x_BTD,
                                                 const torch::Tensor& q_BNTH,
                                                 const torch::Tensor& k_new_BNTH,
                                                 const torch::Tensor& state, int64_t layer,
                                                 bool sequential = false);

 private:
  // w [B, N, T, H] (unit rows) and beta [B, N, T] of a layer, in float32.
  std::pair<torch::Tensor, torch::Tensor> directions(const torch::Tensor& x_BTD, int64_t layer);
  // The parallel form's correction A T C [B, N, T, T] (not yet divided by sqrt(d)) and, if
  // `carry`, the carried keys.
  std::pair<torch::Tensor, torch::Tensor> ut_correction(const torch::Tensor& w_BNTH,
                                                        const torch::Tensor& beta_BNT,
                                                        const torch::Tensor& q_BNTH,
                                                        const torch::Tensor& k_BNTH, bool carry);
  torch::nn::ModuleList w_proj{nullptr}, beta_proj{nullptr};  // per layer
};

PositionModule make_position(const config::PathConfig& c, const PositionDims& d);

}  // namespace ropelab::model
