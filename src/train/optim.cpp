#include "train/optim.h"

#include <ATen/record_function.h>
#include <torch/torch.h>

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "compat/torch_compat.h"
#include "model/init.h"
#include "util/vec_kernels.h"

namespace ropelab::train {

std::unique_ptr<FusedAdamW> make_optimizer(torch::nn::Module& model, const config::TrainConfig& t) {
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
  return std::make_unique<FusedAdamW>(std::move(groups), opts);
}

namespace {

bool fp32_cpu_dense(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous() &&
         !t.is_sparse();
}

bool fp32_cuda_dense(const torch::Tensor& t) {
  return t.defined() && t.is_cuda() && t.scalar_type() == torch::kFloat32 && !t.is_sparse();
}

}  // namespace

torch::optim::AdamWParamState& FusedAdamW::advance(const torch::Tensor& p) {
  const auto key = compat::optimizer_state_key(state_, p.unsafeGetTensorImpl());
  auto it = state_.find(key);
  if (it == state_.end()) {
    auto st = std::make_unique<torch::optim::AdamWParamState>();
    st->step(0);
    st->exp_avg(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    st->exp_avg_sq(torch::zeros_like(p, torch::MemoryFormat::Preserve));
    it = state_.emplace(key, std::move(st)).first;
  }
  auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
  st.step(st.step() + 1);
  return st;
}

bool FusedAdamW::step_on_device() {
  if (!compat::has_fused_adamw()) return false;
  for (auto& group : param_groups()) {
    if (static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (auto& p : group.params())
      if (p.grad().defined() && (!fp32_cuda_dense(p) || !fp32_cuda_dense(p.grad()) ||
                                 p.device() != group.params()[0].device()))
        return false;
  }
  torch::NoGradGuard no_grad;
  for (auto& group : param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    std::vector<torch::Tensor> ps, gs, ms, vs, steps;
    std::map<int64_t, torch::Tensor> step_of;  // one device scalar per distinct step count
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& st = advance(p);
      auto& s = step_of[st.step()];
      if (!s.defined())
        s = torch::full({}, static_cast<double>(st.step()), p.options().dtype(torch::kFloat32));
      ps.push_back(p);
      gs.push_back(p.grad());
      ms.push_back(st.exp_avg());
      vs.push_back(st.exp_avg_sq());
      steps.push_back(s);
    }
    if (ps.empty()) continue;
    compat::fused_adamw(ps, gs, ms, vs, steps, o.lr(), std::get<0>(o.betas()),
                        std::get<1>(o.betas()), o.weight_decay(), o.eps());
  }
  return true;
}

torch::Tensor FusedAdamW::step(LossClosure closure) {
  torch::Tensor loss;
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  step_with({});
  return loss;
}

void FusedAdamW::step_scaled(const torch::Tensor& grad_scale) { step_with(grad_scale); }

bool FusedAdamW::fusable_on_cpu() {
  for (auto& group : param_groups()) {
    if (static_cast<torch::optim::AdamWOptions&>(group.options()).amsgrad()) return false;
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      if (!fp32_cpu_dense(p) || !fp32_cpu_dense(p.grad())) return false;
      auto it = state_.find(compat::optimizer_state_key(state_, p.unsafeGetTensorImpl()));
      if (it != state_.end()) {
        auto& st = static_cast<torch::optim::AdamWParamState&>(*it->second);
        if (!fp32_cpu_dense(st.exp_avg()) || !fp32_cpu_dense(st.exp_avg_sq())) return false;
      }
    }
  }
  return true;
}

void FusedAdamW::step_with(const torch::Tensor& grad_scale) {
  torch::NoGradGuard no_grad;
  if (!fusable_on_cpu()) {  // the device's fused kernel or libtorch's step: gradients scaled first
    if (grad_scale.defined())
      for (auto& group : param_groups())
        for (auto& p : group.params())
          if (p.grad().defined()) p.mutable_grad().mul_(grad_scale);
    if (!step_on_device()) torch::optim::AdamW::step();
    return;
  }
  RECORD_FUNCTION("ropelab::adamw", std::vector<c10::IValue>());
  const float scale = grad_scale.defined() ? grad_scale.item<float>() : 1.0F;
  for (auto& group : param_groups()) {
    auto& o = static_cast<torch::optim::AdamWOptions&>(group.options());
    for (auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      auto& st = advance(p);
      const double b1 = std::get<0>(o.betas()), b2 = std::get<1>(o.betas());
      const double bc1 = 1 - std::pow(b1, static_cast<double>(st.step()));
      const double bc2 = 1 - std::pow(b2, static_cast<double>(st.step()));
      vec::AdamWScalars k{};
      k.decay = static_cast<float>(o.weight_decay() != 0 ? 1 - o.lr() * o.weight_decay() : 1.0);
      k.beta1 = static_cast<float>(b1);
      k.beta2 = static_cast<float>(b2);
      k.one_minus_beta1 = static_cast<float>(1 - b1);
      k.one_minus_beta2 = static_cast<float>(1 - b2);
      k.sqrt_bc2 = static_cast<float>(std::sqrt(bc2));
      k.eps = static_cast<float>(o.eps());
      k.neg_step = static_cast<float>(-(o.lr() / bc1));
      k.grad_scale = scale;
      float* pp = p.data_ptr<float>();
      const float* gp = p.grad().data_ptr<float>();
      float* mp = st.exp_avg().data_ptr<float>();
      float* vp = st.exp_avg_sq().data_ptr<float>();
      at::parallel_for(0, p.numel(), 16384, [&](int64_t b, int64_t e) {
        vec::adamw_update(pp + b, gp + b, mp + b, vp + b, e - b, k);
      });
    }
  }
}

void zero_grad_to_none(torch::optim::Optimizer& opt) {
  for (auto& g : opt.param_groups())
    for (auto& p : g.params()) p.mutable_grad().reset();
}

namespace {

// The squared L2 norm of float32 CPU gradients in one parallel pass: pieces of 64K elements
// (vec::sum_squares in float32 lanes), summed in double in a fixed order (the same bits on any
// number of threads). libtorch's way is a norm op per parameter, then a stack and another norm:
// ~70 ops for the LM bench model.
double cpu_squared_norm(const std::vector<torch::Tensor>& grads) {
  constexpr int64_t kPiece = 65536;
  std::vector<std::pair<const float*, int64_t>> pieces;
  for (const auto& g : grads)
    for (int64_t b = 0; b < g.numel(); b += kPiece)
      pieces.emplace_back(g.data_ptr<float>() + b, std::min(kPiece, g.numel() - b));
  std::vector<double> sums(pieces.size());
  at::parallel_for(0, static_cast<int64_t>(pieces.size()), 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      sums[static_cast<size_t>(i)] = vec::sum_squares(pieces[static_cast<size_t>(i)].first,
                                                      pieces[static_cast<size_t>(i)].second);
  });
  double total = 0;
  for (double s : sums) total += s;
  return total;
}

bool cpu_float_contiguous(const torch::Tensor& t) {
  return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.is_contiguous();
}

}  // namespace

ClipFactor clip_factor(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard ng;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params)
    if (p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return {torch::zeros({}), torch::ones({})};
  const double limit = max_norm > 0 ? max_norm : std::numeric_limits<double>::infinity();
  if (std::all_of(grads.begin(), grads.end(), cpu_float_contiguous)) {
    const auto total = static_cast<float>(std::sqrt(cpu_squared_norm(grads)));
    const double factor = std::min(1.0, limit / (static_cast<double>(total) + 1e-6));
    return {torch::scalar_tensor(total), torch::scalar_tensor(static_cast<float>(factor))};
  }
  std::vector<torch::Tensor> norms;
  norms.reserve(grads.size());
  for (const auto& g : grads) norms.push_back(g.norm(2));
  auto total = norms.size() == 1 ? norms[0] : torch::stack(norms).norm(2);
  return {total, torch::clamp(limit / (total + 1e-6), c10::nullopt, 1.0)};
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard ng;
  auto clip = clip_factor(params, max_norm);
  for (const auto& p : params)
    if (p.grad().defined()) p.mutable_grad().mul_(clip.factor);
  return clip.norm;
}

}  // namespace ropelab::train
