// The fused softmax cross-entropy (tasks/loss.h) against libtorch's log_softmax + nll_loss and
// the two label-smoothing forms: loss, gradient, nll, correct counts and ignored rows.
#include <torch/torch.h>

#include "helpers.h"
#include "tasks/loss.h"
#include "tensor_helpers.h"

namespace ropelab {
namespace {

// The reference: loss_n = a * nll_n + b * sum_c(-log p_nc) over rows whose target is not -100.
torch::Tensor reference(const torch::Tensor& logits, const torch::Tensor& target, double a,
                        double b) {
  auto lp = torch::log_softmax(logits, -1);
  auto valid = target != -100;
  auto t = target.masked_fill(valid.logical_not(), 0).unsqueeze(1);
  auto nll = -lp.gather(1, t).squeeze(1);
  auto smooth = -lp.sum(-1);
  return ((a * nll + b * smooth) * valid).sum();
}

TEST(CrossEntropy, MatchesLogSoftmaxNllWithAndWithoutSmoothing) {
  torch::manual_seed(3);
  const int64_t N = 37, V = 101;
  auto target = torch::randint(0, V, {N}, torch::kInt64);
  target.index_put_({torch::tensor({2, 5, 30})}, -100);
  const double eps = 0.1;
  struct Form {
    double a, b;
  };
  for (Form f : {Form{1.0, 0.0}, Form{1.0 - eps, eps / V},           // none; PyTorch's smoothing
                 Form{1.0 - eps - eps / (V - 1), eps / (V - 1)}}) {  // fairseq's
    auto x1 = (3.0 * torch::randn({N, V})).requires_grad_(true);
    auto x2 = x1.detach().clone().requires_grad_(true);
    auto ce = tasks::cross_entropy(x1, target, f.a, f.b);
    auto ref = reference(x2, target, f.a, f.b);
    EXPECT_NEAR(ce.loss_sum.item<double>(), ref.item<double>(), 1e-3);
    (ce.loss_sum * 0.5).backward();
    (ref * 0.5).backward();
    EXPECT_TRUE(test::close(x1.grad(), x2.grad(), 1e-6, 1e-4));
    // Ignored rows get no gradient.
    EXPECT_EQ(x1.grad()[5].abs().sum().item<double>(), 0.0);
    EXPECT_EQ(ce.targets.item<int64_t>(), N - 3);
    auto valid = target != -100;
    auto nll =
        torch::nll_loss(torch::log_softmax(x2.detach(), -1), target, {}, at::Reduction::Sum, -100);
    EXPECT_NEAR(ce.nll_sum.item<double>(), nll.item<double>(), 1e-3);
    auto correct = ((x2.detach().argmax(-1) == target) & valid).sum().item<int64_t>();
    EXPECT_EQ(ce.correct.item<int64_t>(), correct);
  }
}

// A target whose probability underflows float32 still gets a finite, exact nll.
TEST(CrossEntropy, ConfidentlyWrongRowsStayFinite) {
  auto x = torch::zeros({1, 4});
  x[0][0] = 200.0;  // p(target=3) = exp(-200): 0 in float32
  auto ce = tasks::cross_entropy(x, torch::tensor({3}, torch::kInt64), 1.0, 0.0);
  EXPECT_NEAR(ce.nll_sum.item<double>(), 200.0, 1e-3);
  EXPECT_EQ(ce.correct.item<int64_t>(), 0);
}

}  // namespace
}  // namespace ropelab
