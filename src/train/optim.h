// The optimizer of every run (and of `ropelab bench`'s training step): AdamW with two groups,
// matrices decay and everything else (biases, norms, position tables) does not, by parameter
// role (model/init.h). Adam = AdamW without decoupled decay (Loshchilov & Hutter 2019).
#pragma once
#include <torch/nn/module.h>
#include <torch/optim/adamw.h>

#include <memory>

#include "config/schema.h"

namespace ropelab::train {

class FusedAdamW;
std::unique_ptr<FusedAdamW> make_optimizer(torch::nn::Module& model, const config::TrainConfig& t);

// torch::optim::AdamW with the same state (so checkpoints load either way) and the same
// arithmetic (Loshchilov & Hutter 2019, Algorithm 2; libtorch's order of operations), but on CPU
// each parameter is updated in one vectorised pass over p, grad, m and v instead of libtorch's
// seven tensor ops (each a pass over memory, some allocating). On a GPU (libtorch 2.1 on) all of
// a group's parameters go through libtorch's multi-tensor fused AdamW kernel (at::_fused_adamw_,
// a few launches per step instead of seven ops per parameter). Anything else, and amsgrad, uses
// libtorch's step. They agree to float rounding (tests/unit/train_test.cpp, tests/gpu/).
class FusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure closure = nullptr) override;
  // One step with every gradient scaled by grad_scale (a scalar tensor; the clipping's factor,
  // clip_factor below) as it is read: the same update as g.mul_(grad_scale) then step(), to the
  // bit, without that pass over the gradients on the CPU path. The gradients stay unscaled
  // there; the other paths scale them in place first.
  void step_scaled(const torch::Tensor& grad_scale);

 private:
  void step_with(const torch::Tensor& grad_scale);  // undefined: no scale
  // Whether every parameter with a gradient takes the vectorised CPU update.
  bool fusable_on_cpu();
  // The GPU path: false (nothing done) where it does not apply.
  bool step_on_device();
  // p's state (created at step 0 on first use) with its step count advanced by one.
  torch::optim::AdamWParamState& advance(const torch::Tensor& p);
};

// Drops every gradient (set to none, as PyTorch's zero_grad(set_to_none=True)): the next
// backward writes fresh gradients instead of adding into zero-filled ones, which saves a fill
// and an add per parameter per step. libtorch 1.13's Optimizer::zero_grad() only zero-fills.
void zero_grad_to_none(torch::optim::Optimizer& opt);

// Global-norm clipping, as torch::nn::utils::clip_grad_norm_ (the same arithmetic: grads scaled
// by min(1, max_norm / (norm + 1e-6))), but the norm is returned as a scalar tensor on the
// parameters' device instead of being read back to the host. max_norm <= 0: no clipping.
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);
// The same without scaling the gradients: the global norm and the factor min(1, max_norm /
// (norm + 1e-6)) (1 where max_norm <= 0), both scalar tensors, for FusedAdamW::step_scaled.
// Float32 CPU gradients are summed in one parallel pass, in double (the norm then within float
// rounding of libtorch's per-parameter norms).
struct ClipFactor {
  torch::Tensor norm, factor;
};
ClipFactor clip_factor(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace ropelab::train
