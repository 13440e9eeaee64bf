// Heads: what turns the backbone's hidden states into a task's outputs.
//   LmHead              logits over the vocabulary; tied to the token embeddings (GPT-2,
//                       Transformer-base) or its own projection;
//   MlmHead             BERT's transform (dense + GELU + LayerNorm, to the embeddings' width),
//                       then the vocabulary projection (tied or own) plus an output bias
//                       (Devlin et al. 2019);
//   ClassificationHead  BERT's pooler (tanh dense on [CLS]) and a linear layer with dropout:
//                       num_outputs classes, or 1 for regression; with pooler_activation gelu
//                       or relu, RoFormer's head (dropout, dense, activation, dropout, linear).
// A head never owns the backbone: tied heads read the embedding matrix at forward time.
//
// Legend: B batch, T time, D model dim, V vocab, C classes.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include "config/schema.h"
#include "model/init.h"
#include "model/transformer.h"

namespace ropelab::model {

class HeadImpl : public torch::nn::Module {
 public:
  // h_BTD (or any [..., D]) -> the head's outputs.
  virtual torch::Tensor forward(const torch::Tensor& h, const TransformerImpl& backbone) = 0;
  // W where forward(h) is exactly model::linear(h, W) (no bias, nothing after), so that a loss
  // may compute the product itself (tasks/loss.h's linear_cross_entropy); else undefined.
  virtual torch::Tensor linear_weight(const TransformerImpl& backbone) const {
    (void)backbone;
    return {};
  }
};

class LmHeadImpl : public HeadImpl {
 public:
  LmHeadImpl(const config::ModelConfig& c, int64_t vocab);
  torch::Tensor forward(const torch::Tensor& h_BTD, const TransformerImpl& backbone) override;
  torch::Tensor linear_weight(const TransformerImpl& backbone) const override;

 private:
  torch::nn::Linear proj{nullptr};  // untied only
};

class MlmHeadImpl : public HeadImpl, public OwnsParameters {
 public:
  MlmHeadImpl(const config::ModelConfig& c, int64_t vocab);
  torch::Tensor forward(const torch::Tensor& h_BTD, const TransformerImpl& backbone) override;
  ParamRole role_of(const std::string& local) const override;

 private:
  torch::nn::Linear dense{nullptr};
  torch::nn::LayerNorm norm{nullptr};
  torch::Tensor bias_;
  torch::nn::Linear proj{nullptr};  // untied only
};

class ClassificationHeadImpl : public HeadImpl {
 public:
  // num_outputs: classes, or 1 for regression.
  ClassificationHeadImpl(const config::ModelConfig& c, int64_t num_outputs);
  // h_BTD -> [B, C], from the first ([CLS]) position.
  torch::Tensor forward(const torch::Tensor& h_BTD, const TransformerImpl& backbone) override;

 private:
  double dropout_;
  config::PoolerActivation act_;
  torch::nn::Linear pooler{nullptr}, classifier{nullptr};
};

}  // namespace ropelab::model
