#include "train/optim.h"

#include <torch/torch.h>

#include <limits>

#include "model/init.h"

namespace ropelab::train {

torch::optim::AdamW make_optimizer(torch::nn::Module& model, const config::TrainConfig& t) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model::param_roles(model))
    (model::decays(p.role) ? decay : no_decay).push_back(p.tensor);
  double wd = t.optimizer == config::OptimizerType::kAdamW ? t.weight_decay : 0.0;
  auto opts = torch::optim::AdamWOptions(t.lr).betas({t.beta1, t.beta2}).eps(t.eps);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(opts).weight_decay(wd)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(opts).weight_decay(0.0)));
  return torch::optim::AdamW(std::move(groups), opts);
}

void zero_grad_to_none(torch::optim::Optimizer& opt) {
  for (auto& g : opt.param_groups())
    for (auto& p : g.params()) p.mutable_grad().reset();
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return torch::zeros({});
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.norm(2));
  auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  double limit = max_norm > 0 ? max_norm : std::numeric_limits<double>::infinity();
  auto coef = torch::clamp(limit / (total + 1e-6), c10::nullopt, 1.0);
  for (auto& g : grads) g.mul_(coef);
  return total;
}

}  // namespace ropelab::train
