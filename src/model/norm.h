// The normalisation layers of the backbone (model.norm_type):
//   layernorm  Ba et al. 2016: (x - mean(x)) / sqrt(var(x) + eps) * weight + bias
//   rmsnorm    Zhang & Sennrich 2019, Eq. 4: x / sqrt(mean(x^2) + eps) * weight (no shift), as
//              Llama, Mistral and Qwen2 use it: normalised in float32, cast back to the input's
//              dtype, then scaled.
//   rmsnorm_offset  Gemma (Team Gemma 2024, 2025): the same with (1 + weight) as the gain, the
//              weight starting at 0 (so it is initialised and excluded from weight decay as a
//              shift is).
// Parameters are named weight and bias, as torch::nn::LayerNorm names them, so checkpoints of
// runs made before norm_type existed load unchanged.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <utility>

#include "config/schema.h"
#include "model/init.h"

namespace ropelab::model {

class NormImpl : public torch::nn::Module, public OwnsParameters {
 public:
  NormImpl(int64_t d, double eps, config::NormType type);
  // [..., d] -> [..., d] in the weight's dtype (under CPU autocast a sublayer's output is bf16;
  // the norm reads it in the weight's dtype).
  torch::Tensor forward(const torch::Tensor& x);
  // The norm of x for a sublayer that only multiplies it by weights (pre-norm): under CPU bf16
  // autocast a LayerNorm writes bf16 directly (the values autocast's cast of forward(x) would
  // give, in one pass, on CPUs with util/vec_bf16.h's AVX-512 forms); otherwise forward(x).
  torch::Tensor matmul_input(const torch::Tensor& x);
  // matmul_input(x), and x for the block's residual add (x + f(norm(x))): on the bf16 path, x as
  // an output of the norm's own node, whose backward then adds the residual's gradient to the
  // norm's in its own pass; otherwise x itself. Each, values and gradients, as the two used apart.
  std::pair<torch::Tensor, torch::Tensor> matmul_input_and_residual(const torch::Tensor& x);
  ParamRole role_of(const std::string& local) const override;

  torch::Tensor weight, bias;  // bias: layernorm only

 private:
  bool bf16_path(const torch::Tensor& x) const;  // the bf16 LayerNorm of matmul_input applies
  int64_t d_;
  double eps_;
  config::NormType type_;
};
TORCH_MODULE(Norm);

}  // namespace ropelab::model
