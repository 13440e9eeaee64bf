#include "tasks/loss.h"

#include <torch/autograd.h>

namespace ropelab::tasks {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Inputs: logits [N, V] float32, target [N]; outputs: loss_sum (differentiable), nll_N and
// argmax_N (not).
struct FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& target, double a, double b) {
    auto valid = target != -100;
    auto safe_t = target.masked_fill(valid.logical_not(), 0).unsqueeze(1);  // [N, 1]
    auto p = torch::softmax(logits, -1);
    auto [p_max, arg] = p.max(-1);
    // lse = x_c - log p_c at c = argmax: exact, and p_max >= 1/V never underflows.
    auto lse = logits.gather(1, arg.unsqueeze(1)).squeeze(1) - p_max.log();
    auto nll = (lse - logits.gather(1, safe_t).squeeze(1)) * valid;
    auto loss = a * nll;
    if (b != 0) {
      auto v = static_cast<double>(logits.size(1));
      loss = loss + b * (v * lse - logits.sum(-1)) * valid;
    }
    ctx->save_for_backward({p, safe_t, valid});
    ctx->saved_data["a"] = a;
    ctx->saved_data["b"] = b;
    ctx->mark_non_differentiable({nll, arg});
    return {loss.sum(), nll, arg};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    double a = ctx->saved_data["a"].toDouble(), b = ctx->saved_data["b"].toDouble();
    // The softmax is not needed after this: it becomes the gradient in place.
    auto grad = saved[0];
    if (b != 0) grad.sub_(b);
    grad.scatter_add_(1, saved[1], torch::full(saved[1].sizes(), -a, grad.options()));
    grad.mul_(saved[2].unsqueeze(1).to(grad.scalar_type()) * grad_out[0]);
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace

CrossEntropy cross_entropy(const torch::Tensor& logits_NV, const torch::Tensor& target_N, double a,
                           double b) {
  auto out = FusedCrossEntropy::apply(logits_NV.to(torch::kFloat32), target_N, a, b);
  CrossEntropy r;
  r.loss_sum = out[0];
  torch::NoGradGuard ng;
  auto valid = target_N != -100;
  r.nll_sum = out[1].sum();
  r.targets = valid.sum();
  r.correct = ((out[2] == target_N) & valid).sum();
  return r;
}

}  // namespace ropelab::tasks
