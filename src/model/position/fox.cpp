#include "model/position/fox.h"

#include <torch/nn/functional.h>
#include <torch/nn/modules/linear.h>

#include "config/schema.h"
#include "model/linear.h"

namespace ropelab::model {

namespace {
config::RopeConfig rope_of(const config::FoxConfig& c) {
  config::RopeConfig r;
  r.base = c.base;
  return r;
}
}  // namespace

FoxImpl::FoxImpl(const config::FoxConfig& c, const PositionDims& d)
    : RotaryImpl(rope_of(c), d), rope_(c.rope) {
  gates = register_module("gates", torch::nn::ModuleList());
  for (int64_t i = 0; i < d.n_layers; ++i)
    gates->push_back(torch::nn::Linear(d.d_model, d.n_heads));
}

torch::Tensor FoxImpl::rotate_q(const torch::Tensor& x, const PosCache& c) {
  return rope_ ? RotaryImpl::rotate_q(x, c) : x;
}

torch::Tensor FoxImpl::rotate_k(const torch::Tensor& x, const PosCache& c) {
  return rope_ ? RotaryImpl::rotate_k(x, c) : x;
}

std::optional<PositionModuleImpl::Rotation> FoxImpl::rotation(const PosCache& c,
                                                              int64_t width) const {
  return rope_ ? RotaryImpl::rotation(c, width) : std::nullopt;
}

torch::Tensor FoxImpl::log_forget(const torch::Tensor& x_BTD, int64_t layer) {
  const auto* gate = gates[static_cast<size_t>(layer)]->as<torch::nn::Linear>();
  auto logit_BTN = model::linear(x_BTD, gate->weight, gate->bias);
  return torch::nn::functional::logsigmoid(logit_BTN.to(torch::kFloat32)).transpose(1, 2);
}

ScoreBias FoxImpl::content_bias(const LayerContent& in, const PosCache&) {
  auto log_f_BNT = log_forget(in.x_BTD, in.layer);
  // Context parallelism: the whole sequence's gates, so that each row's running sum starts from
  // the sequence's first token (the score bias is the whole sequence's: ring attention).
  if (in.whole_sequence) log_f_BNT = in.whole_sequence(log_f_BNT);
  auto c_BNT = log_f_BNT.cumsum(-1);
  torch::Tensor c_BNS = c_BNT;
  if (in.state != nullptr) {
    // Decoding: the new steps continue the cached keys' running sum.
    if (in.state->defined()) {
      c_BNT = c_BNT + in.state->narrow(2, in.state->size(2) - 1, 1);
      c_BNS = torch::cat({*in.state, c_BNT}, 2);
    } else {
      c_BNS = c_BNT;
    }
    *in.state = c_BNS;
  }
  // log F_ij = c_i - c_j (a row and a column term: tiled attention never stores the T x S
  // whole); entries with j > i are masked by causality.
  ScoreBias b;
  b.T = c_BNT.size(2);
  b.S = c_BNS.size(2);
  b.row_BNT = c_BNT;
  b.col_BNS = -c_BNS;
  return b;
}

PositionModule make_position(const config::FoxConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<FoxImpl>(c, d)));
}

}  // namespace ropelab::model
