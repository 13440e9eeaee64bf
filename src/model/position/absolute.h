// Absolute position encodings added to the input embeddings.
//   sinusoidal (Vaswani et al. 2017, Sec. 3.5): PE(pos, 2i) = sin(pos / base^(2i/d)),
//                                               PE(pos, 2i+1) = cos(pos / base^(2i/d));
//   learned (BERT, GPT-2): one trainable row per position, max_len rows. A longer input is a
//   clear error (UserError), never a silent wrap.
#pragma once
#include "model/position/position.h"

namespace ropelab::config {
struct SinusoidalConfig;
struct LearnedConfig;
struct NoPositionConfig;
}  // namespace ropelab::config

namespace ropelab::model {

class SinusoidalImpl : public PositionModuleImpl {
 public:
  SinusoidalImpl(const config::SinusoidalConfig& c, const PositionDims& d);
  torch::Tensor add_to_input(const torch::Tensor& x_BTD, int64_t offset) override;
  torch::Tensor add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) override;
  // The table for positions [offset, offset+n): [n, d] float32.
  static torch::Tensor table(int64_t offset, int64_t n, int64_t d, double base);

 private:
  double base_;
};

class LearnedImpl : public PositionModuleImpl {
 public:
  LearnedImpl(const config::LearnedConfig& c, const PositionDims& d);
  torch::Tensor add_to_input(const torch::Tensor& x_BTD, int64_t offset) override;
  torch::Tensor add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) override;
  int64_t max_len() const override { return weight_.size(0); }

 private:
  torch::Tensor weight_;  // [max_len, D]
};

PositionModule make_position(const config::NoPositionConfig& c, const PositionDims& d);
PositionModule make_position(const config::SinusoidalConfig& c, const PositionDims& d);
PositionModule make_position(const config::LearnedConfig& c, const PositionDims& d);

}  // namespace ropelab::model
