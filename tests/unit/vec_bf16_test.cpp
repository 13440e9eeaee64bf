// util/vec_bf16.h's loops over bf16 data against libtorch on the same values, and the AVX-512
// forms (where this CPU has them) against the portable ones: lengths with a tail (not a
// multiple of 16), NaN and infinity, the rounding of every store as c10::BFloat16 rounds.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tensor_helpers.h"
#include "util/random.h"
#include "util/vec_bf16.h"

namespace ropelab {
namespace {

uint16_t* bits(const torch::Tensor& t) {
  return reinterpret_cast<uint16_t*>(t.data_ptr<at::BFloat16>());
}

torch::Tensor bf16(const torch::Tensor& t) { return t.to(torch::kBFloat16).contiguous(); }

// y + b rounded once to bf16, in place, as libtorch's float32 sum converted to bf16; the same
// bits in both forms, on a strided block (ld > cols), NaN and infinity kept.
TEST(VecBf16, BiasAddRoundsOnceAsLibtorch) {
  for (int64_t cols : {1, 15, 16, 17, 64, 70, 129}) {
    const int64_t rows = 5, ld = cols + 3;
    auto y0 = bf16(4 * torch::randn({rows, ld}));
    y0[0][0] = NAN;
    y0[1][cols - 1] = INFINITY;
    auto b = torch::randn({cols});
    auto want = y0.clone();
    want.narrow(1, 0, cols)
        .copy_((y0.narrow(1, 0, cols).to(torch::kFloat32) + b).to(torch::kBFloat16));
    auto y1 = y0.clone(), y2 = y0.clone();
    vec::add_bias_bf16(bits(y1), b.data_ptr<float>(), rows, cols, ld);
    vec::portable::add_bias_bf16(bits(y2), b.data_ptr<float>(), rows, cols, ld);
    SCOPED_TRACE(cols);
    EXPECT_TRUE(torch::equal(y1.isnan(), want.isnan()));
    auto finite = want.isnan().logical_not();
    EXPECT_TRUE(torch::equal(y1.masked_fill(finite.logical_not(), 0),
                             want.masked_fill(finite.logical_not(), 0)));
    EXPECT_TRUE(torch::equal(torch::from_blob(bits(y1), {rows * ld}, torch::kInt16),
                             torch::from_blob(bits(y2), {rows * ld}, torch::kInt16)));
  }
}

// The transposed widening: every element's bits (NaN's payload and infinity too), over blocks
// whose sides are and are not multiples of the 8 x 8 tiles, read from a wider array (ld).
TEST(VecBf16, TransposedWideningIsTheTransposeOfEveryBit) {
  for (int64_t K : {1, 7, 8, 19, 64})
    for (int64_t rows : {1, 8, 13, 24}) {
      const int64_t ld = rows + 5;
      auto src = bf16(torch::randn({K, ld}));
      src[K - 1][rows - 1] = NAN;
      src[0][0] = -INFINITY;
      auto dst = torch::full({rows, K}, 7.0F);
      vec::bf16_to_float_transposed(bits(src), K, rows, ld, dst.data_ptr<float>());
      auto want = src.narrow(1, 0, rows).t().to(torch::kFloat32).contiguous();
      SCOPED_TRACE(::testing::Message() << "K " << K << " rows " << rows);
      EXPECT_TRUE(
          torch::equal(torch::from_blob(dst.data_ptr<float>(), {rows * K}, torch::kInt32),
                       torch::from_blob(want.data_ptr<float>(), {rows * K}, torch::kInt32)));
    }
}

// The bias added to a float32 gemm output: as a bf16 matmul's output (the product rounded to
// bf16) then the bias add above, bit for bit, in both forms.
TEST(VecBf16, BiasAddOnAFloatGemmOutputRoundsTheProductFirst) {
  for (int64_t cols : {1, 15, 16, 17, 64, 70, 129}) {
    const int64_t rows = 5;
    auto acc = 4 * torch::randn({rows, cols});
    acc[1][cols - 1] = INFINITY;
    auto b = torch::randn({cols});
    auto want = (acc.to(torch::kBFloat16).to(torch::kFloat32) + b).to(torch::kBFloat16);
    auto y1 = torch::empty({rows, cols}, torch::kBFloat16), y2 = y1.clone();
    vec::add_bias_from_float_bf16(acc.data_ptr<float>(), b.data_ptr<float>(), bits(y1), rows, cols);
    vec::portable::add_bias_from_float_bf16(acc.data_ptr<float>(), b.data_ptr<float>(), bits(y2),
                                            rows, cols);
    SCOPED_TRACE(cols);
    EXPECT_TRUE(torch::equal(y1, want));
    EXPECT_TRUE(torch::equal(torch::from_blob(bits(y1), {rows * cols}, torch::kInt16),
                             torch::from_blob(bits(y2), {rows * cols}, torch::kInt16)));
  }
}

// Column sums of a bf16 block added to float32 accumulators: libtorch's float32 sums of the same
// values to rounding, and both forms bit for bit (the same order).
TEST(VecBf16, ColumnSumsAddEveryRowInOrder) {
  for (int64_t cols : {3, 16, 64, 100, 130}) {
    const int64_t rows = 33, ld = cols + 1;
    auto g = bf16(torch::randn({rows, ld}));
    auto acc0 = torch::randn({cols});
    auto a1 = acc0.clone(), a2 = acc0.clone();
    vec::add_column_sums_bf16(bits(g), rows, cols, ld, a1.data_ptr<float>());
    vec::portable::add_column_sums_bf16(bits(g), rows, cols, ld, a2.data_ptr<float>());
    auto want = acc0 + g.narrow(1, 0, cols).to(torch::kFloat32).sum(0);
    SCOPED_TRACE(cols);
    EXPECT_TRUE(test::close(a1, want, 1e-5, 1e-5));
    EXPECT_TRUE(torch::equal(a1, a2));
  }
}

// The activation under dropout writes y = act(h) m and d = act'(h) m in bf16: each within one
// bf16 rounding (and the formula's 1.5e-7) of libtorch's float64 GELU, its gradient (through
// autograd) and ReLU; exact zeros where the mask drops; the forms agree to one bf16 step.
TEST(VecBf16, ActivationAndItsDerivativeUnderTheMask) {
  const int64_t n = 1000 + 7;
  auto h = bf16(3 * torch::randn({n}));
  auto m = (torch::rand({n}) > 0.2).to(torch::kFloat32) * 1.25F;
  for (auto act : {vec::Act::kGelu, vec::Act::kGeluTanh, vec::Act::kRelu}) {
    auto y = torch::empty_like(h), d = torch::empty_like(h);
    auto y2 = torch::empty_like(h), d2 = torch::empty_like(h);
    vec::act_mask_forward_bf16(bits(h), m.data_ptr<float>(), bits(y), bits(d), n, act);
    vec::portable::act_mask_forward_bf16(bits(h), m.data_ptr<float>(), bits(y2), bits(d2), n, act);
    auto h64 = h.to(torch::kFloat64).requires_grad_(true);
    auto a = act == vec::Act::kGelu       ? torch::gelu(h64)
             : act == vec::Act::kGeluTanh ? torch::gelu(h64, "tanh")
                                          : torch::relu(h64);
    a.sum().backward();
    auto m64 = m.to(torch::kFloat64);
    SCOPED_TRACE(static_cast<int>(act));
    EXPECT_TRUE(test::close(y.to(torch::kFloat64), a.detach() * m64, 1.0 / 256, 1e-6));
    EXPECT_TRUE(test::close(d.to(torch::kFloat64), h64.grad() * m64, 1.0 / 256, 1e-6));
    EXPECT_TRUE(torch::equal(y.masked_select(m == 0),
                             torch::zeros({(m == 0).sum().item<int64_t>()}, torch::kBFloat16)));
    EXPECT_TRUE(test::close(y.to(torch::kFloat32), y2.to(torch::kFloat32), 1.0 / 128, 1e-6));
    EXPECT_TRUE(test::close(d.to(torch::kFloat32), d2.to(torch::kFloat32), 1.0 / 128, 1e-6));
  }
}

// a * b rounded once: libtorch's bf16 product bit for bit, in place too.
TEST(VecBf16, ProductRoundsOnce) {
  for (int64_t n : {1, 16, 31, 1000}) {
    auto a = bf16(torch::randn({n})), b = bf16(torch::randn({n}));
    auto out = torch::empty_like(a);
    vec::mul_bf16(bits(a), bits(b), bits(out), n);
    EXPECT_TRUE(torch::equal(out, bf16(a.to(torch::kFloat32) * b.to(torch::kFloat32))));
    auto out2 = a.clone();
    vec::portable::mul_bf16(bits(out2), bits(b), bits(out2), n);
    EXPECT_TRUE(torch::equal(out2, out));
  }
}

// Where the stores round with vcvtneps2bf16 (vec::bf16_convert_instruction), they give
// c10::BFloat16's bits for every normal product, ties included (bf16 * bf16 products carry up
// to 16 significant bits, so many land exactly halfway), and zeros of the product's sign where
// the float32 product is denormal; elsewhere the same bits as c10::BFloat16 throughout.
TEST(VecBf16, StoresRoundAsLibtorchButForDenormals) {
  const int64_t n = 4099;
  // Scales from 2^-75 to 2^5: about a tenth of the products fall below float32's normals.
  auto scale = [&] { return torch::pow(2.0, torch::randint(-75, 5, {n}).to(torch::kFloat32)); };
  auto a = bf16(torch::randn({n}) * scale()), b = bf16(torch::randn({n}) * scale());
  auto out = torch::empty_like(a);
  vec::mul_bf16(bits(a), bits(b), bits(out), n);
  auto prod = a.to(torch::kFloat32) * b.to(torch::kFloat32);
  auto want = bf16(prod);
  auto denormal = (prod.abs() < std::numeric_limits<float>::min()) & prod.ne(0);
  ASSERT_GT(denormal.sum().item<int64_t>(), 100);  // the test covers them
  ASSERT_GT((~denormal).sum().item<int64_t>(), 1000);
  EXPECT_TRUE(torch::equal(out.masked_select(~denormal), want.masked_select(~denormal)));
  auto got_denormal = out.masked_select(denormal).to(torch::kFloat32);
  if (vec::bf16_simd() && vec::bf16_convert_instruction()) {
    EXPECT_TRUE(torch::equal(got_denormal, torch::zeros_like(got_denormal)));
    EXPECT_TRUE(
        torch::equal(torch::signbit(got_denormal), torch::signbit(prod.masked_select(denormal))));
  } else {
    EXPECT_TRUE(torch::equal(out.masked_select(denormal), want.masked_select(denormal)));
  }
}

// The residual branch under dropout: x + float(bf16(h m)) and bf16(float(bf16(g)) m), the
// unfused ops' roundings, bit for bit in both forms.
TEST(VecBf16, DropoutAddRoundsAsTheUnfusedOps) {
  for (int64_t n : {1, 16, 37, 1000}) {
    auto x = torch::randn({n}), h = bf16(torch::randn({n})), g = torch::randn({n});
    auto m = (torch::rand({n}) > 0.3).to(torch::kFloat32) * 1.4296875F;  // 1/0.7 in bf16
    auto m16 = m.to(torch::kBFloat16);
    auto want_y = x + (h * m16).to(torch::kFloat32);
    auto want_dh = g.to(torch::kBFloat16) * m16;
    for (int form = 0; form < 2; ++form) {
      auto y = torch::empty_like(x);
      auto dh = torch::empty_like(h);
      (form == 0 ? vec::dropout_add_bf16 : vec::portable::dropout_add_bf16)(
          x.data_ptr<float>(), bits(h), m.data_ptr<float>(), y.data_ptr<float>(), n);
      (form == 0 ? vec::mask_to_bf16 : vec::portable::mask_to_bf16)(
          g.data_ptr<float>(), m.data_ptr<float>(), bits(dh), n);
      SCOPED_TRACE(::testing::Message() << "n " << n << " form " << form);
      EXPECT_TRUE(torch::equal(y, want_y));
      EXPECT_TRUE(torch::equal(dh, want_dh));
    }
  }
}

// One row of logits: max, sum of exp(x - max), sum, first index of the max, against libtorch in
// float32; the gradient (softmax - b) w - [target] a w within one bf16 rounding.
TEST(VecBf16, CrossEntropyRowStatsAndGradient) {
  for (int64_t V : {5, 16, 67, 8000}) {
    auto x = bf16(3 * torch::randn({V}));
    x[V / 2] = 20.0;  // the max, also found again later in a tie
    if (V > 40) x[V - 3] = 20.0;
    auto xf = x.to(torch::kFloat32);
    for (int form = 0; form < 2; ++form) {
      float mx = 0, se = 0, sx = 0;
      int64_t am = -1;
      (form == 0 ? vec::logits_row_stats_bf16 : vec::portable::logits_row_stats_bf16)(
          bits(x), V, &mx, &se, &sx, &am);
      SCOPED_TRACE(::testing::Message() << "V " << V << " form " << form);
      EXPECT_EQ(mx, 20.0F);
      EXPECT_EQ(am, V / 2);
      EXPECT_NEAR(se, torch::exp(xf - 20).sum().item<float>(), 1e-5 * se);
      EXPECT_NEAR(sx, xf.sum().item<float>(), 1e-4 * (1 + xf.abs().sum().item<float>()));
      const float lse = mx + std::log(se), b = 0.01F, w = 0.5F, aw = 0.45F;
      const int64_t target = V - 2;
      auto g = torch::empty_like(x);
      (form == 0 ? vec::cross_entropy_row_grad_bf16 : vec::portable::cross_entropy_row_grad_bf16)(
          bits(x), V, lse, b, w, target, aw, bits(g));
      auto want = (torch::softmax(xf, 0) - b) * w;
      want[target] -= aw;
      EXPECT_TRUE(test::close(g.to(torch::kFloat32), want, 1.0 / 256, 1e-6));
      // Both in one visit: the same stats, the same gradient.
      auto g2 = torch::empty_like(x);
      std::vector<float> tmp(static_cast<size_t>(V));
      float mx2 = 0, se2 = 0, sx2 = 0;
      int64_t am2 = -1;
      if (form == 0)
        vec::cross_entropy_row_fused_bf16(bits(x), V, b, w, target, aw, bits(g2), tmp.data(), &mx2,
                                          &se2, &sx2, &am2);
      else
        vec::portable::cross_entropy_row_fused_bf16(bits(x), V, b, w, target, aw, bits(g2),
                                                    tmp.data(), &mx2, &se2, &sx2, &am2);
      EXPECT_EQ(mx2, mx);
      EXPECT_EQ(am2, am);
      EXPECT_NEAR(se2, se, 1e-6 * se);
      EXPECT_NEAR(sx2, sx, 1e-5 * (1 + std::abs(sx)));
      EXPECT_TRUE(test::close(g2.to(torch::kFloat32), want, 1.0 / 256, 1e-6));
    }
  }
}

// The fused row writes the same bits wherever its gradient lies (32-byte aligned rows are
// written past the cache, others through it) and whichever row it is told comes next.
TEST(VecBf16, FusedCrossEntropyRowIsTheSameAlignedOrNot) {
  for (int64_t V : {16, 37, 8000}) {
    auto x = bf16(4 * torch::randn({2, V}));
    auto run = [&](int64_t offset, const uint16_t* next) {
      auto buf = torch::zeros({V + 16}, torch::kBFloat16);
      std::vector<float> tmp(static_cast<size_t>(V));
      float mx = 0, se = 0, sx = 0;
      int64_t am = -1;
      vec::cross_entropy_row_fused_bf16(bits(x), V, 0.01F, 0.5F, 3, 0.45F, bits(buf) + offset,
                                        tmp.data(), &mx, &se, &sx, &am, next);
      return buf.narrow(0, offset, V).clone();
    };
    auto aligned = run(0, nullptr);  // torch's storage is 64-byte aligned
    SCOPED_TRACE(V);
    EXPECT_TRUE(torch::equal(run(1, nullptr), aligned));
    EXPECT_TRUE(torch::equal(run(0, bits(x) + V), aligned));
    EXPECT_TRUE(torch::equal(run(5, bits(x) + V), aligned));
    EXPECT_NE(aligned.to(torch::kFloat32).abs().sum().item<float>(), 0.0F);
  }
}

// The first index of the max wherever it is (the portable form keeps one per lane of 8 and
// takes the least of those that hold the max): at the row's start, in each lane, at its end,
// with a tie in another lane after it; a NaN first logit stays the max at 0, as a scan gives.
TEST(VecBf16, CrossEntropyRowFindsTheFirstMaxInAnyLane) {
  const int64_t V = 67;
  for (int64_t at : {0, 1, 7, 8, 9, 15, 40, 66}) {
    auto x = bf16(torch::rand({V}));
    x[at] = 5.0;
    if (at + 5 < V) x[at + 5] = 5.0;  // a tie in another lane, later
    if (at + 8 < V) x[at + 8] = 5.0;  // and in the same lane
    for (int form = 0; form < 2; ++form) {
      float mx = 0, se = 0, sx = 0;
      int64_t am = -1;
      (form == 0 ? vec::logits_row_stats_bf16 : vec::portable::logits_row_stats_bf16)(
          bits(x), V, &mx, &se, &sx, &am);
      EXPECT_EQ(mx, 5.0F) << "at " << at << " form " << form;
      EXPECT_EQ(am, at) << "at " << at << " form " << form;
    }
  }
  auto x = bf16(torch::rand({V}));
  x[0] = std::numeric_limits<float>::quiet_NaN();
  float mx = 0, se = 0, sx = 0;
  int64_t am = -1;
  vec::portable::logits_row_stats_bf16(bits(x), V, &mx, &se, &sx, &am);
  EXPECT_TRUE(std::isnan(mx));
  EXPECT_EQ(am, 0);
}

// The fused row from float32 logits (the LM head's widened blocks) is the row of those logits
// rounded to bf16: the same bits of every output, with the max's first index found after the
// rounding (two values that round to the same bf16 tie), in any lane; a NaN first logit is the
// max at 0 in both.
TEST(VecBf16, FusedCrossEntropyRowOfFloat32IsTheRoundedRow) {
  const int64_t V = 83;
  for (int64_t at : {-1, 0, 1, 7, 9, 40, 82}) {
    auto xf = torch::rand({V});
    if (at >= 0) {
      xf[at] = 5.0F;
      if (at + 5 < V) xf[at + 5] = 5.0078F;  // rounds to 5.0: a tie, later
      if (at + 8 < V) xf[at + 8] = 4.999F;   // so does this one, in the same lane
    } else {
      xf[0] = std::numeric_limits<float>::quiet_NaN();
    }
    auto x16 = bf16(xf);
    auto run = [&](auto* x, std::vector<uint16_t>& g, float* st, int64_t* am) {
      std::vector<float> tmp(static_cast<size_t>(V));
      vec::cross_entropy_row_fused_bf16(x, V, 0.01F, 0.5F, 3, 0.45F, g.data(), tmp.data(), st,
                                        st + 1, st + 2, am);
    };
    std::vector<uint16_t> g1(V), g2(V);
    float s1[3], s2[3];
    int64_t am1 = -1, am2 = -1;
    run(xf.data_ptr<float>(), g1, s1, &am1);
    run(static_cast<const uint16_t*>(bits(x16)), g2, s2, &am2);
    SCOPED_TRACE(at);
    EXPECT_EQ(am1, at < 0 ? 0 : at);
    EXPECT_EQ(am1, am2);
    for (int i = 0; i < 3; ++i)  // the same bits, or NaN in both (a NaN's sign may differ)
      EXPECT_TRUE(std::memcmp(&s1[i], &s2[i], sizeof s1[i]) == 0 ||
                  (std::isnan(s1[i]) && std::isnan(s2[i])))
          << i;
    if (at >= 0) {
      EXPECT_EQ(g1, g2);
    }
  }
}

// The dropout factors against their definition: element i of a call is kept where its half of
// mix64(seed ^ (i / 2) C) (the low half for even i) is at least the threshold; any even start,
// odd lengths, lengths past the kernel's blocks, and thresholds of none and all.
TEST(VecKernels, DropoutFactorsFollowTheirDefinition) {
  const uint64_t seed = 0x1234ABCDULL;
  for (uint64_t threshold :
       {uint64_t{0}, uint64_t{1} << 30, uint64_t{0xFFFFFFFF}, uint64_t{1} << 32})
    for (int64_t start : {0, 2, 1000})
      for (int64_t n : {1, 2, 7, 511, 512, 513, 1301}) {
        std::vector<float> out(static_cast<size_t>(n), -1.0F);
        vec::dropout_factors(seed, threshold, start, n, 1.25F, out.data());
        int64_t bad = 0;
        for (int64_t j = 0; j < n; ++j) {
          const int64_t i = start + j;
          const uint64_t r =
              util::mix64(seed ^ static_cast<uint64_t>(i / 2) * 0xD1B54A32D192ED03ULL);
          const uint64_t half = i % 2 == 0 ? r & 0xFFFFFFFFULL : r >> 32;
          bad += out[j] != (half >= threshold ? 1.25F : 0.0F);
        }
        EXPECT_EQ(bad, 0) << "threshold " << threshold << " start " << start << " n " << n;
      }
}

// The softmax row's two entry points: from bf16 scores, and from float32 ones rounded to bf16.
using SoftmaxRow = void (*)(const uint16_t*, const float*, const float*, uint16_t*, int64_t, float*,
                            float*, float*, float);
using SoftmaxRowF32 = void (*)(const float*, const float*, const float*, uint16_t*, int64_t, float*,
                               float*, float*, float);

// A softmax row and its backward through the SIMD (form 0) or portable (form 1) entry points:
// p and dx written in place.
void softmax_row_and_backward(int form, const torch::Tensor& x, const torch::Tensor& b1,
                              const torch::Tensor& b2, const torch::Tensor& g,
                              const torch::Tensor& p, const torch::Tensor& dx,
                              std::vector<float>& tmp, float scale = 1.0F) {
  const int64_t S = x.numel();
  float mx = 0, inv = 0;
  (form == 0 ? SoftmaxRow(vec::softmax_row_bf16) : SoftmaxRow(vec::portable::softmax_row_bf16))(
      bits(x), b1.data_ptr<float>(), b2.data_ptr<float>(), bits(p), S, tmp.data(), &mx, &inv,
      scale);
  (form == 0 ? vec::softmax_backward_row_bf16 : vec::portable::softmax_backward_row_bf16)(
      bits(x), b1.data_ptr<float>(), b2.data_ptr<float>(), mx, inv, bits(g), bits(dx), S,
      tmp.data(), scale);
}

// A softmax row from bf16 scores and two float32 biases, and its backward from the recomputed
// float32 p: libtorch's float32 softmax and its gradient (from that float32 p) within one bf16
// rounding; a fully masked row (every score at -1e30) averages; the forms agree to one bf16 step.
TEST(VecBf16, SoftmaxRowAndItsBackward) {
  for (int64_t S : {1, 9, 16, 257}) {
    auto x = bf16(3 * torch::randn({S}));
    auto b1 = torch::randn({S}), b2 = torch::zeros({S}).masked_fill_(torch::rand({S}) < 0.3, -1e30);
    auto g = bf16(torch::randn({S}));
    std::vector<float> tmp(static_cast<size_t>(S));
    auto want = torch::softmax(x.to(torch::kFloat32) + b1 + b2, 0);
    auto gf = g.to(torch::kFloat32);
    auto want_dx = want * (gf - (want * gf).sum());
    std::vector<torch::Tensor> ps, dxs;
    for (int form = 0; form < 2; ++form) {
      auto p = torch::empty_like(x), dx = torch::empty_like(x);
      softmax_row_and_backward(form, x, b1, b2, g, p, dx, tmp);
      SCOPED_TRACE(::testing::Message() << "S " << S << " form " << form);
      EXPECT_TRUE(test::close(p.to(torch::kFloat32), want, 1.0 / 256, 1e-7));
      EXPECT_TRUE(test::close(dx.to(torch::kFloat32), want_dx, 1.0 / 256, 1e-6));
      ps.push_back(p.to(torch::kFloat32));
      dxs.push_back(dx.to(torch::kFloat32));
    }
    EXPECT_TRUE(test::close(ps[0], ps[1], 1.0 / 128, 1e-7));
    EXPECT_TRUE(test::close(dxs[0], dxs[1], 1.0 / 128, 1e-6));
    // A scale: softmax(x s + b1 + b2), the gradient of x. With s a power of two, the bits of
    // the unscaled row of x s (exact in bf16), its gradient times s.
    for (int form = 0; form < 2; ++form) {
      auto p = torch::empty_like(x), dx = torch::empty_like(x), p1 = torch::empty_like(x),
           dx1 = torch::empty_like(x);
      softmax_row_and_backward(form, x, b1, b2, g, p, dx, tmp, 0.25F);
      softmax_row_and_backward(form, bf16(x.to(torch::kFloat32) * 0.25), b1, b2, g, p1, dx1, tmp);
      EXPECT_TRUE(torch::equal(p, p1)) << "form " << form;
      EXPECT_TRUE(torch::equal(dx, bf16(dx1.to(torch::kFloat32) * 0.25))) << "form " << form;
    }
    // From float32 scores: the bits of the bf16 row they round to.
    for (int form = 0; form < 2; ++form) {
      auto xf = 3 * torch::randn({S}), p = torch::empty_like(x), p1 = torch::empty_like(x);
      float mx = 0, inv = 0;
      (form == 0 ? SoftmaxRowF32(vec::softmax_row_bf16)
                 : SoftmaxRowF32(vec::portable::softmax_row_bf16))(
          xf.data_ptr<float>(), b1.data_ptr<float>(), b2.data_ptr<float>(), bits(p), S, tmp.data(),
          &mx, &inv, 0.125F);
      softmax_row_and_backward(form, bf16(xf), b1, b2, g, p1, torch::empty_like(x), tmp, 0.125F);
      EXPECT_TRUE(torch::equal(p, p1)) << "form " << form;
    }
    auto all_masked = torch::full({S}, -1e30F), p = torch::empty_like(x);
    float mx = 0, inv = 0;
    vec::softmax_row_bf16(bits(x), all_masked.data_ptr<float>(),
                          torch::zeros({S}).data_ptr<float>(), bits(p), S, tmp.data(), &mx, &inv);
    EXPECT_TRUE(test::close(p.to(torch::kFloat32), torch::full({S}, 1.0F / static_cast<float>(S)),
                            1.0 / 256, 1e-7));
  }
}

// The backward from the forward's bf16 p and a float32 gradient of p: dx = p (g - sum p g)
// scale with g rounded to bf16 first, from libtorch's ops on the same bf16 values (float64),
// within one bf16 rounding; zeros where p is 0; both forms agree to one bf16 step.
TEST(VecBf16, SoftmaxBackwardFromTheProbabilities) {
  for (int64_t S : {1, 9, 16, 17, 257}) {
    auto logits = 3 * torch::randn({S});
    logits.narrow(0, S / 2, S - S / 2).masked_fill_(torch::rand({S - S / 2}) < 0.3, -1e30);
    auto p = bf16(torch::softmax(logits, 0));
    auto dp = 2 * torch::randn({S});
    for (float scale : {1.0F, 0.125F, 0.3F}) {
      auto pd = p.to(torch::kFloat64), gd = bf16(dp).to(torch::kFloat64);
      auto want = (pd * (gd - (pd * gd).sum()) * scale).to(torch::kFloat32);
      std::vector<torch::Tensor> dxs;
      for (int form = 0; form < 2; ++form) {
        SCOPED_TRACE(::testing::Message() << "S " << S << " scale " << scale << " form " << form);
        auto dx = torch::full_like(p, 7.0);
        (form == 0 ? vec::softmax_backward_from_p_bf16
                   : vec::portable::softmax_backward_from_p_bf16)(bits(p), dp.data_ptr<float>(),
                                                                  bits(dx), S, scale);
        auto got = dx.to(torch::kFloat32);
        EXPECT_TRUE(test::close(got, want, 1.0 / 256, 1e-6));
        EXPECT_TRUE(
            torch::equal(got.masked_select(p.to(torch::kFloat32) == 0),
                         torch::zeros({(p.to(torch::kFloat32) == 0).sum().item<int64_t>()})));
        dxs.push_back(got);
      }
      EXPECT_TRUE(test::close(dxs[0], dxs[1], 1.0 / 128, 1e-6));
    }
  }
}

// A causal row, masked from `end` on: both forms compute only its first `end` elements (the
// softmax of those alone) and write exact zeros after them, into outputs that held NaNs; a
// learned bias of -1e30 masks as the mask does.
TEST(VecBf16, SoftmaxRowStopsAtItsLastUnmaskedElement) {
  const int64_t S = 257;
  std::vector<float> tmp(static_cast<size_t>(S));
  for (int64_t end : {1, 15, 16, 17, 200, 256}) {
    auto x = bf16(3 * torch::randn({S})), g = bf16(torch::randn({S}));
    auto b1 = torch::randn({S}), b2 = torch::zeros({S});
    b2.narrow(0, end, S - end).fill_(-1e30F);
    if (end > 1) b1[end - 1] = -1e30F;  // masked by the bias instead: the row ends before it
    auto bias = b1 + b2;
    auto want = torch::softmax(x.to(torch::kFloat32) + bias, 0);
    auto gf = g.to(torch::kFloat32);
    auto want_dx = want * (gf - (want * gf).sum());
    for (int form = 0; form < 2; ++form) {
      SCOPED_TRACE(::testing::Message() << "end " << end << " form " << form);
      auto p = torch::full({S}, NAN, torch::kBFloat16),
           dx = torch::full({S}, NAN, torch::kBFloat16);
      softmax_row_and_backward(form, x, b1, b2, g, p, dx, tmp);
      EXPECT_TRUE(test::close(p.to(torch::kFloat32), want, 1.0 / 256, 1e-7));
      EXPECT_TRUE(test::close(dx.to(torch::kFloat32), want_dx, 1.0 / 256, 1e-6));
      for (const auto& t : {p, dx}) {
        auto tail = t.narrow(0, end, S - end).view(torch::kInt16);
        EXPECT_EQ(tail.ne(0).sum().item<int64_t>(), 0);  // +0 bits, not NaN
      }
    }
  }
}

// A LayerNorm row written as bf16 and its backward from a bf16 gradient: libtorch's float32
// layer_norm and its autograd gradients (dx, and the row's share of dw and db, added to what the
// accumulators held) within one bf16 rounding / float32 sums; both forms agree. With a residual's
// gradient dres, dx + dres exactly.
TEST(VecBf16, LayerNormRowAndItsBackward) {
  for (int64_t D : {2, 9, 16, 256, 263}) {
    auto x0 = 2 * torch::randn({D}) + 0.5, w0 = torch::randn({D}), b0 = torch::randn({D});
    auto g = bf16(torch::randn({D}));
    auto x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
    auto b = b0.clone().requires_grad_(true);
    auto want = torch::layer_norm(x.view({1, D}), {D}, w, b, 1e-5).view({D});
    (want * g.to(torch::kFloat32)).sum().backward();
    auto prior = torch::randn({2, D});  // what the accumulators hold before the row
    for (int form = 0; form < 2; ++form) {
      SCOPED_TRACE(::testing::Message() << "D " << D << " form " << form);
      auto y = torch::empty({D}, torch::kBFloat16), dx = torch::empty({D});
      auto acc = prior.clone();
      float mean = 0, rstd = 0;
      (form == 0 ? vec::layer_norm_row_bf16 : vec::portable::layer_norm_row_bf16)(
          x0.data_ptr<float>(), D, w0.data_ptr<float>(), b0.data_ptr<float>(), 1e-5F, bits(y),
          &mean, &rstd);
      EXPECT_TRUE(test::close(y.to(torch::kFloat32), want.detach(), 1.0 / 256, 1e-5));
      EXPECT_NEAR(mean, x0.mean().item<float>(), 1e-5);
      EXPECT_NEAR(rstd, 1 / std::sqrt(x0.var(false).item<float>() + 1e-5F), 1e-4 * rstd);
      auto backward = form == 0 ? vec::layer_norm_backward_row_bf16
                                : vec::portable::layer_norm_backward_row_bf16;
      backward(x0.data_ptr<float>(), D, w0.data_ptr<float>(), mean, rstd, bits(g), nullptr,
               dx.data_ptr<float>(), acc[0].data_ptr<float>(), acc[1].data_ptr<float>());
      EXPECT_TRUE(test::close(dx, x.grad(), 1e-4, 1e-4));
      EXPECT_TRUE(test::close(acc[0] - prior[0], w.grad(), 1e-4, 1e-5));
      EXPECT_TRUE(test::close(acc[1] - prior[1], b.grad(), 1e-4, 1e-5));
      // With the residual's gradient: dx + dres, the float32 sum to the bit.
      auto dres = torch::randn({D}), dx2 = torch::empty({D}), acc2 = prior.clone();
      backward(x0.data_ptr<float>(), D, w0.data_ptr<float>(), mean, rstd, bits(g),
               dres.data_ptr<float>(), dx2.data_ptr<float>(), acc2[0].data_ptr<float>(),
               acc2[1].data_ptr<float>());
      EXPECT_TRUE(torch::equal(dx2, dx + dres));
      EXPECT_TRUE(torch::equal(acc2, acc));
    }
  }
}

// RoPE on a bf16 row, forward and backward, both pairings, against the float64 formula rounded
// once to bf16 (W with tails: halves of 1, 4, 15 and 65; pairs past a multiple of 16), and the
// two forms to the bit (both fuse the same multiply-add).
TEST(VecBf16, RopeRowAndItsBackward) {
  for (int64_t W : {2, 8, 30, 32, 40, 64, 130})
    for (bool interleaved : {false, true})
      for (bool backward : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "W " << W << " interleaved " << interleaved << " backward " << backward);
        auto x = bf16(3 * torch::randn({W}));
        auto c = torch::randn({W}), s = torch::randn({W});
        auto partner = torch::arange(W);
        partner = interleaved ? torch::bitwise_xor(partner, 1) : (partner + W / 2) % W;
        auto xd = x.to(torch::kFloat64), cd = c.to(torch::kFloat64), sd = s.to(torch::kFloat64);
        auto want = backward ? xd * cd + (xd * sd).index_select(0, partner)
                             : xd * cd + xd.index_select(0, partner) * sd;
        std::vector<torch::Tensor> got;
        for (int form = 0; form < 2; ++form) {
          auto y = torch::full({W}, NAN).to(torch::kBFloat16);
          (form == 0 ? vec::rope_row_bf16 : vec::portable::rope_row_bf16)(
              bits(x), c.data_ptr<float>(), s.data_ptr<float>(), bits(y), W, interleaved, backward);
          EXPECT_TRUE(test::close(y.to(torch::kFloat64), want, 1.0 / 256, 1e-6)) << "form " << form;
          got.push_back(y);
        }
        EXPECT_TRUE(torch::equal(got[0], got[1]));
      }
}

}  // namespace
}  // namespace ropelab
