// The 2024-25 challenger families (FoX, CoPE, PoPE, LieRE/ComRoPE, PaTH, M-RoPE): the properties
// their papers promise, checked on the modules directly, and cached decoding equal to the full
// forward pass. Their outputs and gradients against the independent reference are golden cases
// (tests/golden/model_golden_test.cpp).
#include <cmath>

#include "model/attention.h"
#include "model/position/comrope.h"
#include "model/position/cope.h"
#include "model/position/fox.h"
#include "model/position/mrope.h"
#include "model/position/path.h"
#include "model/position/pope.h"
#include "model/position/rotary.h"
#include "model/transformer.h"
#include "model_helpers.h"
#include "tensor_helpers.h"

namespace ropelab::model {
namespace {

using test::close;

PosCache tables_at(PositionModuleImpl& m, int64_t T, int64_t S, int64_t qo, int64_t ko) {
  return m.prepare(T, S, qo, ko, torch::kCPU);
}

// ---- PoPE

// The score of a query at m and a key at n depends on m - n only, and equals the polar form
// sum_c softplus(q_c) softplus(k_c) cos((m - n) theta_c - delta_c), whatever the content.
TEST(Pope, ScoreIsThePolarFormAndDependsOnlyOnTheOffset) {
  torch::manual_seed(1);
  config::PopeConfig cfg;
  PopeImpl m(cfg, PositionDims{8, 1, 8, true});
  {
    torch::NoGradGuard ng;
    m.named_parameters()["phase"].uniform_(-2.0, -0.1);
  }
  auto q = torch::randn({1, 1, 1, 8}), k = torch::randn({1, 1, 1, 8});
  auto delta = m.named_parameters()["phase"].detach().view({8});
  auto theta = torch::pow(10000.0, -torch::arange(8, torch::kFloat64) / 8.0).to(torch::kFloat32);
  auto score = [&](int64_t mp, int64_t np) {
    auto c = tables_at(m, 1, 1, mp, np);
    return (m.rotate_q(q, c) * m.rotate_k(k, c)).sum().item<double>();
  };
  for (auto [mp, np] : std::vector<std::pair<int64_t, int64_t>>{{3, 1}, {10, 2}, {0, 5}}) {
    auto mag = torch::softplus(q).view({8}) * torch::softplus(k).view({8});
    double want =
        (mag * torch::cos(static_cast<double>(mp - np) * theta - delta)).sum().item<double>();
    EXPECT_NEAR(score(mp, np), want, 1e-4) << mp << "," << np;
    EXPECT_NEAR(score(mp + 37, np + 37), score(mp, np), 1e-3) << "shifted by 37";
  }
  // Magnitudes only ever scale the score: at offset 0 with no phase it is their dot product.
  {
    torch::NoGradGuard ng;
    m.named_parameters()["phase"].zero_();
  }
  EXPECT_NEAR(score(4, 4), (torch::softplus(q) * torch::softplus(k)).sum().item<double>(), 1e-4);
}

// The phase is clamped to [-2 pi, 0] as in the paper: beyond it the score no longer changes.
TEST(Pope, PhaseIsClampedToMinusTwoPiAndZero) {
  config::PopeConfig cfg;
  PopeImpl m(cfg, PositionDims{4, 1, 4, false});
  auto k = torch::randn({1, 1, 2, 4});
  auto c = tables_at(m, 2, 2, 0, 0);
  auto at = [&](double phase) {
    torch::NoGradGuard ng;
    m.named_parameters()["phase"].fill_(phase);
    return m.rotate_k(k, c);
  };
  EXPECT_TRUE(close(at(0.5), at(0.0), 0, 0));
  EXPECT_TRUE(close(at(-9.0), at(-2 * M_PI), 0, 0));
  EXPECT_FALSE(close(at(-1.0), at(0.0), 1e-3, 1e-3));
}

// ---- FoX

// The forget-gate bias is log F_ij = sum_{l=j+1..i} log f_l, computed here step by step.
TEST(Fox, BiasIsTheSumOfLogForgetGatesBetweenKeyAndQuery) {
  torch::manual_seed(2);
  config::FoxConfig cfg;
  FoxImpl m(cfg, PositionDims{8, 2, 4, true, 3});
  for (auto& p : m.parameters()) p.data().normal_(0, 0.5);
  auto x = torch::randn({2, 6, 8}), q = torch::randn({2, 2, 6, 4});
  auto c = tables_at(m, 6, 6, 0, 0);
  torch::Tensor none;
  auto bias = m.content_bias(LayerContent{x, q, q, none, 2, nullptr}, c).whole();
  ASSERT_EQ(bias.sizes(), (std::vector<int64_t>{2, 2, 6, 6}));
  auto w = m.named_parameters()["gates.2.weight"], b = m.named_parameters()["gates.2.bias"];
  auto log_f = torch::log(torch::sigmoid(torch::matmul(x, w.t()) + b));  // [B, T, N]
  for (int64_t i = 0; i < 6; ++i)
    for (int64_t j = 0; j <= i; ++j) {
      auto want = torch::zeros({2, 2});
      for (int64_t l = j + 1; l <= i; ++l) want = want + log_f.select(1, l);
      EXPECT_TRUE(close(bias.index({torch::indexing::Slice(), torch::indexing::Slice(), i, j}),
                        want, 1e-5, 1e-5))
          << i << "," << j;
    }
  // Layers have their own gates.
  auto other = m.content_bias(LayerContent{x, q, q, none, 0, nullptr}, c).whole();
  EXPECT_FALSE(close(other, bias, 1e-3, 1e-3));
}

// Gates that never forget (f = 1) leave attention as it is: FoX without RoPE is then NoPE, and
// gates with no weights and bias b are ALiBi with the slope log(1 + e^-b).
TEST(Fox, OpenGatesAreNoPEAndConstantGatesAreALiBi) {
  torch::manual_seed(3);
  auto fox_cfg = test::tiny_model("decoder", "fox");
  Transformer fox(fox_cfg, 30), nope(test::tiny_model("decoder", "none"), 30);
  fox->eval();
  nope->eval();
  torch::NoGradGuard ng;
  auto fp = fox->named_parameters();
  for (const auto& p : nope->named_parameters()) fp[p.key()].copy_(p.value());
  for (auto& p : fp)
    if (p.key().find(".gates.") != std::string::npos)
      p.value().fill_(p.key().find("bias") != std::string::npos ? 40.0 : 0.0);
  auto tokens = torch::randint(0, 30, {2, 9});
  EXPECT_TRUE(close(fox->decode(tokens), nope->decode(tokens), 1e-5, 1e-5));

  config::FoxConfig cfg;
  FoxImpl m(cfg, PositionDims{8, 2, 4, true, 1});
  m.named_parameters()["gates.0.weight"].zero_();
  m.named_parameters()["gates.0.bias"].fill_(1.5);
  auto x = torch::randn({1, 5, 8}), q = torch::randn({1, 2, 5, 4});
  torch::Tensor none;
  auto bias =
      m.content_bias(LayerContent{x, q, q, none, 0, nullptr}, tables_at(m, 5, 5, 0, 0)).whole();
  double slope = std::log1p(std::exp(-1.5));
  auto dist = torch::arange(5).unsqueeze(1) - torch::arange(5).unsqueeze(0);
  auto want = (-slope * dist.to(torch::kFloat32)).expand({1, 2, 5, 5});
  auto causal = torch::ones({5, 5}, torch::kBool).tril();
  EXPECT_TRUE(close(bias.masked_select(causal), want.masked_select(causal), 1e-5, 1e-5));
}

// ---- CoPE

// With every gate open (q . k large), the contextual position of key j seen from query i is the
// token count i - j + 1: CoPE is then a relative position embedding (clamped at npos_max - 1,
// interpolated between integers). With every gate shut, all keys are at position 0.
TEST(Cope, OpenGatesCountTokensAndShutGatesCountNothing) {
  config::CopeConfig cfg;
  cfg.npos_max = 4;
  CopeImpl m(cfg, PositionDims{4, 1, 4, true, 1});
  auto e = m.named_parameters()["embeddings_0"];
  {
    torch::NoGradGuard ng;
    e.copy_(torch::arange(16, torch::kFloat32).view({4, 4}) * 0.1);
  }
  const int64_t T = 6;
  AttnMask causal{{}, true, {}};
  auto mask = causal.with_bias(T, T, 0, torch::kCPU).bias_B1TS;
  auto c = tables_at(m, T, T, 0, 0);
  torch::Tensor x;
  for (double sign : {1.0, -1.0}) {
    auto q = torch::full({1, 1, T, 4}, 10.0), k = torch::full({1, 1, T, 4}, 10.0 * sign);
    auto bias = m.content_bias(LayerContent{x, q, k, mask, 0, nullptr}, c).whole().detach();
    auto z = torch::matmul(q, e.detach()).view({T, 4});  // q . e[p] for p = 0..3
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j <= i; ++j) {
        int64_t p = sign > 0 ? std::min<int64_t>(i - j + 1, 3) : 0;
        EXPECT_NEAR(bias[0][0][i][j].item<double>(), z[i][p].item<double>(), 1e-3)
            << sign << " " << i << "," << j;
      }
  }
  // A fractional count interpolates between the integer embeddings around it: one key whose
  // gate is sigmoid(0) = 0.5 sits halfway between positions 0 and 1.
  auto q = torch::ones({1, 1, 1, 4}), k = torch::zeros({1, 1, 1, 4});
  auto half =
      m.content_bias(LayerContent{x, q, k, torch::Tensor(), 0, nullptr}, tables_at(m, 1, 1, 0, 0))
          .whole();
  auto z = torch::matmul(q, e.detach()).view({4});
  EXPECT_NEAR(half.item<double>(), 0.5 * (z[0].item<double>() + z[1].item<double>()), 1e-5);
}

// ---- LieRE / ComRoPE

ComropeImpl comrope(int64_t block, int64_t head_dim) {
  config::ComropeConfig cfg;
  cfg.block = block;
  return ComropeImpl(cfg, PositionDims{head_dim, 2, head_dim, true});
}

// Untrained, the generators are RoPE's: the rotation equals RoPE's (interleaved pairs) at any
// block size.
TEST(Comrope, StartsAsRoPE) {
  torch::manual_seed(6);
  config::RopeConfig rc;
  RotaryImpl rope(rc, PositionDims{8, 2, 8, true});
  auto x = torch::randn({2, 2, 5, 8});
  auto rc_tables = tables_at(rope, 5, 5, 3, 3);
  for (int64_t block : {2, 4, 8}) {
    auto m = comrope(block, 8);
    auto c = tables_at(m, 5, 5, 3, 3);
    EXPECT_TRUE(close(m.rotate_q(x, c), rope.rotate_q(x, rc_tables), 1e-4, 1e-5)) << block;
  }
}

// With learned (random) generators the rotation stays orthogonal, and the score depends only on
// the offset n - m, for blocks of 2, 4 and the whole head.
TEST(Comrope, LearnedGeneratorsKeepNormsAndRelativeScores) {
  torch::manual_seed(7);
  for (int64_t block : {2, 4, 8}) {
    auto m = comrope(block, 8);
    {
      torch::NoGradGuard ng;
      m.named_parameters()["generators"].normal_(0, 0.7);
    }
    auto q = torch::randn({1, 2, 1, 8}), k = torch::randn({1, 2, 1, 8});
    auto score = [&](int64_t mp, int64_t np) {
      auto c = tables_at(m, 1, 1, mp, np);
      return (m.rotate_q(q, c) * m.rotate_k(k, c)).sum(-1).detach();
    };
    for (auto [mp, np] : std::vector<std::pair<int64_t, int64_t>>{{4, 1}, {0, 6}, {9, 9}}) {
      EXPECT_TRUE(close(score(mp + 23, np + 23), score(mp, np), 1e-3, 1e-3))
          << block << ": " << mp << "," << np;
      auto c = tables_at(m, 1, 1, mp, np);
      EXPECT_TRUE(close(m.rotate_q(q, c).norm(2, -1), q.norm(2, -1), 1e-4, 1e-4)) << block;
    }
    // A learned generator is not RoPE's: the score at the same offset differs from RoPE's.
    config::RopeConfig rc;
    RotaryImpl rope(rc, PositionDims{8, 2, 8, true});
    auto rt = tables_at(rope, 1, 1, 4, 1);
    auto rope_score = (rope.rotate_q(q, rt) * rope.rotate_k(k, rt)).sum(-1);
    EXPECT_FALSE(close(score(4, 1), rope_score, 1e-3, 1e-3)) << block;
  }
}

// ---- PaTH

// Reflections along directions orthogonal to every key leave the keys alone: PaTH is then
// NoPE. With beta = 2 (sigmoid saturated) and one fixed direction w, H = I - 2ww^T is a
// reflection, so a key two steps back is reflected twice (unchanged) and one step back once.
TEST(Path, HouseholderProductsActOnTheKeysBetween) {
  torch::manual_seed(8);
  config::PathConfig cfg;
  PathImpl m(cfg, PositionDims{4, 1, 4, true, 1});
  auto np = m.named_parameters();
  torch::NoGradGuard ng;
  np["w_proj.0.weight"].zero_();
  np["w_proj.0.bias"].copy_(torch::tensor({1.0F, 0.0F, 0.0F, 0.0F}));  // w = e_0 at every step
  np["beta_proj.0.weight"].zero_();
  np["beta_proj.0.bias"].fill_(40.0);  // beta = 2
  auto x = torch::randn({1, 3, 4});
  auto q = torch::randn({1, 1, 3, 4}), k = torch::randn({1, 1, 3, 4});
  auto [s, keys] = m.scores(x, q, k, {}, 0);
  auto flip = k.clone();
  flip.select(-1, 0).neg_();  // H k: the e_0 component reflected
  auto dot = [&](const torch::Tensor& a, const torch::Tensor& b) {
    return (a * b).sum().item<double>() / 2.0;  // / sqrt(4)
  };
  auto qi = [&](int64_t i) { return q.select(2, i); };
  auto kj = [&](const torch::Tensor& t, int64_t j) { return t.select(2, j); };
  EXPECT_NEAR(s[0][0][2][2].item<double>(), dot(qi(2), kj(k, 2)), 1e-5);     // no transform
  EXPECT_NEAR(s[0][0][2][1].item<double>(), dot(qi(2), kj(flip, 1)), 1e-5);  // H_2
  EXPECT_NEAR(s[0][0][2][0].item<double>(), dot(qi(2), kj(k, 0)), 1e-5);     // H_2 H_1 = I
  // Keys orthogonal to w (no e_0 component) pass unchanged: plain dot products.
  auto k_perp = k.clone();
  k_perp.select(-1, 0).zero_();
  auto [s2, keys2] = m.scores(x, q, k_perp, {}, 0);
  auto plain = torch::matmul(q, k_perp.transpose(-2, -1)) / 2.0;
  auto causal = torch::ones({3, 3}, torch::kBool).tril();
  EXPECT_TRUE(close(s2.masked_select(causal), plain.masked_select(causal), 1e-5, 1e-5));
}

// The UT-transform form (one triangular solve) and the sequential reference give the same
// scores, carried keys and gradients, with random directions and strengths, over 40 steps.
TEST(Path, ParallelFormMatchesTheSequentialReference) {
  torch::manual_seed(12);
  config::PathConfig cfg;
  PathImpl m(cfg, PositionDims{16, 2, 8, true, 2});
  auto x = torch::randn({2, 40, 16}, torch::requires_grad());
  auto q = torch::randn({2, 2, 40, 8}), k = torch::randn({2, 2, 40, 8});
  for (int64_t layer : {0, 1}) {
    auto [fast, fast_keys] = m.scores(x, q, k, {}, layer);
    auto [slow, slow_keys] = m.scores(x, q, k, {}, layer, /*sequential=*/true);
    auto causal = torch::ones({40, 40}, torch::kBool).tril();
    EXPECT_TRUE(close(fast.masked_select(causal), slow.masked_select(causal), 1e-4, 1e-4));
    EXPECT_TRUE(close(fast_keys, slow_keys, 1e-4, 1e-4));
    // Not vacuous: the transforms move the scores away from plain q.k.
    auto plain = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(8.0);
    EXPECT_GT((fast - plain).masked_select(causal).abs().max().item<double>(), 0.1);
    auto g_fast = torch::autograd::grad({fast.masked_select(causal).sum()}, {x})[0];
    auto g_slow = torch::autograd::grad({slow.masked_select(causal).sum()}, {x})[0];
    EXPECT_TRUE(close(g_fast, g_slow, 1e-3, 1e-3));
  }
}

// ---- M-RoPE / axial 2-D RoPE

// On text (grid_width 0) M-RoPE is RoPE: the same model gives the same outputs.
TEST(Mrope, OnTextIsExactlyRoPE) {
  for (const char* kernel : {"softmax", "linear"}) {
    torch::manual_seed(10);
    Transformer rope(test::tiny_model("decoder", "rope", kernel), 30);
    Transformer mrope(test::tiny_model("decoder", "mrope", kernel), 30);
    torch::NoGradGuard ng;
    auto mp = mrope->named_parameters();
    for (const auto& p : rope->named_parameters()) mp[p.key()].copy_(p.value());
    auto tokens = torch::randint(0, 30, {2, 11});
    EXPECT_TRUE(close(mrope->decode(tokens), rope->decode(tokens), 1e-6, 1e-6)) << kernel;
  }
}

// On a grid the score depends on the row and column offsets only: moving both tokens by whole
// rows, or along their rows, changes nothing; the same 1-D offset across a row break does.
TEST(Mrope, GridScoresDependOnRowAndColumnOffsets) {
  for (auto sections : {config::MropeSections::kInterleaved, config::MropeSections::kContiguous}) {
    torch::manual_seed(11);
    config::MropeConfig cfg;
    cfg.grid_width = 5;
    cfg.sections = sections;
    MropeImpl m(cfg, PositionDims{8, 1, 8, false});
    auto q = torch::randn({1, 1, 1, 8}), k = torch::randn({1, 1, 1, 8});
    auto score = [&](int64_t qp, int64_t kp) {
      auto c = m.prepare(1, 1, qp, kp, torch::kCPU);
      return (m.rotate_q(q, c) * m.rotate_k(k, c)).sum().item<double>();
    };
    // (row 1, col 3) vs (row 0, col 1): offsets (1, 2).
    double s = score(8, 1);
    EXPECT_NEAR(score(8 + 15, 1 + 15), s, 1e-4);  // three rows down
    EXPECT_NEAR(score(9, 2), s, 1e-4);            // one column right
    // Positions 9 and 2 vs 10 and 3 ... but 4 -> 11 crosses a row break: (1, 1) -> (2, 1)
    // is offset (1, 0), not (1, 2), although the 1-D offset is 7 in both cases.
    EXPECT_GT(std::abs(score(11, 4) - s), 1e-3);
    // The angles: pair i turns by the row (even i / fast half) or the column.
    auto a = m.angles(torch::tensor({13.0F}), 8);  // row 2, column 3
    for (int64_t i = 0; i < 4; ++i) {
      bool col = sections == config::MropeSections::kInterleaved ? i % 2 == 1 : i >= 2;
      double theta = std::pow(10000.0, -2.0 * static_cast<double>(i) / 8.0);
      EXPECT_NEAR(a[0][i].item<double>(), (col ? 3.0 : 2.0) * theta, 1e-6) << i;
    }
  }
}

// ---- all six

// Cached decoding (a prompt, then one token at a time) equals the full forward pass, and beam
// reordering keeps each row's state with its keys.
TEST(Challengers, CachedDecodingEqualsFullForward) {
  for (const char* pos : {"fox", "cope", "pope", "comrope", "path", "mrope"})
    for (bool rope : {false, true}) {
      if (rope && std::string(pos) != "fox") continue;
      torch::manual_seed(4);
      auto cfg = test::tiny_model("decoder", pos);
      if (rope) std::get<config::FoxConfig>(cfg.position.opts).rope = true;
      if (auto* g = std::get_if<config::MropeConfig>(&cfg.position.opts)) g->grid_width = 3;
      Transformer m(cfg, 30);
      for (auto& p : m->named_parameters())  // non-trivial gates, embeddings and phases
        if (p.key().find("position") != std::string::npos) p.value().data().uniform_(-1.5, -0.2);
      m->eval();
      torch::NoGradGuard ng;
      auto tokens = torch::randint(0, 30, {2, 9});
      auto full = m->decode(tokens);
      DecodeState st;
      std::vector<torch::Tensor> steps{m->decode(tokens.narrow(1, 0, 4), {}, {}, &st)};
      for (int64_t t = 4; t < 9; ++t)
        steps.push_back(m->decode(tokens.narrow(1, t, 1), {}, {}, &st));
      EXPECT_TRUE(close(torch::cat(steps, 1), full, 1e-4, 1e-5)) << pos << " rope " << rope;
      // Swap the rows of the cache and decode one more token: row 0 now continues row 1.
      auto next = torch::randint(0, 30, {2, 1});
      st.reorder(torch::tensor({1, 0}));
      auto swapped = m->decode(next, {}, {}, &st);
      auto want = m->decode(torch::cat({tokens.flip(0), next}, 1)).narrow(1, 9, 1);
      EXPECT_TRUE(close(swapped, want, 1e-4, 1e-5)) << pos << " after reorder";
    }
}

// PoPE and ComRoPE act in every architecture; their encoder-decoders decode with the cache
// too.
TEST(Challengers, EncoderDecoderCachedDecodingEqualsFullForward) {
  for (const char* pos : {"pope", "comrope"}) {
    torch::manual_seed(5);
    Transformer m(test::tiny_model("encdec", pos), 30);
    m->eval();
    torch::NoGradGuard ng;
    auto src = torch::randint(0, 30, {2, 7}), tokens = torch::randint(0, 30, {2, 6});
    auto pad = torch::ones({2, 7}, torch::kBool);
    pad.index_put_({1, torch::indexing::Slice(5, 7)}, false);
    auto mem = m->encode(src, pad);
    auto full = m->decode(tokens, mem, pad);
    DecodeState st;
    std::vector<torch::Tensor> steps;
    for (int64_t t = 0; t < 6; ++t)
      steps.push_back(m->decode(tokens.narrow(1, t, 1), mem, pad, &st));
    EXPECT_TRUE(close(torch::cat(steps, 1), full, 1e-4, 1e-5)) << pos;
  }
}

}  // namespace
}  // namespace ropelab::model
