// A model is a backbone (the transformer, model/transformer.h) plus a head (model/heads.h). The
// task decides which head (tasks/). Parameters are named "backbone.<path>" and "head.<path>",
// so a pretrained backbone loads into a model with another head by name (weights/weights.h).
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <memory>

#include "config/schema.h"
#include "model/heads.h"
#include "model/transformer.h"

namespace ropelab::model {

class ModelImpl : public torch::nn::Module {
 public:
  // Registers the backbone, then the head, then initialises every parameter (model/init.h).
  ModelImpl(Transformer backbone, std::shared_ptr<HeadImpl> head, double init_std);
  // The head applied to hidden states.
  torch::Tensor logits(const torch::Tensor& h) { return head->forward(h, *backbone); }
  // W where logits(h) = h W^T exactly (HeadImpl::linear_weight), else undefined.
  torch::Tensor logits_weight() const { return head->linear_weight(*backbone); }

  Transformer backbone{nullptr};
  std::shared_ptr<HeadImpl> head;
};
TORCH_MODULE(Model);

}  // namespace ropelab::model
