// Integer positions: the position index itself added to every channel of the input embedding,
// PE(pos)_i = gain * pos. The first of the two failed attempts that the RoPE explainers walk
// through before sinusoids (Vaswani et al. 2017, Sec. 3.5): the index grows without bound, so by
// a few positions it swamps the token embedding (entries of about 0.02), and it is the same in
// every channel, so attention sees the position only as a shift along one direction.
#pragma once
#include "model/position/position.h"

namespace ropelab::config {
struct IntegerConfig;
}

namespace ropelab::model {

class IntegerImpl : public PositionModuleImpl {
 public:
  IntegerImpl(const config::IntegerConfig& c, const PositionDims& d);
  torch::Tensor add_to_input(const torch::Tensor& x_BTD, int64_t offset) override;
  torch::Tensor add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) override;

 private:
  double gain_;
};

PositionModule make_position(const config::IntegerConfig& c, const PositionDims& d);

}  // namespace ropelab::model
