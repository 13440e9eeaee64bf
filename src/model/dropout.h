// Dropout (Srivastava et al. 2014) with a fast CPU mask: y = x * m / (1 - p), m ~ Bernoulli(1-p),
// and the two places a transformer layer applies it, fused so that the mask is never stored:
//   dropout_add(x, h)   = x + dropout(h)          (the residual branch, Vaswani et al. Eq. in 5.4)
//   act_dropout(h)      = dropout(act(h))         (inside the FFN, Eq. 2, act = GELU or ReLU)
//
// libtorch 1.13's CPU dropout draws the mask with bernoulli_, about 11 ns per element on this
// class of machine: a quarter of a second per step of the LM bench model. Here the mask comes
// from a counter-based hash (util::mix64, SplitMix64, of one 64-bit seed and the element index),
// ~1 ns per element. The seed is one draw from torch's default generator per call, so runs stay
// reproducible under torch::manual_seed and resume from checkpointed RNG state.
//
// dropout() writes the mask and lets autograd see a multiply by it. The fused forms regenerate
// the mask from the seed in their backward instead (one pass fewer each way, no mask tensor) and
// keep the masks of their unfused composition with the same seed: dropout_add gives the same
// values bit for bit; act_dropout computes the activation in float32 with vectorised GELU
// (util/vec_math.h), within 1e-6 of libtorch's (tests/unit/fused_test.cpp). Other devices use
// torch's ops.
#pragma once
#include <torch/types.h>

#include <cstdint>

#include "config/schema.h"

namespace ropelab::model {

torch::Tensor dropout(const torch::Tensor& x, double p, bool training);

// x + dropout(h, p): x and h of one shape; the result has their promoted dtype.
torch::Tensor dropout_add(const torch::Tensor& x, const torch::Tensor& h, double p, bool training);

// dropout(act(h), p), act = GELU (exact, erf form) or ReLU.
torch::Tensor act_dropout(const torch::Tensor& h, config::Activation act, double p, bool training);

// act_dropout's bf16 form run by a node on its own blocks of h while they are in cache
// (model/linear.h's act_dropout_after_linear), giving act_dropout's values bit for bit.
//
// Whether it applies: training, 0 < p < 1, a float CPU tensor t (h or what h is made from), a CPU
// with the AVX-512 forms.
bool fuses_act_dropout(const torch::Tensor& t, double p, bool training);
// One call's mask, drawn where act_dropout would draw it (the same seed, the same masks).
class ActDropoutBlocks {
 public:
  ActDropoutBlocks(config::Activation act, double p);
  // Elements [start, start + n) of the flat h (start even): from h's bf16 values y = act(h) *
  // mask and d = act'(h) * mask, as act_dropout's bf16 form writes them; `mask`: n floats of
  // scratch.
  void apply(int64_t start, int64_t n, const uint16_t* h, uint16_t* y, uint16_t* d,
             float* mask) const;

 private:
  config::Activation act_;
  float keep_;
  uint64_t seed_ = 0, threshold_ = 0;
};
// act_dropout's bf16 backward from those d: dh = g * d in bf16.
torch::Tensor act_dropout_backward_bf16(const torch::Tensor& d, const torch::Tensor& g);

}  // namespace ropelab::model
