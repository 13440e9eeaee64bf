// KERPLE, kernelized relative positional embedding (Chi et al. 2022, NeurIPS; arXiv:2205.09921,
// Sec. 4, Eq. 7): a score bias from a conditionally positive definite kernel of the distance,
// with learned per-head parameters r1, r2 > 0:
//
//     log:    b(m, n) = -r1 * log(1 + r2 * |m - n|)
//     power:  b(m, n) = -r1 * |m - n|^r2,   0 < r2 <= 2
//
// The bias depends on m - n only. r1, r2 are kept in range by clamping (to [0.01, inf) and, for
// the power kernel's exponent, [0.01, 2]), as in the paper's code; their initial values are
// uniform draws: log r1 ~ U(0, 2), r2 ~ U(0, 1); power r1 ~ U(0, 1), r2 ~ U(0, 2).
#pragma once
#include "model/init.h"
#include "model/position/position.h"

namespace ropelab::config {
struct KerpleConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class KerpleImpl : public PositionModuleImpl, public OwnsParameters {
 public:
  KerpleImpl(const config::KerpleConfig& c, const PositionDims& d);
  PosCache make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                       torch::Device device) override;
  ParamRole role_of(const std::string& local_name) const override;

 private:
  bool log_;
  torch::Tensor r1_, r2_;  // [N]
};

PositionModule make_position(const config::KerpleConfig& c, const PositionDims& d);

}  // namespace ropelab::model
