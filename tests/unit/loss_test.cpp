// The fused softmax cross-entropy (tasks/loss.h) against libtorch's log_softmax + nll_loss and
// the two label-smoothing forms: loss, gradient, nll, correct counts and ignored rows. Each check
// runs both paths: the CPU's fused kernel and the tensor-op path that GPUs take.
#include <torch/torch.h>

#include <string>

#include "helpers.h"
#include "model/linear.h"
#include "tasks/loss.h"
#include "tensor_helpers.h"
#include "util/device.h"
#include "util/gemm.h"
#include "util/vec_bf16.h"

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

using Path = tasks::CrossEntropy (*)(const torch::Tensor&, const torch::Tensor&, double, double);

class CrossEntropyPaths : public ::testing::TestWithParam<Path> {};

TEST_P(CrossEntropyPaths, MatchesLogSoftmaxNllWithAndWithoutSmoothing) {
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
    auto ce = GetParam()(x1, target, f.a, f.b);
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
TEST_P(CrossEntropyPaths, ConfidentlyWrongRowsStayFinite) {
  auto x = torch::zeros({1, 4});
  x[0][0] = 200.0;  // p(target=3) = exp(-200): 0 in float32
  auto ce = GetParam()(x, torch::tensor({3}, torch::kInt64), 1.0, 0.0);
  EXPECT_NEAR(ce.nll_sum.item<double>(), 200.0, 1e-3);
  EXPECT_EQ(ce.correct.item<int64_t>(), 0);
}

// bf16 logits (what autocast gives the loss): the loss and nll are computed in float32 from the
// bf16 values, and the gradient comes back in bf16, equal to the float32 one rounded.
TEST_P(CrossEntropyPaths, Bf16LogitsGiveTheFloat32LossOfTheirValuesAndABf16Gradient) {
  torch::manual_seed(5);
  const int64_t N = 19, V = 67;
  auto target = torch::randint(0, V, {N}, torch::kInt64);
  target[4] = -100;
  const double a = 0.9, b = 0.1 / V;
  auto x16 = (2.0 * torch::randn({N, V})).to(torch::kBFloat16).requires_grad_(true);
  auto x32 = x16.detach().to(torch::kFloat32).requires_grad_(true);
  auto ce = GetParam()(x16, target, a, b);
  auto ref = reference(x32, target, a, b);
  EXPECT_NEAR(ce.loss_sum.item<double>(), ref.item<double>(), 1e-3);
  ce.loss_sum.backward();
  ref.backward();
  ASSERT_EQ(x16.grad().scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(test::close(x16.grad().to(torch::kFloat32), x32.grad(), 1e-2, 1e-4));
}

// With the expected gradient scale known in the forward (the trainer's 1 / targets), bf16
// logits get the same loss and, within one bf16 rounding, the same gradient: when the backward
// brings that scale, and when it brings another (then the kept gradient is rescaled). Ignored
// rows get no gradient.
TEST(CrossEntropy, TheGradientWrittenInTheForwardPassIsTheBackwardsOne) {
  torch::manual_seed(11);
  const int64_t N = 23, V = 301;
  auto target = torch::randint(0, V, {N}, torch::kInt64);
  target[3] = -100;
  const double a = 0.9, b = 0.1 / V;
  auto x0 = (3.0 * torch::randn({N, V})).to(torch::kBFloat16);
  auto grad = [&](double expected, double actual) {
    auto x = x0.clone().requires_grad_(true);
    tasks::CrossEntropy ce;
    {
      tasks::ExpectedGradScale scale(expected);
      ce = tasks::cross_entropy(x, target, a, b);
    }
    (ce.loss_sum * actual).backward();
    return std::make_pair(ce.loss_sum.item<double>(), x.grad().to(torch::kFloat32));
  };
  auto [l0, g0] = grad(0.0, 1.0 / 7);      // no expectation: the backward computes it
  auto [l1, g1] = grad(1.0 / 7, 1.0 / 7);  // the expected scale arrives
  auto [l2, g2] = grad(1.0 / 7, 2.0 / 7);  // another scale: rescaled
  EXPECT_DOUBLE_EQ(l1, l0);
  EXPECT_DOUBLE_EQ(l2, l0);
  EXPECT_TRUE(test::close(g1, g0, 1.0 / 128, 1e-6));
  EXPECT_TRUE(test::close(g2, 2 * g0, 1.0 / 64, 1e-6));
  EXPECT_EQ(g1[3].abs().max().item<float>(), 0.0F);
  EXPECT_EQ(tasks::ExpectedGradScale::current(), 0.0);  // the scope restored it
  // Where the forward wrote the gradient it kept no logits: changing them in place afterwards
  // is harmless there, and an error (a saved tensor changed) where the backward reads them.
  if (vec::bf16_rows_vectorised()) {
    for (double expected : {0.0, 1.0 / 7}) {
      auto x = x0.clone().requires_grad_(true);
      tasks::CrossEntropy ce;
      {
        tasks::ExpectedGradScale scale(expected);
        ce = tasks::cross_entropy(x, target, a, b);
      }
      x.detach().add_(1.0);
      if (expected > 0) {
        EXPECT_NO_THROW((ce.loss_sum / 7).backward());
      } else {
        EXPECT_ANY_THROW((ce.loss_sum / 7).backward());
      }
    }
  }
}

// linear_cross_entropy is cross_entropy(linear(h, w)): in training under bf16 autocast one node
// (the logits from oneDNN's bf16 gemm in float32, each row rounded to bf16 as it is read), the
// same loss, counts and gradients of h and w to bf16 rounding (the gemm may round a logit to the
// neighbouring bf16 value: its sums run in another order than libtorch's bf16 mm), rescaled
// where another gradient scale arrives; without autocast, the two calls, bit for bit.
//
// Both ways to the logits (util::bf16_products_on_mm): oneDNN's gemm in float32, half the rows
// at a time, the backward's gemms reading the kept gradient; and libtorch's bf16 mm in 512-row
// blocks (AMX), here 3 blocks, the last partial, with both gradients taken in the forward, block
// by block (also with only w's gradient wanted). Where oneDNN has no bf16 gemm (an AVX2 CPU)
// both run the widened products' blocks (512 rows at this vocabulary), as the second does.
class LinearCrossEntropyPaths : public ::testing::TestWithParam<const char*> {};

TEST_P(LinearCrossEntropyPaths, TheLinearFormIsTheLossOfTheLinearLayer) {
  if (!vec::bf16_rows_vectorised() || !util::bf16_gemm_available())
    GTEST_SKIP() << "no bf16 node here";
  test::ScopedEnv path("ROPELAB_BF16_PRODUCTS", GetParam());
  EXPECT_EQ(util::bf16_products_on_mm(), std::string(GetParam()) == "mm");
  torch::manual_seed(12);
  const int64_t N = 1100, I = 48, V = 1001;
  auto target = torch::randint(0, V, {N}, torch::kInt64);
  target[5] = -100;
  auto h0 = torch::randn({N, I}), w0 = 0.3 * torch::randn({V, I});
  const double a = 0.9, b = 0.1 / V;
  auto run = [&](bool fused, bool bf16, double actual) {
    auto h = h0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    tasks::CrossEntropy ce;
    {
      device::Autocast autocast(torch::kCPU, bf16);
      tasks::ExpectedGradScale scale(1.0 / 7);
      ce = fused ? tasks::linear_cross_entropy(h, w, target, a, b)
                 : tasks::cross_entropy(model::linear(h, w), target, a, b);
    }
    const std::string node = ce.loss_sum.grad_fn()->name();
    (ce.loss_sum * actual).backward();
    return std::make_tuple(ce, h.grad(), w.grad(), node);
  };
  auto [ref, gh_ref, gw_ref, n_ref] = run(false, true, 1.0 / 7);
  for (double actual : {1.0 / 7, 2.0 / 7}) {
    auto [ce, gh, gw, node] = run(true, true, actual);
    SCOPED_TRACE(actual);
    EXPECT_NE(node.find("LinearCrossEntropy"), std::string::npos) << node;
    EXPECT_NEAR(ce.loss_sum.item<double>(), ref.loss_sum.item<double>(),
                1e-3 * std::abs(ref.loss_sum.item<double>()));
    EXPECT_NEAR(ce.nll_sum.item<double>(), ref.nll_sum.item<double>(),
                1e-3 * std::abs(ref.nll_sum.item<double>()));
    EXPECT_EQ(ce.targets.item<int64_t>(), N - 1);
    EXPECT_NEAR(ce.correct.item<double>(), ref.correct.item<double>(), 1.0);
    const double k = actual * 7;
    EXPECT_TRUE(test::close(gh, k * gh_ref, 2.0 / 128, 1e-4));
    EXPECT_TRUE(test::close(gw, k * gw_ref, 2.0 / 128, 1e-4));
    EXPECT_EQ(gw.scalar_type(), torch::kFloat32);
  }
  {  // Only w's gradient wanted (h a constant): the same weight gradient.
    auto w = w0.clone().requires_grad_(true);
    tasks::CrossEntropy ce;
    {
      device::Autocast autocast(torch::kCPU, true);
      tasks::ExpectedGradScale scale(1.0 / 7);
      ce = tasks::linear_cross_entropy(h0, w, target, a, b);
    }
    (ce.loss_sum / 7).backward();
    EXPECT_TRUE(test::close(w.grad(), gw_ref, 2.0 / 128, 1e-4));
  }
  // No autocast: the two calls themselves.
  auto [f32_ref, gh32_ref, gw32_ref, n32_ref] = run(false, false, 1.0 / 7);
  auto [f32, gh32, gw32, n32] = run(true, false, 1.0 / 7);
  EXPECT_EQ(n32, n32_ref);
  EXPECT_EQ(f32.loss_sum.item<double>(), f32_ref.loss_sum.item<double>());
  EXPECT_TRUE(torch::equal(gh32, gh32_ref));
  EXPECT_TRUE(torch::equal(gw32, gw32_ref));
}

INSTANTIATE_TEST_SUITE_P(GemmAndMm, LinearCrossEntropyPaths, ::testing::Values("gemm", "mm"),
                         [](const ::testing::TestParamInfo<const char*>& i) {
                           return std::string(i.param);
                         });

// The two paths agree with each other to float32 rounding on the same rows.
TEST(CrossEntropy, TheGpuPathEqualsTheFusedCpuKernel) {
  torch::manual_seed(9);
  const int64_t N = 64, V = 3001;
  auto target = torch::randint(0, V, {N}, torch::kInt64);
  target[7] = -100;
  auto x1 = (4.0 * torch::randn({N, V})).requires_grad_(true);
  auto x2 = x1.detach().clone().requires_grad_(true);
  auto fused = tasks::cross_entropy(x1, target, 0.9, 0.1 / V);
  auto ops = tasks::cross_entropy_tensor_ops(x2, target, 0.9, 0.1 / V);
  EXPECT_NEAR(fused.loss_sum.item<double>(), ops.loss_sum.item<double>(),
              1e-5 * std::abs(ops.loss_sum.item<double>()));
  EXPECT_NEAR(fused.nll_sum.item<double>(), ops.nll_sum.item<double>(),
              1e-5 * std::abs(ops.nll_sum.item<double>()));
  EXPECT_EQ(fused.correct.item<int64_t>(), ops.correct.item<int64_t>());
  EXPECT_EQ(fused.targets.item<int64_t>(), N - 1);
  EXPECT_EQ(ops.targets.item<int64_t>(), N - 1);
  (fused.loss_sum / 3).backward();
  (ops.loss_sum / 3).backward();
  EXPECT_TRUE(test::close(x1.grad(), x2.grad(), 1e-7, 1e-5));
}

INSTANTIATE_TEST_SUITE_P(CpuKernelAndTensorOps, CrossEntropyPaths,
                         ::testing::Values(Path{&tasks::cross_entropy},
                                           Path{&tasks::cross_entropy_tensor_ops}),
                         [](const ::testing::TestParamInfo<Path>& i) {
                           return std::string(i.index == 0 ? "FusedCpuKernel" : "TensorOps");
                         });

}  // namespace
}  // namespace ropelab
