// ALiBi (Press et al. 2022, "Train Short, Test Long"): no position embedding; attention scores
// get -slope_n * |m - k|, with per-head slopes the geometric sequence 2^(-8/N), 2^(-16/N), ...
// (and the paper's interleaving rule when N is not a power of two).
#pragma once
#include "model/position/position.h"

namespace ropelab::config {
struct AlibiConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class AlibiImpl : public PositionModuleImpl {
 public:
  AlibiImpl(const config::AlibiConfig& c, const PositionDims& d);
  PosCache make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                       torch::Device device) override;
  static torch::Tensor slopes(int64_t n_heads);

 private:
  torch::Tensor slopes_;  // buffer [N]
};

PositionModule make_position(const config::AlibiConfig& c, const PositionDims& d);

}  // namespace ropelab::model
