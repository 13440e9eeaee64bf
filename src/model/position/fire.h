// FIRE, Functional Interpolation for Relative Positions (Li et al. 2024, ICLR;
// arXiv:2310.04418, Eq. 2-4): a learned score bias
//
//     b(i, j) = f_theta( psi(i - j) / psi(max(L, i)) ),   psi(x) = log(|c x| + 1),
//
// f_theta an MLP 1 -> mlp_width -> n_heads with ReLU, c > 0 learned (init init_c), and the
// threshold L = |l * L_init| learned through the multiplier l (init 1). Dividing by psi(max(L, i))
// is the "progressive interpolation": every normalised distance stays in [0, 1] however long
// the input, so a model trained at length L meets no unseen input to f_theta. Queries before the
// threshold see a bias of i - j alone; past it the bias also depends on i (the paper's design).
// Encoders use |i - j| (psi is symmetric). One module per stack, shared by its layers.
#pragma once
#include <torch/nn/modules/linear.h>

#include "model/init.h"
#include "model/position/position.h"

namespace ropelab::config {
struct FireConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class FireImpl : public PositionModuleImpl, public OwnsParameters {
 public:
  FireImpl(const config::FireConfig& c, const PositionDims& d);
  PosCache make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                       torch::Device device) override;
  ParamRole role_of(const std::string& local_name) const override;
  // The bias [1, N, T, S] for queries at q_pos_T and keys at k_pos_S (float32 positions).
  torch::Tensor bias(const torch::Tensor& q_pos_T, const torch::Tensor& k_pos_S);

 private:
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
  torch::Tensor c_, threshold_scale_;  // scalars
  double threshold_;                   // L_init
};

PositionModule make_position(const config::FireConfig& c, const PositionDims& d);

}  // namespace ropelab::model
