// Dropout (Srivastava et al. 2014) with a fast CPU mask: y = x * m / (1 - p), m ~ Bernoulli(1-p).
//
// libtorch 1.13's CPU dropout draws the mask with bernoulli_, about 11 ns per element on this
// class of machine: a quarter of a second per step of the LM bench model. Here the mask comes
// from a counter-based hash (util::mix64, SplitMix64, of one 64-bit seed and the element index), ~1
// ns per element, written in the input's dtype. The seed is one draw from torch's default generator
// per call, so runs stay reproducible under torch::manual_seed and resume from checkpointed RNG
// state. Autograd sees a plain multiply by a constant mask. Other devices use torch's dropout.
#pragma once
#include <torch/types.h>

namespace ropelab::model {

torch::Tensor dropout(const torch::Tensor& x, double p, bool training);

}  // namespace ropelab::model
