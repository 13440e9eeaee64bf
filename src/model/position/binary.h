// Binary positions: the position index's bits added to the input embedding, one bit a channel,
// PE(pos)_i = gain * ((pos >> i) & 1) for i < 62 (0 beyond). The second of the two failed
// attempts that the RoPE explainers walk through before sinusoids (Vaswani et al. 2017,
// Sec. 3.5): bounded, unlike integer positions, but each channel jumps between 0 and gain, so
// neighbouring positions can differ in many channels at once (7 -> 8 flips four bits) and the
// encoding has no smooth notion of distance. Sinusoids are its continuous version: channel i of
// the binary code is a square wave of period 2^(i+1).
#pragma once
#include "model/position/position.h"

namespace ropelab::config {
struct BinaryConfig;
}

namespace ropelab::model {

class BinaryImpl : public PositionModuleImpl {
 public:
  BinaryImpl(const config::BinaryConfig& c, const PositionDims& d);
  torch::Tensor add_to_input(const torch::Tensor& x_BTD, int64_t offset) override;
  torch::Tensor add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) override;
  // The code of positions pos (int64, any shape) in d channels: [..., d] float32.
  static torch::Tensor code(const torch::Tensor& pos, int64_t d, double gain);

 private:
  double gain_;
};

PositionModule make_position(const config::BinaryConfig& c, const PositionDims& d);

}  // namespace ropelab::model
