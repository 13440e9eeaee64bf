// PoPE, polar coordinate position embedding (Gopalakrishnan et al. 2025, arXiv:2509.10534,
// Sec. 3): each of the head's d channels becomes a complex number whose magnitude is the
// content and whose phase is the position,
//
//     q~_c = softplus(q_c) e^{i m theta_c},   k~_c = softplus(k_c) e^{i (n theta_c + delta_c)},
//     theta_c = base^(-c/d), c = 0..d-1   (d frequencies, not RoPE's d/2),
//     score = Re sum_c q~_c conj(k~_c) = sum_c softplus(q_c) softplus(k_c) cos((m-n) theta_c -
//     delta_c)
//
// with a learned per-head phase bias delta in [-2 pi, 0] (clamped; initialised to zero) on the
// keys. The rotated q and k are real [.., 2d] vectors (cos, sin interleaved per channel), so
// attention is an ordinary dot product of twice the width; the scale stays 1/sqrt(d). The
// score depends on m - n only, and the magnitudes (the "what") cannot leak into the phases
// (the "where"). Softmax attention only: the keys are not a non-negative feature map.
#pragma once
#include "model/init.h"
#include "model/position/position.h"

namespace ropelab::config {
struct PopeConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class PopeImpl : public PositionModuleImpl, public OwnsParameters {
 public:
  PopeImpl(const config::PopeConfig& c, const PositionDims& d);
  torch::Tensor rotate_q(const torch::Tensor& x, const PosCache& c) override;
  torch::Tensor rotate_k(const torch::Tensor& x, const PosCache& c) override;
  ParamRole role_of(const std::string& local_name) const override;

 private:
  torch::Tensor polar(const torch::Tensor& x_BNTH, const torch::Tensor& pos_T, bool key);
  torch::Tensor theta_H_;   // buffer: base^(-c/d)
  torch::Tensor phase_NH_;  // delta, learned
};

PositionModule make_position(const config::PopeConfig& c, const PositionDims& d);

}  // namespace ropelab::model
