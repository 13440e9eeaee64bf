// The fused CPU kernels against their unfused compositions (the same ops, one at a time):
// dropout_add and act_dropout (model/dropout.h) bit for bit, FusedAdamW (train/optim.h) against
// libtorch's AdamW to float rounding, the dense layers on oneDNN's sgemm (model/linear.h)
// against libtorch's linear, and the thread settings that every pool must follow.
#include <ATen/record_function.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <vector>

#include "compat/torch_compat.h"
#include "helpers.h"
#include "lab/step_split.h"
#include "model/attention.h"
#include "model/bf16_attention.h"
#include "model/dropout.h"
#include "model/linear.h"
#include "model/norm.h"
#include "model/position/rotary.h"
#include "tasks/loss.h"
#include "tensor_helpers.h"
#include "train/optim.h"
#include "util/amx.h"
#include "util/device.h"
#include "util/float_rows.h"
#include "util/gemm.h"
#include "util/platform.h"
#include "util/vec_bf16.h"
#include "util/vec_kernels.h"
#include "util/vec_math.h"

namespace ropelab {
namespace {

struct Grads {
  torch::Tensor y, gx, gh;
};

// y = f(x, h) under a fixed seed, then the gradients of sum(y * w) for a fixed w.
template <class F>
Grads forward_backward(const F& f, const torch::Tensor& x0, const torch::Tensor& h0,
                       uint64_t seed) {
  auto x = x0.defined() ? x0.detach().clone().requires_grad_(true) : torch::Tensor();
  auto h = h0.detach().clone().requires_grad_(true);
  torch::manual_seed(seed);
  auto y = f(x, h);
  torch::manual_seed(seed + 1);
  auto w = torch::randn(y.sizes(), torch::kFloat32).to(y.scalar_type());
  (y * w).sum().backward();
  return {y.detach(), x0.defined() ? x.grad() : torch::Tensor(), h.grad()};
}

void expect_same(const Grads& a, const Grads& b) {
  EXPECT_EQ(a.y.scalar_type(), b.y.scalar_type());
  EXPECT_TRUE(torch::equal(a.y, b.y)) << test::close(a.y, b.y, 0, 0).message();
  if (a.gx.defined()) {
    ASSERT_TRUE(b.gx.defined());
    EXPECT_TRUE(torch::equal(a.gx, b.gx)) << test::close(a.gx, b.gx, 0, 0).message();
  }
  EXPECT_EQ(a.gh.scalar_type(), b.gh.scalar_type());
  EXPECT_TRUE(torch::equal(a.gh, b.gh)) << test::close(a.gh, b.gh, 0, 0).message();
}

// x + dropout(h): fp32 residual with fp32 or bf16 branch (as under bf16 autocast), odd sizes
// (the last element's draw is half a hash).
TEST(Fused, DropoutAddMatchesTheUnfusedOpsBitForBit) {
  for (auto h_type : {torch::kFloat32, torch::kBFloat16}) {
    for (int64_t n : {1, 7, 4096 * 3 + 1}) {
      auto x = torch::randn({2, n});
      auto h = torch::randn({2, n}).to(h_type);
      auto fused = forward_backward(
          [](auto& a, auto& b) { return model::dropout_add(a, b, 0.1, true); }, x, h, 11);
      auto plain = forward_backward(
          [](auto& a, auto& b) { return a + model::dropout(b, 0.1, true); }, x, h, 11);
      SCOPED_TRACE(std::string(c10::toString(h_type)) + " n=" + std::to_string(n));
      expect_same(fused, plain);
      // About 10% of the branch is dropped: its gradient is exactly 0 there.
      double dropped = (plain.gh == 0).to(torch::kFloat64).mean().item<double>();
      if (n > 1000) {
        EXPECT_NEAR(dropped, 0.1, 0.01);
      }
    }
  }
  // Not training, or p = 0: exactly x + h.
  auto x = torch::randn({3, 5}), h = torch::randn({3, 5});
  EXPECT_TRUE(torch::equal(model::dropout_add(x, h, 0.1, false), x + h));
  EXPECT_TRUE(torch::equal(model::dropout_add(x, h, 0.0, true), x + h));
}

// dropout(act(h)): ReLU bit for bit; GELU (vectorised, util/vec_math.h) within 1e-6 of the
// exact GELU (computed in float64) in float32 and within one bf16 rounding in bf16. The masks
// are the same: the dropped elements and their zero gradients coincide exactly. (The reference
// is float64 because libtorch's float32 GELU changed between 1.13 and 2.6: 2.6's is 3e-3
// relative off in the tail, at x = -4.)
TEST(Fused, ActDropoutMatchesTheUnfusedOps) {
  for (auto act :
       {config::Activation::kGelu, config::Activation::kGeluTanh, config::Activation::kRelu}) {
    for (auto type : {torch::kFloat32, torch::kBFloat16}) {
      auto h = (3 * torch::randn({3, 5001})).to(type);
      auto fused = forward_backward(
          [&](auto&, auto& b) { return model::act_dropout(b, act, 0.2, true); }, {}, h, 5);
      auto plain = forward_backward(
          [&](auto&, auto& b) {
            auto a = act == config::Activation::kGelu
                         ? torch::gelu(b.to(torch::kFloat64)).to(b.scalar_type())
                     : act == config::Activation::kGeluTanh
                         ? torch::gelu(b.to(torch::kFloat64), "tanh").to(b.scalar_type())
                         : torch::relu(b);
            return model::dropout(a, 0.2, true);
          },
          {}, h, 5);
      SCOPED_TRACE(std::string(config::to_string(act)) + " " + c10::toString(type));
      if (act == config::Activation::kRelu) {
        expect_same(fused, plain);
        continue;
      }
      const double tol = type == torch::kFloat32 ? 1e-6 : 1e-2;
      EXPECT_EQ(fused.y.scalar_type(), type);
      EXPECT_TRUE(test::close(fused.y, plain.y, tol, tol));
      EXPECT_TRUE(test::close(fused.gh, plain.gh, tol, tol));
      // The same elements dropped. (Below x = -5 the float32 GELU of the erf form rounds
      // 1 + erf(x / sqrt 2) to 0, where the float64 reference still has a tiny value.)
      auto live = h.abs() < 5;
      EXPECT_TRUE(torch::equal((fused.y == 0) & live, (plain.y == 0) & live) ||
                  type != torch::kFloat32);
      // About 20% dropped: measured on the forward output where the activation is not 0. (The
      // input gradient has about 2% more exact zeros at 3 intra-op threads, from libtorch's side
      // of the path; ropelab's masks are the same at every thread count.)
      auto active = (act == config::Activation::kRelu ? torch::relu(h) : torch::gelu(h)) != 0;
      double dropped = ((plain.y == 0) & active).sum().item<double>() / active.sum().item<double>();
      EXPECT_NEAR(dropped, 0.2, 0.02);
    }
  }
  auto h = torch::randn({4, 4});
  EXPECT_TRUE(
      torch::equal(model::act_dropout(h, config::Activation::kGelu, 0.1, false), torch::gelu(h)));
  EXPECT_TRUE(torch::equal(model::act_dropout(h, config::Activation::kGeluTanh, 0.1, false),
                           torch::gelu(h, "tanh")));
}

// The vectorised GELU and its derivative against the exact (erf) GELU in float64 (each alone,
// and both from one call), and its tanh form against tanh.
TEST(Fused, VectorisedGeluMatchesTheExactGelu) {
  auto x = torch::linspace(-12, 12, 20001, torch::kFloat64).to(torch::kFloat32);
  auto y = torch::empty_like(x), d = torch::empty_like(x);
  auto y_ref = torch::empty({x.numel()}, torch::kFloat64), d_ref = torch::empty_like(y_ref);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float xf = x[i].item<float>();
    y[i] = vec::gelu_approx(xf);
    d[i] = vec::gelu_grad_approx(xf);
    const double xd = xf, cdf = 0.5 * (1 + std::erf(xd / std::sqrt(2.0)));
    y_ref[i] = xd * cdf;
    d_ref[i] = cdf + xd * std::exp(-0.5 * xd * xd) / std::sqrt(2 * M_PI);
  }
  EXPECT_TRUE(test::close(y, y_ref, 1e-6, 3e-7));
  EXPECT_TRUE(test::close(d, d_ref, 1e-6, 3e-7));
  // Both at once (one exp shared): GELU's very bits, and the derivative as close.
  auto d_both = torch::empty_like(x);
  for (int64_t i = 0; i < x.numel(); ++i) {
    float g = 0;
    const float xf = x[i].item<float>();
    EXPECT_EQ(vec::gelu_and_grad_approx(xf, &g), y[i].item<float>()) << xf;
    d_both[i] = g;
  }
  EXPECT_TRUE(test::close(d_both, d_ref, 1e-6, 3e-7));
  // The tanh form (GPT-2's gelu_new) and its derivative, from tanh in float64.
  for (int64_t i = 0; i < x.numel(); ++i) {
    const float xf = x[i].item<float>();
    y[i] = vec::gelu_tanh_approx(xf);
    d[i] = vec::gelu_tanh_grad_approx(xf);
    const double xd = xf, c = std::sqrt(2 / M_PI);
    const double t = std::tanh(c * (xd + 0.044715 * xd * xd * xd));
    y_ref[i] = 0.5 * xd * (1 + t);
    d_ref[i] = 0.5 * (1 + t) + 0.5 * xd * (1 - t * t) * c * (1 + 3 * 0.044715 * xd * xd);
  }
  EXPECT_TRUE(test::close(y, y_ref, 1e-6, 3e-7));
  EXPECT_TRUE(test::close(d, d_ref, 1e-6, 3e-7));
  // Far out, where sigmoid(2u) is 0 or 1 in float32: finite, and 0 or x and 0 or 1 (the
  // derivative once overflowed to inf below x = -11 on Debian 13's build).
  for (float v : {-1e4F, -100.0F, -30.0F, -13.0F, 13.0F, 30.0F, 100.0F, 1e4F}) {
    EXPECT_EQ(vec::gelu_tanh_approx(v), v < 0 ? 0.0F : v) << v;
    EXPECT_EQ(vec::gelu_tanh_grad_approx(v), v < 0 ? 0.0F : 1.0F) << v;
  }
  EXPECT_EQ(vec::exp_approx(-1e30F), 0.0F);
  EXPECT_NEAR(vec::exp_approx(1.0F), std::exp(1.0F), 1e-6);
}

// FusedAdamW = libtorch's AdamW: the same parameters, moments and step count after several
// steps with weight decay on one group and none on the other, up to float rounding (libtorch
// may fuse a multiply-add where the fused loop rounds twice, or the reverse).
TEST(Fused, AdamWMatchesLibtorchAdamW) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> init{torch::randn({37, 19}), torch::randn({19}),
                                  torch::randn({100000})};
  auto params = [&] {
    std::vector<torch::Tensor> ps;
    for (const auto& t : init) ps.push_back(t.clone().requires_grad_(true));
    return ps;
  };
  auto a = params(), b = params();
  auto groups = [](std::vector<torch::Tensor> ps) {
    auto opts = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.98}).eps(1e-8);
    std::vector<torch::optim::OptimizerParamGroup> g;
    g.emplace_back(std::vector<torch::Tensor>{ps[0], ps[2]},
                   std::make_unique<torch::optim::AdamWOptions>(
                       torch::optim::AdamWOptions(opts).weight_decay(0.1)));
    g.emplace_back(std::vector<torch::Tensor>{ps[1]},
                   std::make_unique<torch::optim::AdamWOptions>(
                       torch::optim::AdamWOptions(opts).weight_decay(0.0)));
    return std::make_pair(std::move(g), opts);
  };
  auto [ga, oa] = groups(a);
  auto [gb, ob] = groups(b);
  train::FusedAdamW fused(std::move(ga), oa);
  torch::optim::AdamW plain(std::move(gb), ob);
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      auto g = torch::randn(a[i].sizes()) * (step + 1);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    fused.step();
    plain.step();
  }
  for (size_t i = 0; i < a.size(); ++i) {
    // Moments are sums with cancellation: a few float ulps of the gradient's scale apart.
    EXPECT_TRUE(test::close(a[i], b[i], 1e-5, 1e-6)) << "parameter " << i;
    EXPECT_FALSE(torch::equal(a[i], init[i]));  // it moved
    auto key = compat::optimizer_state_key(fused.state(), a[i].unsafeGetTensorImpl());
    auto key_b = compat::optimizer_state_key(plain.state(), b[i].unsafeGetTensorImpl());
    auto& sa = static_cast<torch::optim::AdamWParamState&>(*fused.state().at(key));
    auto& sb = static_cast<torch::optim::AdamWParamState&>(*plain.state().at(key_b));
    EXPECT_EQ(sa.step(), 6);
    EXPECT_EQ(sa.step(), sb.step());
    EXPECT_TRUE(test::close(sa.exp_avg(), sb.exp_avg(), 1e-5, 1e-6)) << "exp_avg " << i;
    EXPECT_TRUE(test::close(sa.exp_avg_sq(), sb.exp_avg_sq(), 1e-5, 1e-6)) << "exp_avg_sq " << i;
  }
}

// clip_factor's global norm of float32 CPU gradients (one parallel pass, summed in double)
// against float64 norms: within float32 rounding; the same bits on 1 and 2 threads; gradients
// that are not contiguous float32 take libtorch's norms (the same value to its float32 sums); the
// factor is min(1, max_norm / (norm + 1e-6)), 1 without clipping.
TEST(Fused, ClipFactorIsTheGlobalNorm) {
  torch::manual_seed(3);
  std::vector<torch::Tensor> ps;
  for (auto sizes : {std::vector<int64_t>{37, 19}, {70001}, {300, 700}, {5}}) {
    ps.push_back(torch::zeros(sizes).requires_grad_(true));
    ps.back().mutable_grad() = torch::randn(sizes) * 0.01;
  }
  ps.push_back(torch::zeros({4}).requires_grad_(true));  // no gradient: left out
  double want_sq = 0;
  for (const auto& p : ps)
    if (p.grad().defined()) want_sq += p.grad().to(torch::kFloat64).pow(2).sum().item<double>();
  const double want = std::sqrt(want_sq);
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  auto one = train::clip_factor(ps, 0.5);
  at::set_num_threads(2);
  auto two = train::clip_factor(ps, 0.5);
  at::set_num_threads(threads);
  EXPECT_EQ(one.norm.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(torch::equal(one.norm, two.norm));
  EXPECT_NEAR(one.norm.item<double>(), want, 1e-6 * want);
  EXPECT_NEAR(one.factor.item<double>(), 0.5 / (want + 1e-6), 1e-6);
  EXPECT_EQ(train::clip_factor(ps, 0).factor.item<float>(), 1.0F);
  EXPECT_EQ(train::clip_factor(ps, 1e9).factor.item<float>(), 1.0F);
  ps[2].mutable_grad() = ps[2].grad().t().contiguous().t();  // a transposed layout: libtorch's
  auto mixed = train::clip_factor(ps, 0.5);                  // float32 sums: 1.1e-6 off here
  EXPECT_NEAR(mixed.norm.item<double>(), want, 1e-5 * want);
}

// The clipping folded into the update (FusedAdamW::step_scaled with clip_factor's factor) moves
// the parameters and moments to the bit as clip_grad_norm (the gradients scaled in place) then
// step(), with the factor below 1 (clipped) and at 1 (under the limit); the gradients stay as
// they were.
TEST(Fused, AdamWTakesTheClippingFactorAsItReads) {
  for (double max_norm : {0.5, 1e6}) {
    SCOPED_TRACE(::testing::Message() << "max_norm " << max_norm);
    torch::manual_seed(1);
    std::vector<torch::Tensor> init{torch::randn({37, 19}), torch::randn({70001})};
    auto make = [&] {
      std::vector<torch::Tensor> ps;
      for (const auto& t : init) ps.push_back(t.clone().requires_grad_(true));
      return ps;
    };
    auto a = make(), b = make();
    auto opts = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.98}).eps(1e-8).weight_decay(0.1);
    train::FusedAdamW folded(a, opts), scaled(b, opts);
    for (int step = 0; step < 3; ++step) {
      for (size_t i = 0; i < a.size(); ++i) {
        auto g = torch::randn(a[i].sizes()) * 0.01 * (step + 1);
        a[i].mutable_grad() = g.clone();
        b[i].mutable_grad() = g.clone();
      }
      auto clip = train::clip_factor(a, max_norm);
      auto norm = train::clip_grad_norm(b, max_norm);
      EXPECT_TRUE(torch::equal(clip.norm, norm));
      EXPECT_EQ(clip.factor.item<float>() < 1, max_norm < 1);
      folded.step_scaled(clip.factor);
      scaled.step();
      if (max_norm < 1) {  // a's gradients stay unscaled
        EXPECT_FALSE(torch::equal(a[0].grad(), b[0].grad()));
      }
    }
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_TRUE(torch::equal(a[i], b[i])) << "parameter " << i;
      auto& sa = static_cast<torch::optim::AdamWParamState&>(*folded.state().at(
          compat::optimizer_state_key(folded.state(), a[i].unsafeGetTensorImpl())));
      auto& sb = static_cast<torch::optim::AdamWParamState&>(*scaled.state().at(
          compat::optimizer_state_key(scaled.state(), b[i].unsafeGetTensorImpl())));
      EXPECT_TRUE(torch::equal(sa.exp_avg(), sb.exp_avg())) << "exp_avg " << i;
      EXPECT_TRUE(torch::equal(sa.exp_avg_sq(), sb.exp_avg_sq())) << "exp_avg_sq " << i;
    }
  }
}

// masked_softmax = softmax(scores.float() + bias + mask).to(out): values and the gradients of
// scores and bias, for fp32 and bf16 scores, broadcast bias and mask, a fully masked row (it
// averages, as the unfused ops do), and odd lengths (vector tails); with a learned bias and with
// a fixed one (bf16 then keeps its bf16 output for the backward, util/vec_bf16.h).
TEST(Fused, MaskedSoftmaxMatchesTheUnfusedOps) {
  for (auto type : {torch::kFloat32, torch::kBFloat16}) {
    for (int64_t S : {1, 7, 257})
      for (bool bias_grad : {true, false}) {
        const int64_t B = 2, N = 3, T = 5;
        torch::manual_seed(S);
        auto scores0 = (3 * torch::randn({B, N, T, S})).to(type);
        auto bias0 = torch::randn({1, N, T, S});
        auto mask = torch::zeros({B, 1, T, S}).masked_fill_(torch::rand({B, 1, T, S}) < 0.3, -1e30);
        mask.select(0, 1).select(1, 2).fill_(-1e30);  // batch 1, query 2 sees no key
        auto w = torch::randn({B, N, T, S}).to(type);
        auto go = [&](bool fused) {
          auto sc = scores0.clone().requires_grad_(true);
          auto bi = bias0.clone().requires_grad_(bias_grad);
          auto y = fused ? model::masked_softmax(sc, bi, mask, type)
                         : torch::softmax(sc.to(torch::kFloat32) + bi + mask, -1).to(type);
          (y.to(torch::kFloat32) * w.to(torch::kFloat32)).sum().backward();
          return std::make_tuple(y.detach(), sc.grad(), bi.grad());
        };
        auto [y1, gs1, gb1] = go(true);
        auto [y0, gs0, gb0] = go(false);
        SCOPED_TRACE(std::string(c10::toString(type)) + " S=" + std::to_string(S) + " bias_grad " +
                     std::to_string(bias_grad));
        double tol = type == torch::kFloat32 ? 1e-5 : 1e-2;  // bf16: one rounding of the output
        EXPECT_EQ(y1.scalar_type(), type);
        EXPECT_TRUE(test::close(y1, y0, tol, 1e-7));
        EXPECT_TRUE(test::close(gs1, gs0, tol, 1e-6));
        EXPECT_EQ(gb1.defined(), bias_grad);
        if (bias_grad) {
          EXPECT_TRUE(test::close(gb1, gb0, tol, 1e-6));
        }
        // Masked keys get exactly 0 (in a row that sees some key); every row sums to 1.
        auto y32 = y1.to(torch::kFloat32);
        auto masked = mask < -1;
        auto zero = (masked & masked.all(-1, true).logical_not()).expand({B, N, T, S});
        if (zero.any().item<bool>()) {
          EXPECT_EQ(y32.masked_select(zero).abs().max().item<float>(), 0.0F);
        }
        EXPECT_TRUE(test::close(y32.sum(-1), torch::ones({B, N, T}), tol, tol));
      }
  }
  // Neither bias nor mask: plain softmax.
  auto x = torch::randn({1, 2, 3, 33});
  EXPECT_TRUE(
      test::close(model::masked_softmax(x, {}, {}, torch::kFloat32), torch::softmax(x, -1)));
}

// batched_matmul = torch::matmul for [B, N, T, H] @ [B, N, H, S] (a transposed view, as
// attention's k^T): values and both gradients.
TEST(Fused, BatchedMatmulMatchesMatmul) {
  auto a0 = torch::randn({2, 3, 17, 8}), k0 = torch::randn({2, 3, 19, 8});
  auto w = torch::randn({2, 3, 17, 19});
  auto go = [&](bool loop) {
    auto a = a0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
    auto y = loop ? model::batched_matmul(a, k.transpose(-2, -1))
                  : torch::matmul(a, k.transpose(-2, -1));
    (y * w).sum().backward();
    return std::make_tuple(y.detach(), a.grad(), k.grad());
  };
  auto [y1, ga1, gk1] = go(true);
  auto [y0, ga0, gk0] = go(false);
  EXPECT_TRUE(test::close(y1, y0));
  EXPECT_TRUE(test::close(ga1, ga0));
  EXPECT_TRUE(test::close(gk1, gk0));
  torch::NoGradGuard ng;  // and without autograd
  EXPECT_TRUE(test::close(model::batched_matmul(a0, k0.transpose(-2, -1)), y0));
}

// Under bf16 autocast, batched_matmul = torch::matmul, values and gradients, and k's gradient
// through q k^T (a transposed view) comes contiguous, in k's layout.
TEST(Fused, BatchedMatmulUnderBf16AutocastKeepsTheKeysLayout) {
  auto q0 = torch::randn({2, 3, 17, 8}).to(torch::kBFloat16);
  auto k0 = torch::randn({2, 3, 19, 8}).to(torch::kBFloat16);
  auto w = torch::randn({2, 3, 17, 19}).to(torch::kBFloat16);
  auto go = [&](bool ours) {
    auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
    torch::Tensor y;
    {
      device::Autocast ac(torch::kCPU, true);
      y = ours ? model::batched_matmul(q, k.transpose(-2, -1))
               : torch::matmul(q, k.transpose(-2, -1));
    }
    auto g = torch::autograd::grad({y}, {q, k}, {w});
    return std::make_tuple(y, g[0], g[1]);
  };
  auto [y1, gq1, gk1] = go(true);
  auto [y0, gq0, gk0] = go(false);
  EXPECT_EQ(y1.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(gk1.is_contiguous());
  EXPECT_FALSE(gk0.is_contiguous());  // what libtorch's backward gives
  if (!util::bf16_gemm_native()) {
    // libtorch's bf16 matmul sums in bf16 here (util/gemm.h): ours are the float32 sums of the
    // bf16 values, rounded once, within a bf16 step of float64's.
    auto f64 = [](const torch::Tensor& t) { return t.to(torch::kFloat64); };
    auto w64 = f64(w);
    EXPECT_TRUE(test::close(f64(y1), f64(q0).matmul(f64(k0).transpose(-2, -1)), 1.0 / 128, 1e-3));
    EXPECT_TRUE(test::close(f64(gq1), w64.matmul(f64(k0)), 1.0 / 128, 1e-3));
    EXPECT_TRUE(test::close(f64(gk1), w64.transpose(-2, -1).matmul(f64(q0)), 1.0 / 128, 1e-3));
    return;
  }
  EXPECT_TRUE(torch::equal(y1, y0));
  EXPECT_TRUE(torch::equal(gq1, gq0));
  // The same sums, perhaps in another order: to bf16 rounding.
  EXPECT_TRUE(test::close(gk1.to(torch::kFloat32), gk0.to(torch::kFloat32), 1.0 / 128, 1e-2));
}

// bf16_attention = the unfused bf16 path (q scaled, batched_matmul, masked_softmax,
// batched_matmul) and a float64 reference: values and the gradients of q, k and v; q, k, v
// strided as the model's heads (views of [B, T, N, W]); a causal mask, a fixed bias with key
// padding, q and k wider than v, S != T, a row that sees no key; one block of query rows and
// several (the causal mask's blocks skipping their masked keys; a padded row that sees no key in
// a later block); 1200 tokens (19 blocks); the output in the
// heads' merge's layout, its gradient taken from that layout. Within bf16 rounding of the
// unfused path: oneDNN's gemm may sum in another order than libtorch's bmm, and dk and dv are
// the sums of the blocks' parts (the unfused values themselves are a bf16 rounding of float64).
// dq and dk differ more: the scores' gradient comes from the forward's bf16 probabilities, where
// the unfused path recomputes them in float32; they stay within 1.3x of the unfused path's
// distance to float64 (at most 1.17x on these cases).
TEST(Fused, Bf16AttentionMatchesTheUnfusedPath) {
  if (!util::bf16_nodes_pay()) GTEST_SKIP() << "bf16_attention does not run on this CPU";
  struct Shape {
    int64_t B, N, T, S, W, H;
    bool causal;
    double scale;
  };
  for (const Shape c :
       {Shape{2, 3, 17, 17, 8, 8, true, 0.125}, Shape{3, 2, 9, 21, 12, 6, false, 0.5},
        Shape{2, 2, 9, 21, 12, 6, false, 1 / std::sqrt(6.0)},
        Shape{1, 3, 520, 520, 8, 8, true, 0.25}, Shape{2, 2, 130, 150, 12, 6, false, 0.5},
        Shape{1, 1, 1200, 1200, 8, 8, true, 0.25},
        // widths, blocks and key ends in multiples of 32: on util::amx's tiles where there are any
        Shape{2, 2, 128, 128, 64, 64, true, 0.125}, Shape{2, 2, 96, 160, 32, 64, false, 0.25}}) {
    SCOPED_TRACE(::testing::Message() << "B " << c.B << " N " << c.N << " T " << c.T << " S " << c.S
                                      << " scale " << c.scale);
    // The scale meets q in bf16 in the unfused path, the scores in float32 here: bit for bit the
    // same where it is a power of two, else another rounding of q.
    const bool power_of_two = std::exp2(std::round(std::log2(c.scale))) == c.scale;
    torch::manual_seed(c.T);
    auto bf16_heads = [](int64_t B, int64_t L, int64_t N, int64_t D) {  // [B, N, L, D], strided
      return torch::randn({B, L, N, D}).to(torch::kBFloat16).transpose(1, 2);
    };
    auto q0 = bf16_heads(c.B, c.T, c.N, c.W), k0 = bf16_heads(c.B, c.S, c.N, c.W);
    auto v0 = bf16_heads(c.B, c.S, c.N, c.H);
    torch::Tensor bias, mask;
    if (c.causal) {
      mask = torch::zeros({1, 1, c.T, c.S})
                 .masked_fill_(torch::ones({c.T, c.S}, torch::kBool).triu(1), -1e30);
    } else {
      bias = torch::randn({1, c.N, c.T, c.S});
      mask =
          torch::zeros({c.B, 1, c.T, c.S}).masked_fill_(torch::rand({c.B, 1, 1, c.S}) < 0.3, -1e30);
      mask.select(0, 1).select(1, 2).fill_(-1e30);                   // batch 1, query 2 sees no key
      if (c.T > 100) mask.select(0, 1).select(1, 100).fill_(-1e30);  // nor query 100
    }
    // The output's gradient as the heads' merge gives it: [B, N, T, H] in [B, T, N, H] memory.
    auto w = torch::randn({c.B, c.T, c.N, c.H}).to(torch::kBFloat16).transpose(1, 2);
    ASSERT_TRUE(model::uses_bf16_attention(q0, k0, v0, bias, mask));
    auto go = [&](int form) {  // 0: bf16_attention, 1: the unfused bf16 path, 2: float64
      auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
      auto v = v0.clone().requires_grad_(true);
      torch::Tensor y;
      if (form == 0) {
        y = model::bf16_attention(q, k, v, bias, mask, c.scale);
        EXPECT_TRUE(y.transpose(1, 2).is_contiguous());  // the heads' merge: a view
      } else if (form == 1) {
        y = model::batched_matmul(
            model::masked_softmax(model::batched_matmul(q * c.scale, k.transpose(-2, -1)), bias,
                                  mask, torch::kBFloat16),
            v);
      } else {
        auto s =
            torch::matmul(q.to(torch::kFloat64), k.to(torch::kFloat64).transpose(-2, -1)) * c.scale;
        if (bias.defined()) s = s + bias.to(torch::kFloat64);
        y = torch::matmul(torch::softmax(s + mask.to(torch::kFloat64), -1), v.to(torch::kFloat64));
      }
      auto g = torch::autograd::grad({y}, {q, k, v}, {w.to(y.scalar_type())});
      auto f = [](const torch::Tensor& t) { return t.to(torch::kFloat32); };
      return std::vector<torch::Tensor>{f(y), f(g[0]), f(g[1]), f(g[2])};
    };
    auto ours = go(0), unfused = go(1), exact = go(2);
    for (size_t i = 0; i < ours.size(); ++i) {
      SCOPED_TRACE(::testing::Message() << "output " << i << " (0: y, then dq, dk, dv)");
      const bool from_p = i == 1 || i == 2;  // dq, dk: through the scores' gradient
      EXPECT_TRUE(test::close_in_norm(ours[i], unfused[i],
                                      from_p         ? 1e-2
                                      : power_of_two ? 1e-3
                                                     : 1e-2))
          << "relative distance "
          << ((ours[i] - unfused[i]).norm() / unfused[i].norm()).item<double>();
      // bf16 operands, scores and probabilities: within a few bf16 steps of float64, in norm.
      EXPECT_TRUE(test::close_in_norm(ours[i], exact[i], 2e-2));
      auto distance = [&](const torch::Tensor& t) {
        return ((t - exact[i]).norm() / exact[i].norm()).item<double>();
      };
      EXPECT_LE(distance(ours[i]), 1.3 * distance(unfused[i]));
    }
    EXPECT_TRUE(ours[0].isfinite().all().item<bool>());
  }
  {  // q, k and v as the heads of one fused projection's output [B, T, N W + N W + N H]: rows
     // 2 N W + N H apart, read in place; the gradient reaches the projection whole. The same
     // bits as with contiguous copies of the heads (the gemm reads the same values).
    SCOPED_TRACE("views of a fused projection");
    const int64_t B = 2, N = 3, T = 90, W = 8, H = 6;
    torch::manual_seed(7);
    auto qkv0 = torch::randn({B, T, N * (2 * W + H)}).to(torch::kBFloat16);
    auto mask =
        torch::zeros({1, 1, T, T}).masked_fill_(torch::ones({T, T}, torch::kBool).triu(1), -1e30);
    auto w = torch::randn({B, T, N, H}).to(torch::kBFloat16).transpose(1, 2);
    auto go = [&](int form) {  // 0: the views, 1: contiguous copies, 2: the unfused path
      auto qkv = qkv0.clone().requires_grad_(true);
      auto parts = qkv.split_with_sizes({N * W, N * W, N * H}, -1);
      auto heads = [&](const torch::Tensor& t, int64_t D) {
        auto h = t.view({B, T, N, D}).transpose(1, 2);
        return form == 1 ? h.contiguous() : h;
      };
      auto q = heads(parts[0], W), k = heads(parts[1], W), v = heads(parts[2], H);
      EXPECT_EQ(q.is_contiguous(), form == 1);
      auto y = form < 2
                   ? model::bf16_attention(q, k, v, {}, mask, 0.25)
                   : model::batched_matmul(
                         model::masked_softmax(model::batched_matmul(q * 0.25, k.transpose(-2, -1)),
                                               {}, mask, torch::kBFloat16),
                         v);
      auto g = torch::autograd::grad({y}, {qkv}, {w})[0];
      return std::vector<torch::Tensor>{y, g};
    };
    auto views = go(0), copies = go(1), unfused = go(2);
    for (size_t i = 0; i < views.size(); ++i) {
      EXPECT_TRUE(torch::equal(views[i], copies[i])) << "tensor " << i;
      EXPECT_TRUE(
          test::close_in_norm(views[i].to(torch::kFloat32), unfused[i].to(torch::kFloat32), 5e-3))
          << "tensor " << i;
    }
  }
  // Where it does not apply: float32, a learned bias, a mask that takes gradients, one query.
  auto q = torch::randn({1, 2, 3, 4}), qb = q.to(torch::kBFloat16);
  EXPECT_FALSE(model::uses_bf16_attention(q, q, q, {}, {}));
  EXPECT_FALSE(model::uses_bf16_attention(qb.narrow(2, 0, 1), qb, qb, {}, {}));
  EXPECT_FALSE(
      model::uses_bf16_attention(qb, qb, qb, torch::zeros({1, 2, 3, 3}).requires_grad_(true), {}));
  EXPECT_TRUE(model::uses_bf16_attention(qb, qb, qb, {}, {}));
  setenv("ROPELAB_BF16_ATTENTION", "off", 1);  // the switch to the unfused form
  EXPECT_FALSE(model::uses_bf16_attention(qb, qb, qb, {}, {}));
  unsetenv("ROPELAB_BF16_ATTENTION");
}

// util::sgemm in all four transpositions, on blocks of larger row-major buffers (lda, ldb and
// ldc wider than the block), with beta 0 and 1, against libtorch's matmul.
TEST(Fused, SgemmMatchesMatmul) {
  if (!util::fast_sgemm_available()) GTEST_SKIP() << "this libtorch has no oneDNN sgemm symbol";
  const int64_t M = 13, N = 9, K = 21, pad = 3;
  for (bool ta : {false, true})
    for (bool tb : {false, true}) {
      auto a =
          torch::randn(ta ? std::vector<int64_t>{K, M + pad} : std::vector<int64_t>{M, K + pad});
      auto b =
          torch::randn(tb ? std::vector<int64_t>{N, K + pad} : std::vector<int64_t>{K, N + pad});
      auto A = ta ? a.narrow(1, 0, M).t() : a.narrow(1, 0, K);  // [M, K]
      auto B = tb ? b.narrow(1, 0, K).t() : b.narrow(1, 0, N);  // [K, N]
      auto want = torch::matmul(A, B);
      for (float beta : {0.0F, 1.0F}) {
        auto c = torch::full({M, N + pad}, 0.5F);
        util::sgemm(ta, tb, M, N, K, a.data_ptr<float>(), a.size(1), b.data_ptr<float>(), b.size(1),
                    beta, c.data_ptr<float>(), c.size(1));
        EXPECT_TRUE(test::close(c.narrow(1, 0, N), beta == 0 ? want : want + 0.5))
            << "ta " << ta << " tb " << tb << " beta " << beta;
        // The padding columns are left alone.
        EXPECT_TRUE(torch::equal(c.narrow(1, N, pad), torch::full({M, pad}, 0.5F)));
      }
    }
}

// util::gemm_bf16 likewise: bf16 operands, float32 C; against the float64 product of the same
// bf16 values (float32 sums of exact bf16 products: within float32 rounding). Three heights of
// C: one block, and (where the operands are widened for oneDNN's sgemm, util/gemm.h) several
// blocks of 128 rows and of 512, each with a part block last. There util::gemm_bf16_widened,
// given B widened, gives gemm_bf16's very bits.
TEST(Fused, GemmBf16MatchesMatmul) {
  if (!util::bf16_gemm_available()) GTEST_SKIP() << "this libtorch has no oneDNN bf16 gemm symbol";
  const int64_t N = 9, K = 21, pad = 3;
  auto bf16 = [](std::vector<int64_t> sizes) { return torch::randn(sizes).to(torch::kBFloat16); };
  for (int64_t M : {5, 13, 300, 2125})  // 5: A^T B wider than tall runs as its transpose
    for (bool ta : {false, true})
      for (bool tb : {false, true}) {
        auto a = bf16(ta ? std::vector<int64_t>{K, M + pad} : std::vector<int64_t>{M, K + pad});
        auto b = bf16(tb ? std::vector<int64_t>{N, K + pad} : std::vector<int64_t>{K, N + pad});
        auto A = ta ? a.narrow(1, 0, M).t() : a.narrow(1, 0, K);  // [M, K]
        auto B = tb ? b.narrow(1, 0, K).t() : b.narrow(1, 0, N);  // [K, N]
        auto want = torch::matmul(A.to(torch::kFloat64), B.to(torch::kFloat64));
        for (float beta : {0.0F, 1.0F}) {
          auto c = torch::full({M, N + pad}, 0.5F);
          util::gemm_bf16(ta, tb, M, N, K, util::bf16_bits(a), a.size(1), util::bf16_bits(b),
                          b.size(1), beta, c.data_ptr<float>(), c.size(1));
          EXPECT_TRUE(test::close(c.narrow(1, 0, N).to(torch::kFloat64),
                                  beta == 0 ? want : want + 0.5, 1e-5, 1e-5))
              << "M " << M << " ta " << ta << " tb " << tb << " beta " << beta;
          EXPECT_TRUE(torch::equal(c.narrow(1, N, pad), torch::full({M, pad}, 0.5F)));
          if (beta == 0) {  // the rounded form: the sums' bits, each rounded to bf16
            auto acc = torch::empty({M, N}), out = torch::empty({M, N}, torch::kBFloat16);
            util::gemm_bf16_rounded(ta, tb, M, N, K, util::bf16_bits(a), a.size(1),
                                    util::bf16_bits(b), b.size(1), acc.data_ptr<float>(),
                                    util::bf16_bits(out));
            EXPECT_TRUE(torch::equal(acc, c.narrow(1, 0, N)));
            EXPECT_TRUE(torch::equal(out, c.narrow(1, 0, N).to(torch::kBFloat16)))
                << "M " << M << " ta " << ta << " tb " << tb;
          }
          if (util::bf16_gemm_native()) continue;
          auto b32 = torch::empty(b.sizes(), torch::kFloat32);
          util::widen_bf16(util::bf16_bits(b), b.numel(), b32.data_ptr<float>());
          EXPECT_TRUE(torch::equal(b32, b.to(torch::kFloat32)));
          auto c2 = torch::full({M, N + pad}, 0.5F);
          util::gemm_bf16_widened(ta, tb, M, N, K, util::bf16_bits(a), a.size(1),
                                  b32.data_ptr<float>(), b.size(1), beta, c2.data_ptr<float>(),
                                  c2.size(1));
          EXPECT_TRUE(torch::equal(c2, c)) << "M " << M << " ta " << ta << " tb " << tb;
        }
      }
}

// model::linear against libtorch's linear: values and the three gradients (with and without a
// bias, with only some inputs needing one), under no_grad, and under bf16 autocast (where it is
// libtorch's linear, in bf16).
TEST(Fused, DenseLayerMatchesLibtorchLinear) {
  auto x0 = torch::randn({3, 5, 7}), w0 = torch::randn({4, 7}), b0 = torch::randn({4});
  auto g = torch::randn({3, 5, 4});
  for (bool bias : {true, false})
    for (bool x_grad : {true, false}) {
      auto run = [&](bool ours) {
        auto x = x0.clone().requires_grad_(x_grad), w = w0.clone().requires_grad_(true);
        auto b = bias ? b0.clone().requires_grad_(true) : torch::Tensor();
        auto y = ours ? model::linear(x, w, b) : torch::nn::functional::linear(x, w, b);
        (y * g).sum().backward();
        return std::make_tuple(y.detach(), x_grad ? x.grad() : torch::Tensor(), w.grad(),
                               bias ? b.grad() : torch::Tensor());
      };
      auto [y1, gx1, gw1, gb1] = run(true);
      auto [y0, gx0, gw0, gb0] = run(false);
      SCOPED_TRACE(::testing::Message() << "bias " << bias << " x_grad " << x_grad);
      EXPECT_EQ(y1.sizes(), y0.sizes());
      EXPECT_TRUE(test::close(y1, y0));
      EXPECT_EQ(gx1.defined(), x_grad);
      if (x_grad) {
        EXPECT_TRUE(test::close(gx1, gx0));
      }
      EXPECT_TRUE(test::close(gw1, gw0));
      if (bias) {
        EXPECT_TRUE(test::close(gb1, gb0));
      }
    }
  {
    torch::NoGradGuard ng;
    EXPECT_TRUE(test::close(model::linear(x0, w0, b0), torch::nn::functional::linear(x0, w0, b0)));
  }
  // A non-contiguous input (a transposed view) and a weight view.
  auto xt = torch::randn({7, 6}).t();
  EXPECT_TRUE(test::close(model::linear(xt, w0.t().contiguous().t()),
                          torch::nn::functional::linear(xt, w0)));
  // matmul_into on a transposed view, a view with no unit stride (copied), into a block.
  auto big = torch::randn({8, 10});
  auto a = big.t().narrow(0, 0, 6);                    // [6, 8], strides (1, 10)
  auto b = torch::randn({5, 8}).t();                   // [8, 5], strides (1, 8)
  auto a2 = torch::randn({12, 8}).slice(0, 0, 12, 2);  // [6, 8], strides (16, 1)
  auto b2 = torch::randn({8, 14}).slice(1, 0, 14, 2);  // [8, 7], strides (14, 2): copied
  auto out = torch::zeros({6, 9});
  auto blk = out.narrow(1, 0, 5);
  model::matmul_into(blk, a, b);
  EXPECT_TRUE(test::close(blk, torch::matmul(a, b)));
  auto blk2 = out.narrow(1, 0, 7);
  model::matmul_into(blk2, a2, b2);
  EXPECT_TRUE(test::close(blk2, torch::matmul(a2, b2)));
  EXPECT_TRUE(torch::equal(out.narrow(1, 7, 2), torch::zeros({6, 2})));
}

// Under bf16 autocast, with a bias and without (the LM head): the output in bf16, within one
// bf16 rounding of libtorch's linear (which rounds once, where ours rounds the product and then
// the sum with the bias where the bf16 nodes run), and the three gradients in their parameters'
// dtypes, within bf16's precision. Where the bf16 nodes run (util::bf16_nodes_pay: AVX-512, or
// an AVX2 CPU whose libtorch has no bf16 gemm) the bias's gradient is the float32 sum of dY's bf16
// columns, and the weight's (with oneDNN's bf16 gemm) the float32 sums of the bf16 products
// dY^T X, never rounded to bf16 (libtorch's is).
TEST(Fused, DenseLayerUnderBf16Autocast) {
  auto x0 = torch::randn({3, 37, 70}), w0 = torch::randn({45, 70}), b0 = torch::randn({45});
  auto g = torch::randn({3, 37, 45});
  for (bool bias : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "bias " << bias);
    auto run = [&](bool ours) {
      auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
      auto b = bias ? b0.clone().requires_grad_(true) : torch::Tensor();
      torch::Tensor y;
      {
        device::Autocast ac(torch::kCPU, true);
        y = ours ? model::linear(x, w, b) : torch::linear(x, w, b);
      }
      (y.to(torch::kFloat32) * g).sum().backward();
      return std::make_tuple(y.detach(), x.grad(), w.grad(), bias ? b.grad() : torch::Tensor());
    };
    auto [y1, gx1, gw1, gb1] = run(true);
    auto [y0, gx0, gw0, gb0] = run(false);
    EXPECT_EQ(y1.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(test::close(y1.to(torch::kFloat32), y0.to(torch::kFloat32), 1.0 / 128, 0.05));
    EXPECT_EQ(gw1.scalar_type(), torch::kFloat32);
    auto g16 = g.to(torch::kBFloat16).to(torch::kFloat64).reshape({-1, 45});
    auto x16 = x0.to(torch::kBFloat16).to(torch::kFloat64).reshape({-1, 70});
    auto w16 = w0.to(torch::kBFloat16).to(torch::kFloat64);
    // Where libtorch's bf16 mm has no kernel of its own it sums in bf16 (util/gemm.h): there the
    // yardstick is the exact product of the bf16 values, rounded once.
    const bool exact_ref = !util::bf16_gemm_native();
    EXPECT_TRUE(test::close(gx1, exact_ref ? g16.matmul(w16).view_as(x0).to(torch::kFloat32) : gx0,
                            1.0 / 64, 0.05));
    EXPECT_TRUE(
        test::close(gw1, exact_ref ? g16.t().matmul(x16).to(torch::kFloat32) : gw0, 1.0 / 64, 0.1));
    if (util::bf16_nodes_pay() && util::bf16_gemm_available()) {
      EXPECT_TRUE(test::close(gw1.to(torch::kFloat64), g16.t().matmul(x16), 1e-6, 1e-5));
      EXPECT_FALSE(torch::equal(gw1, gw0));  // libtorch's, rounded to bf16 first
    }
    if (!bias) continue;
    EXPECT_EQ(gb1.scalar_type(), torch::kFloat32);
    EXPECT_TRUE(test::close(gb1, gb0, 1.0 / 64, 0.1));
    // The bias's gradient: the exact column sums of dY as bf16 (every term is representable).
    if (util::bf16_nodes_pay()) {
      EXPECT_TRUE(test::close(gb1.to(torch::kFloat64), g16.sum(0), 1e-6, 1e-5));
    }
  }
}

// The dense layer on util::amx's tiles (where the CPU has them and the sizes are multiples of
// 32): the forward is libtorch's bf16 mm rounded, then the bias added with a second rounding,
// and dX is libtorch's bf16 mm of dY and w, bit for bit (the tiles add K in oneDNN's order); the
// tile products ran (lab::StepSplit sees them). Shapes as the LM's layers: B small against L2.
TEST(Fused, DenseLayerOnTheTilesGivesTheMmsBits) {
  if (!util::amx::available()) GTEST_SKIP() << "this CPU has no AMX bf16 tiles";
  struct LayerShape {
    int64_t M, I, O;
  };
  for (const LayerShape c :
       {LayerShape{64, 64, 96}, LayerShape{96, 256, 256}, LayerShape{128, 1024, 256}})
    for (bool bias : {true, false}) {
      SCOPED_TRACE(::testing::Message()
                   << "M " << c.M << " in " << c.I << " out " << c.O << " bias " << bias);
      torch::manual_seed(5);
      auto x = torch::randn({c.M, c.I}).requires_grad_(true);
      auto w = torch::randn({c.O, c.I}).requires_grad_(true);
      auto b = bias ? torch::randn({c.O}) : torch::Tensor();
      auto g = torch::randn({c.M, c.O}).to(torch::kBFloat16);
      torch::Tensor y;
      lab::StepSplit split;
      {
        device::Autocast ac(torch::kCPU, true);
        y = model::linear(x, w, b);
      }
      y.backward(g);
      EXPECT_EQ(split.self_s().count("ropelab::tile_product"), 1U);
      auto x16 = x.detach().to(torch::kBFloat16), w16 = w.detach().to(torch::kBFloat16);
      auto want = at::mm(x16, w16.t());
      if (bias) want = (want.to(torch::kFloat32) + b).to(torch::kBFloat16);
      EXPECT_TRUE(torch::equal(y, want));
      EXPECT_TRUE(torch::equal(x.grad(), at::mm(g, w16).to(torch::kFloat32)));
    }
}

// A LayerNorm of width D with random gain and shift.
model::Norm random_layer_norm(int64_t D) {
  model::Norm norm(D, 1e-5, config::NormType::kLayerNorm);
  torch::NoGradGuard ng;
  norm->weight.normal_();
  norm->bias.normal_();
  return norm;
}

// A pre-norm LayerNorm under bf16 autocast (NormImpl::matmul_input) against the float32 norm
// that autocast's cast would hand the next matmul: the output is bf16 with those values, and
// the gradients of x, the gain and the shift, from bf16 gradients (a matmul's dX), match the
// float32 norm's within float32 sums. Without autocast it is the plain norm.
TEST(Fused, LayerNormForTheMatmulUnderBf16Autocast) {
  const int64_t D = 72;
  auto norm = random_layer_norm(D);
  auto x0 = 3 * torch::randn({4, 67, D}) + 1;
  auto g = torch::randn({4, 67, D}).to(torch::kBFloat16);
  auto run = [&](bool ours) {
    norm->zero_grad();
    auto x = x0.clone().requires_grad_(true);
    torch::Tensor y;
    {
      device::Autocast ac(torch::kCPU, true);
      y = ours ? norm->matmul_input(x) : norm(x).to(torch::kBFloat16);
    }
    (y.to(torch::kFloat32) * g.to(torch::kFloat32)).sum().backward();
    return std::make_tuple(y.detach(), x.grad(), norm->weight.grad().clone(),
                           norm->bias.grad().clone());
  };
  auto [y1, gx1, gw1, gb1] = run(true);
  auto [y0, gx0, gw0, gb0] = run(false);
  // (elsewhere than AVX-512 the float32 norm, which the matmul's autocast casts). Both round to
  // bf16 from float32 values that differ in their last bits: one bf16 step apart at most.
  EXPECT_EQ(y1.scalar_type(), vec::bf16_rows_vectorised() ? torch::kBFloat16 : torch::kFloat32);
  EXPECT_TRUE(test::close(y1.to(torch::kFloat32), y0.to(torch::kFloat32), 1.0 / 128, 1e-5));
  EXPECT_EQ(gx1.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(test::close(gx1, gx0, 1e-4, 1e-4));
  EXPECT_TRUE(test::close(gw1, gw0, 1e-4, 1e-3));
  EXPECT_TRUE(test::close(gb1, gb0, 1e-4, 1e-3));
  auto plain = norm->matmul_input(x0);  // no autocast: the float32 norm
  EXPECT_EQ(plain.scalar_type(), torch::kFloat32);
  EXPECT_TRUE(test::close(plain, norm(x0), 0, 0));
}

// The ops a step runs, as libtorch's RecordFunction sees them (on every thread: the
// kernels' workers record their gemm calls too, hence the lock).
std::vector<std::string> g_ops;
std::mutex g_ops_lock;
std::unique_ptr<at::ObserverContext> record_op(const at::RecordFunction& fn) {
  const std::lock_guard<std::mutex> hold(g_ops_lock);
  g_ops.emplace_back(fn.name());
  return nullptr;
}

// The norm that also hands its input on for the residual add (NormImpl::matmul_input_and_residual):
// the same values and, to the bit, the same gradients as the norm and x used apart (where x's two
// gradients are added by autograd, an aten::add); on the bf16 path the residual is x's memory,
// not a copy, and the backward runs no aten::add.
TEST(Fused, LayerNormHandsItsInputOnForTheResidual) {
  const int64_t D = 72;
  auto norm = random_layer_norm(D);
  auto x0 = 3 * torch::randn({4, 67, D}) + 1;
  auto g = torch::randn({4, 67, D}).to(torch::kBFloat16), g_res = torch::randn({4, 67, D});
  auto run = [&](bool together) {
    norm->zero_grad();
    auto x = x0.clone().requires_grad_(true);
    torch::Tensor y, res;
    {
      device::Autocast ac(torch::kCPU, true);
      if (together) {
        std::tie(y, res) = norm->matmul_input_and_residual(x);
        EXPECT_EQ(res.data_ptr(), x.data_ptr());
      } else {
        y = norm->matmul_input(x);
        res = x;
      }
    }
    auto loss = (y.to(torch::kFloat32) * g.to(torch::kFloat32)).sum() + (res * g_res).sum();
    g_ops.clear();
    auto handle = at::addGlobalCallback(at::RecordFunctionCallback(record_op));
    loss.backward();
    at::removeCallback(handle);
    const bool added = std::count(g_ops.begin(), g_ops.end(), "aten::add") > 0;
    EXPECT_EQ(added, !(together && vec::bf16_rows_vectorised())) << ::testing::PrintToString(g_ops);
    return std::make_tuple(y.detach(), res.detach(), x.grad(), norm->weight.grad().clone(),
                           norm->bias.grad().clone());
  };
  auto [y1, r1, gx1, gw1, gb1] = run(true);
  auto [y0, r0, gx0, gw0, gb0] = run(false);
  EXPECT_TRUE(torch::equal(y1, y0));
  EXPECT_TRUE(torch::equal(r1, x0));
  EXPECT_TRUE(torch::equal(gx1, gx0));
  EXPECT_TRUE(torch::equal(gw1, gw0));
  EXPECT_TRUE(torch::equal(gb1, gb0));
}

// Under bf16 autocast a [B, T, in] input's bias never goes through libtorch's broadcasting
// add_ (the C++ frontend's functional::linear does that, in mixed dtypes under autocast: 7.8 ms
// of a 96 ms lm-large step on an H200). Where the bf16 nodes run (util::bf16_nodes_pay) it is
// ropelab's bf16 layer: a bf16 gemm to float32 (oneDNN's, or its sgemm on widened operands),
// then the bias added as that is rounded to bf16 (util/vec_bf16.h), or libtorch's bf16 mm and
// the bias added to it in place (util::bf16_products_on_mm: AMX); either way y = bf16(bf16(x
// w^T) + b). Elsewhere libtorch's linear, the bias inside one addmm.
TEST(Fused, DenseLayerFoldsTheBiasIntoTheMatmul) {
  auto x = torch::randn({3, 5, 7}), w = torch::randn({4, 7}), b = torch::randn({4});
  for (const char* path : {"gemm", "mm"}) {
    SCOPED_TRACE(path);
    g_ops.clear();
    auto handle = at::addGlobalCallback(at::RecordFunctionCallback(record_op));
    torch::Tensor y;
    {
      test::ScopedEnv forced("ROPELAB_BF16_PRODUCTS", path);
      device::Autocast ac(torch::kCPU, true);
      y = model::linear(x, w, b);
    }
    at::removeCallback(handle);
    auto has = [](const std::string& op) {
      return std::find(g_ops.begin(), g_ops.end(), op) != g_ops.end();
    };
    EXPECT_FALSE(has("aten::add_")) << "ops: " << ::testing::PrintToString(g_ops);
    if (!util::bf16_nodes_pay()) {
      EXPECT_TRUE(has("aten::addmm")) << "ops: " << ::testing::PrintToString(g_ops);
      continue;
    }
    // libtorch's mm only where it has a bf16 kernel of its own (util/gemm.h).
    const bool mm =
        (std::string(path) == "mm" || !util::bf16_gemm_available()) && util::bf16_gemm_native();
    EXPECT_TRUE(has("ropelab::bf16_linear") && has(mm ? "aten::mm" : "ropelab::gemm") &&
                !has("aten::addmm"))
        << "ops: " << ::testing::PrintToString(g_ops);
    auto x16 = x.to(torch::kBFloat16), w16 = w.to(torch::kBFloat16);
    auto prod = torch::matmul(x16.to(torch::kFloat32), w16.to(torch::kFloat32).t());
    auto want = (prod.to(torch::kBFloat16).to(torch::kFloat32) + b).to(torch::kBFloat16);
    // The product's sums may run in another order than float32 matmul's: one bf16 step apart.
    EXPECT_TRUE(test::close(y.to(torch::kFloat32), want.to(torch::kFloat32), 1.0 / 64, 1e-3));
  }
}

// q, k and v as the heads of one projection's split (model::split_columns, as attention's fused
// q|k|v projection): bf16_attention writes their gradients into one tensor, which the split's
// backward hands on whole (no aten::cat); output and gradients bit for bit as with q, k and v
// apart. A part without a gradient counts as zeros (the concatenation then runs).
// On util::amx's tiles (where the CPU has them) and on oneDNN's gemm (ROPELAB_BF16_PRODUCTS=gemm)
// the same products in another order of float32 sums: outputs and gradients within a bf16 step
// of each other in norm, causal (blocks up to the diagonal) and not.
TEST(Fused, Bf16AttentionOnTheTilesMatchesTheGemm) {
  if (!util::amx::available() || !util::bf16_gemm_available())
    GTEST_SKIP() << "needs AMX tiles and oneDNN's bf16 gemm";
  for (bool causal : {true, false}) {
    SCOPED_TRACE(causal ? "causal" : "full");
    const int64_t B = 2, N = 2, T = 192, W = 64, H = 32;
    torch::manual_seed(3);
    auto qkv0 = torch::randn({B, T, N * (2 * W + H)}).to(torch::kBFloat16);
    auto mask = torch::zeros({1, 1, T, T});
    if (causal) mask.masked_fill_(torch::ones({T, T}, torch::kBool).triu(1), -1e30);
    auto w = torch::randn({B, T, N, H}).to(torch::kBFloat16).transpose(1, 2);
    auto go = [&] {
      auto qkv = qkv0.clone().requires_grad_(true);
      auto parts = qkv.split_with_sizes({N * W, N * W, N * H}, -1);
      auto heads = [&](const torch::Tensor& t, int64_t D) {
        return t.view({B, T, N, D}).transpose(1, 2);
      };
      auto y = model::bf16_attention(heads(parts[0], W), heads(parts[1], W), heads(parts[2], H), {},
                                     mask, 0.125);
      auto g = torch::autograd::grad({y}, {qkv}, {w})[0];
      return std::vector<torch::Tensor>{y.to(torch::kFloat32), g.to(torch::kFloat32)};
    };
    auto tile_products = [](const lab::StepSplit& split) {  // seen on this thread
      return split.self_s().count("ropelab::tile_product");
    };
    std::vector<torch::Tensor> tiles, gemm;
    {
      lab::StepSplit split;
      tiles = go();
      EXPECT_EQ(tile_products(split), 1U);
    }
    {
      test::ScopedEnv on_gemm("ROPELAB_BF16_PRODUCTS", "gemm");
      lab::StepSplit split;
      gemm = go();
      EXPECT_EQ(tile_products(split), 0U);
    }
    for (size_t i = 0; i < tiles.size(); ++i)
      EXPECT_TRUE(test::close_in_norm(tiles[i], gemm[i], 4e-3)) << "tensor " << i;
  }
  {  // 193 keys, the last one padding (masked for every query): the blocks end at key 192, on
     // the tiles, and v's pairs of rows end in a padded pair
    SCOPED_TRACE("odd keys");
    const int64_t B = 1, N = 2, T = 64, S = 193, W = 32;
    torch::manual_seed(4);
    auto q0 = torch::randn({B, N, T, W}).to(torch::kBFloat16);
    auto k0 = torch::randn({B, N, S, W}).to(torch::kBFloat16);
    auto v0 = torch::randn({B, N, S, W}).to(torch::kBFloat16);
    auto mask = torch::zeros({1, 1, T, S});
    mask.narrow(3, S - 1, 1).fill_(-1e30);
    auto w = torch::randn({B, N, T, W}).to(torch::kBFloat16);
    auto go = [&] {
      auto q = q0.clone().requires_grad_(true), k = k0.clone().requires_grad_(true);
      auto v = v0.clone().requires_grad_(true);
      auto y = model::bf16_attention(q, k, v, {}, mask, 0.25);
      auto g = torch::autograd::grad({y}, {q, k, v}, {w});
      return std::vector<torch::Tensor>{y.to(torch::kFloat32), g[0].to(torch::kFloat32),
                                        g[1].to(torch::kFloat32), g[2].to(torch::kFloat32)};
    };
    lab::StepSplit split;
    auto tiles = go();
    EXPECT_EQ(split.self_s().count("ropelab::tile_product"), 1U);
    test::ScopedEnv on_gemm("ROPELAB_BF16_PRODUCTS", "gemm");
    auto gemm = go();
    for (size_t i = 0; i < tiles.size(); ++i)
      EXPECT_TRUE(test::close_in_norm(tiles[i], gemm[i], 4e-3)) << "tensor " << i;
  }
}

TEST(Fused, Bf16AttentionOfOneProjectionNeedsNoConcatenation) {
  if (!util::bf16_nodes_pay()) GTEST_SKIP() << "bf16_attention does not run on this CPU";
  const int64_t B = 2, T = 70, N = 2, W = 16, D = N * W;
  auto p0 = torch::randn({B, T, 3 * D}).to(torch::kBFloat16);
  auto go = torch::randn({B, N, T, W}).to(torch::kBFloat16);
  auto mask =
      torch::zeros({1, 1, T, T}).masked_fill_(torch::ones({T, T}, torch::kBool).triu(1), -1e30);
  auto heads = [&](const torch::Tensor& t) { return t.view({B, T, N, W}).transpose(1, 2); };
  auto p = p0.clone().requires_grad_(true);
  auto parts = model::split_columns(p, {D, D, D});
  ASSERT_EQ(parts.size(), 3U);
  auto y = model::bf16_attention(heads(parts[0]), heads(parts[1]), heads(parts[2]), {}, mask, 0.25);
  g_ops.clear();
  auto handle = at::addGlobalCallback(at::RecordFunctionCallback(record_op));
  (y.to(torch::kFloat32) * go.to(torch::kFloat32)).sum().backward();
  at::removeCallback(handle);
  EXPECT_EQ(std::count(g_ops.begin(), g_ops.end(), "aten::cat"), 0)
      << "ops: " << ::testing::PrintToString(g_ops);
  std::vector<torch::Tensor> apart;
  for (int64_t i = 0; i < 3; ++i)
    apart.push_back(heads(p0.narrow(2, i * D, D)).contiguous().requires_grad_(true));
  auto y2 = model::bf16_attention(apart[0], apart[1], apart[2], {}, mask, 0.25);
  (y2.to(torch::kFloat32) * go.to(torch::kFloat32)).sum().backward();
  EXPECT_TRUE(torch::equal(y, y2));
  auto merged = [&](const torch::Tensor& g) { return g.transpose(1, 2).reshape({B, T, D}); };
  EXPECT_TRUE(torch::equal(
      p.grad(),
      torch::cat({merged(apart[0].grad()), merged(apart[1].grad()), merged(apart[2].grad())}, -1)));
  // Only the first and last parts used: their gradients, and zeros between.
  auto p2 = p0.clone().requires_grad_(true);
  auto parts2 = model::split_columns(p2, {D, D, D});
  (parts2[0].to(torch::kFloat32).sum() + 2 * parts2[2].to(torch::kFloat32).sum()).backward();
  EXPECT_TRUE(torch::equal(
      p2.grad().to(torch::kFloat32),
      torch::cat({torch::ones({B, T, D}), torch::zeros({B, T, D}), torch::full({B, T, D}, 2.0)},
                 -1)));
}

// The FFN's first layer with its activation and dropout in one node, on the tiles or widened
// (model::act_dropout_after_linear) = the dense layer then act_dropout, with the same seed: the
// output and the gradients of x, w and b bit for bit, GELU, its tanh form and ReLU, with and
// without a bias; on the tiles a row count off their multiples of 32 takes the composition (the
// same values too).
TEST(Fused, FfnFirstLayerInOneNodeEqualsTheComposition) {
  if (!util::bf16_nodes_pay()) GTEST_SKIP() << "the bf16 layers do not run on this CPU";
  for (int64_t T : {16, 15})
    for (auto act :
         {config::Activation::kGelu, config::Activation::kRelu, config::Activation::kGeluTanh})
      for (bool bias : {true, false}) {
        SCOPED_TRACE(::testing::Message()
                     << "T " << T << " act " << static_cast<int>(act) << " bias " << bias);
        torch::manual_seed(11);
        torch::nn::Linear fc(torch::nn::LinearOptions(64, 128).bias(bias));
        auto x0 = torch::randn({4, T, 64});
        auto g = torch::randn({4, T, 128}).to(torch::kBFloat16);
        auto run = [&](bool fused) {
          auto x = x0.clone().requires_grad_(true);
          for (auto& p : fc->parameters()) p.mutable_grad() = torch::Tensor();
          torch::manual_seed(12);  // the mask's seed
          torch::Tensor y;
          std::vector<std::string> ops;
          {
            device::Autocast ac(torch::kCPU, true);
            g_ops.clear();
            auto handle = at::addGlobalCallback(at::RecordFunctionCallback(record_op));
            y = fused ? model::act_dropout_after_linear(fc, x, act, 0.25, true)
                      : model::act_dropout(model::linear(fc, x), act, 0.25, true);
            at::removeCallback(handle);
            ops = g_ops;
          }
          y.backward(g);
          const bool one_node =
              std::find(ops.begin(), ops.end(), "ropelab::bf16_linear_act_dropout") != ops.end();
          if (fused) {  // widened: any row count
            const bool widened = util::bf16_gemm_available() && !util::bf16_gemm_native();
            EXPECT_EQ(one_node, util::amx::available() ? T == 16 : widened);
          }
          std::vector<torch::Tensor> out{y, x.grad(), fc->weight.grad()};
          if (bias) out.push_back(fc->bias.grad());
          return out;
        };
        auto a = run(true), b = run(false);
        ASSERT_EQ(a.size(), b.size());
        for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
      }
}

// RoPE in the fused QKV projection's bias pass (model/linear.h's linear_rotated) = the projection
// then the position module's rotate_q and rotate_k: under bf16 autocast, the attention's output
// and the gradients of its input and of every parameter, bit for bit; both pairings. With grouped
// keys and values (2 kv heads of 4) the output bit for bit, the gradients to bf16 rounding. The
// reference is the same RoPE module without the hook.
TEST(Fused, RotatedProjectionEqualsTheRotationAfterIt) {
  if (!util::bf16_nodes_pay()) GTEST_SKIP() << "the bf16 projection does not run on this CPU";
  struct NoHook : model::RotaryImpl {
    using RotaryImpl::RotaryImpl;
    std::optional<Rotation> rotation(const model::PosCache&, int64_t) const override { return {}; }
  };
  const int64_t B = 2, D = 32, N = 4, H = 8;
  int64_t T = 19;
  // T = 16: 32 rows, on util::amx's tiles where the CPU has them (the rotation on each block)
  for (int64_t t : {19, 16})
    for (auto pairing : {config::RopePairing::kInterleaved, config::RopePairing::kHalf})
      for (int64_t kv : {0, 2}) {
        T = t;
        SCOPED_TRACE(::testing::Message()
                     << "T " << T << " half " << (pairing == config::RopePairing::kHalf)
                     << " kv heads " << kv);
        config::RopeConfig rc;
        rc.pairing = pairing;
        const model::PositionDims dims{D, N, H, true, 1};
        auto run = [&](model::PositionModuleImpl& pos) {
          torch::manual_seed(3);
          config::AttentionConfig a;
          model::MultiHeadAttention attn(D, N, a, kv, config::LinearBias::kAll);
          auto x = torch::randn({B, T, D}).requires_grad_(true);
          auto w = torch::randn({B, T, D});
          model::PosCache pc = pos.prepare(T, T, 0, 0, torch::kCPU);
          model::AttnMask mask{{}, true, {}};
          g_ops.clear();
          auto handle = at::addGlobalCallback(at::RecordFunctionCallback(record_op));
          torch::Tensor y;
          {
            device::Autocast ac(torch::kCPU, true);
            model::PositionContext ctx;
            ctx.module = &pos;
            ctx.tables = &pc;
            y = attn->forward(x, x, mask.with_bias(T, T, 0, torch::kCPU), ctx, 0, nullptr);
          }
          at::removeCallback(handle);
          const bool in_projection =
              std::find(g_ops.begin(), g_ops.end(), "ropelab::bf16_linear_rope") != g_ops.end();
          const bool after = std::find(g_ops.begin(), g_ops.end(), "ropelab::rope") != g_ops.end();
          EXPECT_NE(in_projection, after) << ::testing::PrintToString(g_ops);
          EXPECT_EQ(in_projection, pos.rotation(pc, H).has_value());
          (y.to(torch::kFloat32) * w).sum().backward();
          std::vector<torch::Tensor> out{y, x.grad()};
          for (const auto& p : attn->parameters()) out.push_back(p.grad());
          return out;
        };
        model::RotaryImpl fused(rc, dims);
        NoHook plain(rc, dims);
        auto pc = fused.prepare(T, T, 0, 0, torch::kCPU);
        ASSERT_TRUE(fused.rotation(pc, H).has_value());
        auto a = run(fused), b = run(plain);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_TRUE(torch::equal(a[0], b[0]));  // the output
        for (size_t i = 1; i < a.size(); ++i) {
          // Grouped keys: the rotation's gradient is taken once for a kv head instead of once per
          // query head before their sum, so the sum is rounded at another point: close in norm.
          if (kv == 0)
            EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
          else
            EXPECT_TRUE(test::close_in_norm(a[i], b[i], 1e-2)) << "tensor " << i;
        }
      }
  {  // A gradient that someone else holds is rotated back into a copy, never in place.
    model::RotaryImpl rope(config::RopeConfig{}, {D, N, H, true, 1});
    auto rot = *rope.rotation(rope.prepare(T, T, 0, 0, torch::kCPU), H);
    const model::HeadRotation hr{rot.cos_qF, rot.sin_qF, rot.cos_kF, rot.sin_kF, N, N, H, false};
    auto x = torch::randn({B, T, D}), w = torch::randn({3 * D, D}).requires_grad_(true);
    auto b = torch::randn({3 * D});
    torch::Tensor y;
    {
      device::Autocast ac(torch::kCPU, true);
      ASSERT_TRUE(model::fuses_rotation(x, w, b, hr));
      y = model::linear_rotated(x, w, b, hr);
    }
    auto go = torch::randn({B, T, 3 * D}).to(torch::kBFloat16), kept = go.clone();
    y.backward(go);
    EXPECT_TRUE(torch::equal(go, kept));
  }
  // Where the hook gives nothing: xPos scales, and a rotary_dim narrower than the head.
  config::RopeConfig part;
  part.rotary_dim = 4;
  model::RotaryImpl partial(part, {D, N, H, true, 1});
  model::RotaryImpl xpos(config::XposConfig{}, {D, N, H, true, 1});
  EXPECT_FALSE(partial.rotation(partial.prepare(T, T, 0, 0, torch::kCPU), H).has_value());
  EXPECT_FALSE(xpos.rotation(xpos.prepare(T, T, 0, 0, torch::kCPU), H).has_value());
}

// RoPE in one pass (model/position/rotary.cpp's FusedRope, taken for 4-D CPU inputs) against
// the unfused ops (taken for the same values as a 3-D tensor): values and the input's gradient,
// on a transposed view (as q and k are views of the fused QKV output), both pairings, fp32 and
// bf16.
TEST(Fused, RopeMatchesTheUnfusedOps) {
  const int64_t B = 2, T = 5, N = 3;
  for (int64_t W : {8, 40, 64})
    for (bool interleaved : {true, false})
      for (auto dt : {torch::kFloat32, torch::kBFloat16}) {
        auto cos_TR = torch::randn({T, W / 2}), sin_TR = torch::randn({T, W / 2});
        auto cos_TF = model::RotaryImpl::spread(cos_TR, interleaved, false);
        auto sin_TF = model::RotaryImpl::spread(sin_TR, interleaved, true);
        auto base = torch::randn({B, T, N, W}).to(dt);
        // The gradient arrives transposed, as k's does from q k^T: read through its strides.
        auto g = torch::randn({B, N, W, T}).to(dt).transpose(2, 3);
        // The reference: the unfused ops in float32 on the same values. (In bf16 they round
        // each term of the gradient's sum to bf16 before adding; the fused pass rounds once.)
        auto run = [&](bool fused) {
          auto leaf = (fused ? base : base.to(torch::kFloat32)).clone().requires_grad_(true);
          auto x = leaf.transpose(1, 2);  // [B, N, T, W], not contiguous
          auto y = fused ? model::RotaryImpl::rotate_spread(x, cos_TF, sin_TF, interleaved)
                         : model::RotaryImpl::rotate_spread(x.reshape({B * N, T, W}), cos_TF,
                                                            sin_TF, interleaved)
                               .view({B, N, T, W});
          if (fused) {  // x's gradient comes in x's layout: [B, T, N, W] in memory
            auto gx = torch::autograd::grad({y}, {x}, {g}, true)[0];
            EXPECT_TRUE(gx.transpose(1, 2).is_contiguous());
          }
          y.backward(fused ? g : g.to(torch::kFloat32));
          return std::make_pair(y.detach(), leaf.grad());
        };
        auto [y1, g1] = run(true);
        auto [y0, g0] = run(false);
        SCOPED_TRACE(::testing::Message()
                     << "W " << W << " interleaved " << interleaved << " dtype " << dt);
        EXPECT_EQ(y1.scalar_type(), dt);
        EXPECT_EQ(g1.scalar_type(), dt);
        EXPECT_TRUE(y1.is_contiguous());
        // float32: to rounding; bf16: one rounding of the exact value (2^-8 relative).
        const double rtol = dt == torch::kFloat32 ? 1e-6 : 1.0 / 256, atol = 1e-6;
        EXPECT_TRUE(test::close(y1, y0, rtol, atol));
        EXPECT_TRUE(test::close(g1, g0, rtol, atol));
      }
}

// The vectorised bf16 conversions round as c10::BFloat16 does (nearest even; NaN stays NaN).
TEST(Fused, Bf16ConversionsMatchLibtorch) {
  auto x = torch::cat({torch::randn({10000}) * 1e3, torch::tensor({0.0F, -0.0F, 1e-40F, 3.4e38F}),
                       torch::tensor({INFINITY, -INFINITY, NAN})});
  std::vector<uint16_t> bits(static_cast<size_t>(x.numel()));
  vec::float_to_bf16(x.data_ptr<float>(), bits.data(), x.numel());
  auto want = x.to(torch::kBFloat16);
  const auto* w = reinterpret_cast<const uint16_t*>(want.data_ptr<at::BFloat16>());
  int64_t differ = 0;
  for (int64_t i = 0; i < x.numel() - 1; ++i) differ += bits[i] != w[i];
  EXPECT_EQ(differ, 0);
  EXPECT_TRUE(
      std::isnan(static_cast<float>(c10::BFloat16(bits.back(), c10::BFloat16::from_bits()))));
  std::vector<float> back(bits.size());
  vec::bf16_to_float(bits.data(), back.data(), x.numel());
  EXPECT_TRUE(torch::equal(torch::from_blob(back.data(), {x.numel() - 1}),
                           want.narrow(0, 0, x.numel() - 1).to(torch::kFloat32)));
}

// The cross-entropy reads bf16 logits as they are and returns their gradient in bf16: the same
// loss and gradient as float32 cross-entropy of the same (bf16-valued) logits.
TEST(Fused, CrossEntropyTakesBf16LogitsAndGivesBf16Gradients) {
  auto logits = (4 * torch::randn({37, 301})).to(torch::kBFloat16);
  auto target = torch::randint(0, 301, {37});
  target[3] = -100;
  auto l16 = logits.clone().requires_grad_(true);
  auto l32 = logits.to(torch::kFloat32).requires_grad_(true);
  auto a = tasks::cross_entropy(l16, target, 0.9, 0.1 / 301);
  auto b = tasks::cross_entropy(l32, target, 0.9, 0.1 / 301);
  a.loss_sum.backward();
  b.loss_sum.backward();
  EXPECT_EQ(l16.grad().scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(test::close(a.loss_sum, b.loss_sum, 1e-6, 1e-6));
  EXPECT_TRUE(test::close(a.nll_sum, b.nll_sum, 1e-6, 1e-6));
  EXPECT_TRUE(test::close(l16.grad().to(torch::kFloat32), l32.grad(), 1e-2, 1e-4));
  EXPECT_EQ(l16.grad()[3].abs().max().item<float>(), 0.0F);  // the ignored row
  EXPECT_EQ(a.correct.item<int64_t>(), b.correct.item<int64_t>());
}

// run.threads governs every pool: ATen's intra-op pool and OpenBLAS's own threads.
TEST(Platform, ThreadsGovernEveryPool) {
  int before = at::get_num_threads();
  for (int n : {1, 2}) {
    platform::set_threads(n);
    EXPECT_EQ(at::get_num_threads(), n);
    if (platform::blas_core() != "unknown") {
      EXPECT_EQ(platform::blas_threads(), n);
    }
    // ropelab's own kernels too: at::parallel_for is a header template, parallel only in code
    // compiled with OpenMP (it once was not, and every fused kernel ran on one thread).
    EXPECT_EQ(platform::kernel_threads(), n);
  }
  platform::set_threads(before);
}

// The fused kernels give the same bits on 1 and 2 threads: every element's result (and its
// dropout draw) depends on its index only, never on how the rows were split.
TEST(Fused, KernelsGiveTheSameBitsOnOneAndTwoThreads) {
  const int before = at::get_num_threads();
  auto run = [](int threads) {
    platform::set_threads(threads);
    torch::manual_seed(7);
    auto x = torch::randn({2, 4, 33, 16}, torch::requires_grad());
    auto logits = torch::randn({67, 301}, torch::requires_grad());
    auto target = torch::randint(0, 301, {67});
    auto mask = torch::zeros({33, 33}).masked_fill(torch::ones({33, 33}).triu(1).to(torch::kBool),
                                                   -std::numeric_limits<float>::infinity());
    auto p = model::masked_softmax(x.matmul(x.transpose(-1, -2)), torch::Tensor(), mask,
                                   torch::kFloat32);
    auto h = model::act_dropout(model::dropout(p.matmul(x), 0.3, true), config::Activation::kGelu,
                                0.1, true);
    auto ce = tasks::cross_entropy(logits, target, 1.0, 0.0);
    (h.square().sum() + ce.loss_sum).backward();
    return std::vector<torch::Tensor>{h.detach(), x.grad(), logits.grad()};
  };
  auto one = run(1), two = run(2);
  platform::set_threads(before);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << i;
}

// The same under bf16 autocast: the norm, the dense layer's bias and its gradient's column sums,
// the attention's heads, GELU with dropout and the loss give the same bits on 1 and 2 threads
// (each row's, head's or chunk's result never depends on which thread took it, and the sums
// across them are added in a fixed order).
TEST(Fused, Bf16KernelsGiveTheSameBitsOnOneAndTwoThreads) {
  if (!util::bf16_nodes_pay()) GTEST_SKIP() << "bf16 runs libtorch's own loops on this CPU";
  const int before = at::get_num_threads();
  auto norm = random_layer_norm(32);
  torch::manual_seed(11);
  const auto x0 = torch::randn({3, 70, 32}), w_qkv = torch::randn({96, 32}) / 6;
  const auto b_qkv = torch::randn({96}), w_out = torch::randn({301, 32}) / 6;
  const auto target = torch::randint(0, 301, {3 * 70});
  const auto mask =
      torch::zeros({1, 1, 70, 70}).masked_fill_(torch::ones({70, 70}, torch::kBool).triu(1), -1e30);
  auto run = [&](int threads) {
    platform::set_threads(threads);
    torch::manual_seed(5);  // the dropout's draw
    norm->zero_grad();
    auto x = x0.clone().requires_grad_(true), wq = w_qkv.clone().requires_grad_(true);
    auto bq = b_qkv.clone().requires_grad_(true), wo = w_out.clone().requires_grad_(true);
    torch::Tensor h, loss;
    {
      device::Autocast ac(torch::kCPU, true);
      auto qkv = model::linear(norm->matmul_input(x), wq, bq).view({3, 70, 3, 2, 16});
      auto heads = [&](int64_t i) { return qkv.select(2, i).transpose(1, 2); };
      auto a = model::bf16_attention(heads(0), heads(1), heads(2), {}, mask, 0.25);
      h = model::act_dropout(a.transpose(1, 2).reshape({3, 70, 32}), config::Activation::kGelu, 0.1,
                             true);
      auto logits = model::linear(h, wo).view({3 * 70, 301});
      loss = tasks::cross_entropy(logits, target, 0.9, 0.1 / 301).loss_sum;
    }
    loss.backward();
    return std::vector<torch::Tensor>{h.detach(),
                                      loss.detach(),
                                      x.grad(),
                                      wq.grad(),
                                      bq.grad(),
                                      wo.grad(),
                                      norm->weight.grad().clone(),
                                      norm->bias.grad().clone()};
  };
  auto one = run(1), two = run(2);
  platform::set_threads(before);
  EXPECT_EQ(one[0].scalar_type(), torch::kBFloat16);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_TRUE(torch::equal(one[i], two[i])) << i;
}

// `ropelab info` says which path the bf16 products that stay bf16 take: libtorch's bf16 mm where
// the CPU has AMX (or oneDNN's gemm is not reachable), oneDNN's gemm elsewhere, and
// ROPELAB_BF16_PRODUCTS forces one; an unknown value warns and keeps the machine's choice. Where
// oneDNN has no bf16 gemm for the CPU (AVX2), both are its sgemm on widened operands.
TEST(Platform, InfoNamesTheBf16ProductsPath) {
  auto r = test::run(test::ropelab_bin() + " info");
  ASSERT_EQ(r.code, 0) << r.out;
  const bool amx = r.out.find("amx_bf16=1") != std::string::npos;
  const bool widened = !util::bf16_gemm_native() && util::bf16_gemm_available();
  const bool mm = amx || !util::bf16_gemm_available();
  const char* machines = widened ? "bf16_products: oneDNN's sgemm on bf16 widened to float32"
                         : mm    ? "bf16_products: libtorch's bf16 mm"
                                 : "bf16_products: oneDNN's gemm";
  EXPECT_NE(r.out.find(machines), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("the attention and the dense layers on AMX tiles") != std::string::npos,
            util::amx::available())
      << r.out;
  auto forced = test::run("ROPELAB_BF16_PRODUCTS=mm " + test::ropelab_bin() + " info");
  EXPECT_NE(forced.out.find(widened ? machines : "bf16_products: libtorch's bf16 mm"),
            std::string::npos)
      << forced.out;
  auto odd = test::run("ROPELAB_BF16_PRODUCTS=fast " + test::ropelab_bin() + " info");
  ASSERT_EQ(odd.code, 0) << odd.out;
  EXPECT_NE(odd.out.find("ROPELAB_BF16_PRODUCTS=fast: expected mm or gemm"), std::string::npos)
      << odd.out;
  EXPECT_NE(odd.out.find(machines), std::string::npos) << odd.out;
  // Without oneDNN's sgemm (ROPELAB_FP32_GEMM=blas) a CPU with neither AVX-512 nor oneDNN's bf16
  // gemm has only libtorch's own bf16 mm, and info says that it is slow there.
  auto blas = test::run("ROPELAB_FP32_GEMM=blas " + test::ropelab_bin() + " info");
  ASSERT_EQ(blas.code, 0) << blas.out;
  const bool slow = !util::bf16_gemm_native() && !vec::bf16_simd() && !amx;
  EXPECT_EQ(blas.out.find("bf16_products: libtorch's bf16 mm, with no fast kernel for this CPU") !=
                std::string::npos,
            slow)
      << blas.out;
  EXPECT_EQ(r.out.find("no fast kernel") != std::string::npos, util::bf16_products_slow()) << r.out;
}

// `ropelab` starts with OpenMP's workers told to sleep when idle (they would otherwise spin on
// the cores OpenBLAS's threads need); a policy the user set is kept.
TEST(Platform, OpenMpWorkersSleepWhenIdleUnlessTheUserSaidOtherwise) {
  // With float32 matmuls on OpenBLAS the workers sleep; on oneDNN's sgemm (all work on OpenMP's
  // pool) libgomp's default spin stays.
  auto r = test::run("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT " + test::ropelab_bin() + " info");
  ASSERT_EQ(r.code, 0) << r.out;
  const bool onednn = r.out.find("fp32_dense_layers: oneDNN sgemm\n") != std::string::npos;
  EXPECT_NE(r.out.find(onednn ? "omp_wait_policy: default" : "omp_wait_policy: PASSIVE\n"),
            std::string::npos)
      << r.out;
  auto blas = test::run("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ROPELAB_FP32_GEMM=blas " +
                        test::ropelab_bin() + " info");
  ASSERT_EQ(blas.code, 0) << blas.out;
  EXPECT_NE(blas.out.find("fp32_dense_layers: BLAS (libtorch)\n"), std::string::npos) << blas.out;
  EXPECT_NE(blas.out.find("omp_wait_policy: PASSIVE\n"), std::string::npos) << blas.out;
  auto kept = test::run("OMP_WAIT_POLICY=ACTIVE " + test::ropelab_bin() + " info");
  ASSERT_EQ(kept.code, 0) << kept.out;
  EXPECT_NE(kept.out.find("omp_wait_policy: ACTIVE\n"), std::string::npos) << kept.out;
  auto off = test::run("env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT ROPELAB_KEEP_OMP_WAIT=1 " +
                       test::ropelab_bin() + " info");
  EXPECT_NE(off.out.find("omp_wait_policy: default"), std::string::npos) << off.out;
}

// `ropelab` keeps freed memory and asks for huge pages (page faults were half the step on a
// virtual machine); ROPELAB_KEEP_MALLOC=1 keeps glibc's defaults.
TEST(Platform, MallocKeepsFreedMemoryInHugePagesUnlessTheUserSaidOtherwise) {
  auto r =
      test::run("env -u GLIBC_TUNABLES -u ROPELAB_KEEP_MALLOC " + test::ropelab_bin() + " info");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("malloc: keeps freed memory (no mmap, no trim), transparent huge pages\n"),
            std::string::npos)
      << r.out;
  auto off =
      test::run("env -u GLIBC_TUNABLES ROPELAB_KEEP_MALLOC=1 " + test::ropelab_bin() + " info");
  ASSERT_EQ(off.code, 0) << off.out;
  EXPECT_NE(off.out.find("malloc: glibc defaults\n"), std::string::npos) << off.out;
}

}  // namespace
}  // namespace ropelab
