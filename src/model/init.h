// What each parameter is, decided by the type of the module that owns it, never by its name:
// a renamed module cannot silently change initialisation or weight decay.
//
//   Linear / Embedding weight      kMatrix    normal(0, init_std), decayed
//   Linear bias                    kBias      zeros, not decayed
//   LayerNorm weight / bias        kNormGain / kNormShift   ones / zeros, not decayed
//   position modules' parameters   kPosition  normal(0, init_std), not decayed (T5, learned)
//   other modules with their own parameters implement OwnsParameters (e.g. the MLM head's
//   output bias, or kOwnInit: Kerple's kernel parameters and FIRE's c and threshold, which
//   keep the values their module gave them and are not decayed); a parameter no rule covers
//   is a programming error, reported at start-up.
//
// BERT / GPT-2 initialisation; decoupled weight decay on matrices only (AdamW practice).
#pragma once
#include <torch/nn/module.h>

#include <string>
#include <vector>

namespace ropelab::model {

enum class ParamRole { kMatrix, kBias, kNormGain, kNormShift, kPosition, kOwnInit };

// Implemented by our modules that register parameters of their own (not through a Linear,
// Embedding or LayerNorm child).
class OwnsParameters {
 public:
  virtual ~OwnsParameters() = default;
  virtual ParamRole role_of(const std::string& local_name) const = 0;
};

struct RoledParam {
  std::string name;  // full dotted path
  torch::Tensor tensor;
  ParamRole role;
};

// Every parameter of `m`, in named_parameters() order, with its role.
std::vector<RoledParam> param_roles(const torch::nn::Module& m);
bool decays(ParamRole r);
// Initialises every parameter by its role (see above).
void init_weights(torch::nn::Module& m, double std);

}  // namespace ropelab::model
