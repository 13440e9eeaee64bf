#include "model/init.h"

#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>

#include <stdexcept>

#include "model/position/position.h"

namespace ropelab::model {

namespace {

ParamRole role_in(const torch::nn::Module& owner, const torch::Tensor& t, const std::string& local,
                  const std::string& full) {
  if (const auto* ln = dynamic_cast<const torch::nn::LayerNormImpl*>(&owner))
    return t.is_same(ln->weight) ? ParamRole::kNormGain : ParamRole::kNormShift;
  if (const auto* lin = dynamic_cast<const torch::nn::LinearImpl*>(&owner))
    return t.is_same(lin->weight) ? ParamRole::kMatrix : ParamRole::kBias;
  if (dynamic_cast<const torch::nn::EmbeddingImpl*>(&owner) != nullptr) return ParamRole::kMatrix;
  if (const auto* own = dynamic_cast<const OwnsParameters*>(&owner)) return own->role_of(local);
  if (dynamic_cast<const PositionModuleImpl*>(&owner) != nullptr) return ParamRole::kPosition;
  throw std::logic_error("parameter " + full + " belongs to a module type (" + owner.name() +
                         ") with no initialisation rule; see model/init.h");
}

void collect(const torch::nn::Module& m, const std::string& prefix, std::vector<RoledParam>& out) {
  for (const auto& p : m.named_parameters(/*recurse=*/false)) {
    std::string full = prefix + p.key();
    out.push_back({full, p.value(), role_in(m, p.value(), p.key(), full)});
  }
  for (const auto& c : m.named_children()) collect(*c.value(), prefix + c.key() + ".", out);
}

}  // namespace

std::vector<RoledParam> param_roles(const torch::nn::Module& m) {
  std::vector<RoledParam> out;
  collect(m, "", out);
  return out;
}

bool decays(ParamRole r) { return r == ParamRole::kMatrix; }

void init_weights(torch::nn::Module& m, double std) {
  torch::NoGradGuard ng;
  for (auto& p : param_roles(m)) {
    switch (p.role) {
      case ParamRole::kMatrix:
      case ParamRole::kPosition:
        p.tensor.normal_(0.0, std);
        break;
      case ParamRole::kNormGain:
        p.tensor.fill_(1.0);
        break;
      case ParamRole::kBias:
      case ParamRole::kNormShift:
        p.tensor.zero_();
        break;
      case ParamRole::kOwnInit:
        break;
    }
  }
}

}  // namespace ropelab::model
