// Learned commuting rotations: LieRE (Ostmeier et al. 2024, arXiv:2406.10322) and ComRoPE
// (Yu et al. 2025, arXiv:2506.03737, the axis-partition form). RoPE's fixed rotation
// R(m) = exp(m * A_RoPE), with A_RoPE block-diagonal in 2x2 blocks [[0, -theta_i], [theta_i, 0]],
// becomes R(m) = exp(m * A) for a *learned* skew-symmetric A, block-diagonal in blocks of size b
// (`block`), one per head:
//
//     A = P - P^T  (P learned, [n_heads, d/b, b, b]),   q_m -> exp(m A) q_m,   k_n -> exp(n A) k_n,
//     score = q_m^T exp(m A)^T exp(n A) k_n = q_m^T exp((n - m) A) k_n
//
// since A commutes with itself and exp(mA) is orthogonal: the score depends on n - m only, and
// norms are preserved (the tests check both). b = 2 is RoPE with learned frequencies; b = d is
// one dense generator (LieRE in 1-D). A starts as RoPE's generator (base `base`, interleaved
// pairs), so an untrained ComRoPE equals RoPE exactly. With one coordinate (text) every
// generator commutes with itself; the several commuting generators that ComRoPE needs for 2-D
// positions are not built here. exp(pA) is exp(A)^p by binary powers (log2 L batched b x b
// matmuls per call, no host syncs); a faster form would diagonalise A once per step and cache
// the rotations across layers.
#pragma once
#include "model/init.h"
#include "model/position/position.h"

namespace ropelab::config {
struct ComropeConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class ComropeImpl : public PositionModuleImpl, public OwnsParameters {
 public:
  ComropeImpl(const config::ComropeConfig& c, const PositionDims& d);
  torch::Tensor rotate_q(const torch::Tensor& x, const PosCache& c) override;
  torch::Tensor rotate_k(const torch::Tensor& x, const PosCache& c) override;
  ParamRole role_of(const std::string& local_name) const override;
  // exp(p A) for each position p (integers below `length`): [T, N, d/b, b, b].
  torch::Tensor rotations(const torch::Tensor& pos_T, int64_t length) const;

 private:
  torch::Tensor rotate(const torch::Tensor& x_BNTH, const torch::Tensor& pos_T,
                       int64_t length) const;
  int64_t block_;
  torch::Tensor generators_;  // P: [N, d/b, b, b]
};

PositionModule make_position(const config::ComropeConfig& c, const PositionDims& d);

}  // namespace ropelab::model
