#include "model/heads.h"

#include <torch/nn/functional.h>

#include "model/dropout.h"
#include "model/linear.h"

namespace ropelab::model {

namespace F = torch::nn::functional;

namespace {
torch::nn::Linear untied(int64_t d, int64_t vocab) {
  return torch::nn::Linear(torch::nn::LinearOptions(d, vocab).bias(false));
}
}  // namespace

LmHeadImpl::LmHeadImpl(const config::ModelConfig& c, int64_t vocab) {
  if (!c.tie_embeddings) proj = register_module("proj", untied(c.d_model, vocab));
}

torch::Tensor LmHeadImpl::forward(const torch::Tensor& h, const TransformerImpl& backbone) {
  return model::linear(h, linear_weight(backbone));
}

torch::Tensor LmHeadImpl::linear_weight(const TransformerImpl& backbone) const {
  return proj ? proj->weight : backbone.embedding_weight();
}

MlmHeadImpl::MlmHeadImpl(const config::ModelConfig& c, int64_t vocab) {
  const int64_t E = embedding_width(c);  // the transform ends at the embeddings' width
  dense = register_module("dense", torch::nn::Linear(c.d_model, E));
  norm = register_module("norm", layer_norm(E, c.norm_eps));
  bias_ = register_parameter("bias", torch::zeros({vocab}));
  if (!c.tie_embeddings) proj = register_module("proj", untied(E, vocab));
}

ParamRole MlmHeadImpl::role_of(const std::string& local) const {
  (void)local;  // the output bias is the only parameter of its own
  return ParamRole::kBias;
}

torch::Tensor MlmHeadImpl::forward(const torch::Tensor& h, const TransformerImpl& backbone) {
  auto x = norm_of(norm, F::gelu(model::linear(dense, h)));
  const auto& w = proj ? proj->weight : backbone.embedding_weight();
  return model::linear(x, w, bias_);
}

ClassificationHeadImpl::ClassificationHeadImpl(const config::ModelConfig& c, int64_t num_outputs)
    : dropout_(c.dropout), act_(c.pooler_activation) {
  pooler = register_module("pooler", torch::nn::Linear(c.d_model, c.d_model));
  classifier = register_module("classifier", torch::nn::Linear(c.d_model, num_outputs));
}

torch::Tensor ClassificationHeadImpl::forward(const torch::Tensor& h, const TransformerImpl&) {
  using config::PoolerActivation;
  auto x_BD = h.select(1, 0);
  torch::Tensor pooled;
  if (act_ == PoolerActivation::kTanh) {  // BERT's pooler
    pooled = torch::tanh(model::linear(pooler, x_BD));
  } else {  // RoFormer's classification head: dropout on both sides of the dense layer
    x_BD = model::dropout(x_BD, dropout_, is_training());
    pooled = model::linear(pooler, x_BD);
    pooled = act_ == PoolerActivation::kGelu ? F::gelu(pooled) : torch::relu(pooled);
  }
  pooled = model::dropout(pooled, dropout_, is_training());
  return model::linear(classifier, pooled);
}

}  // namespace ropelab::model
