// Tiled online-softmax attention (model/tiled_attention.h) against the quadratic form: outputs
// and gradients for every mask (causal, window, chunk, key padding, documents, decoding offset),
// tile edges (T not a multiple of the tile, T = 1, all-padding rows), bf16 inputs, every
// score-bias family through its position module (gradients to its parameters too); the quadratic
// reference against the model's own softmax attention; and tile skipping that never drops an
// allowed pair.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <array>
#include <string>
#include <vector>

#include "config/schema.h"
#include "model/attention.h"
#include "model/position/position.h"
#include "model/tiled_attention.h"
#include "util/device.h"

namespace ropelab::model {
namespace {

struct Case {
  std::string name;
  TileMask mask;
  int64_t T, S;
  TileSizes tiles;
};

std::vector<Case> cases() {
  const int64_t B = 2;
  std::vector<Case> out;
  auto add = [&](const std::string& name, TileMask m, int64_t T, int64_t S, TileSizes t) {
    out.push_back({name, std::move(m), T, S, t});
  };
  add("bidirectional", {}, 37, 37, {8, 16});
  add("one tile", {}, 5, 5, {128, 256});
  TileMask causal;
  causal.causal = true;
  add("causal", causal, 45, 45, {8, 8});
  add("causal, one query", causal, 1, 1, {8, 8});
  add("causal, tiles of one", causal, 9, 9, {1, 1});
  TileMask window = causal;
  window.window = 7;
  add("causal window", window, 50, 50, {8, 4});
  TileMask bi_window;
  bi_window.window = 5;
  add("bidirectional window", bi_window, 33, 33, {4, 8});
  TileMask chunk = causal;
  chunk.chunk = 12;
  add("causal chunks", chunk, 40, 40, {8, 8});
  TileMask offset = causal;
  offset.q_offset = 20;
  add("decoding offset", offset, 6, 26, {4, 8});
  TileMask pad = causal;
  pad.key_pad_BS = torch::ones({B, 30}, torch::kBool);
  pad.key_pad_BS.index_put_({1, torch::indexing::Slice(17, torch::indexing::None)}, false);
  add("causal + padding", pad, 30, 30, {8, 8});
  TileMask all_pad;
  all_pad.key_pad_BS = torch::ones({B, 12}, torch::kBool);
  all_pad.key_pad_BS.index_put_({0}, false);  // sequence 0: every key is padding
  add("all-padding rows", all_pad, 12, 12, {4, 4});
  TileMask docs = causal;
  docs.doc_q_BT = torch::tensor({0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1},
                                torch::kInt64)
                      .view({B, 20});
  docs.doc_k_BS = docs.doc_q_BT;
  add("documents", docs, 20, 20, {8, 4});
  return out;
}

std::vector<torch::Tensor> grads_of(const torch::Tensor& out, const torch::Tensor& g,
                                    const std::vector<torch::Tensor>& inputs) {
  return torch::autograd::grad({out}, inputs, {g});
}

TEST(TiledAttention, EqualsTheQuadraticFormWithGradients) {
  // Both row paths: the CPU's fused passes, and the ATen ops other devices run.
  torch::manual_seed(3);
  for (bool fused : {true, false})
    for (auto c : cases()) {
      SCOPED_TRACE(c.name + (fused ? ", fused rows" : ", ATen rows"));
      c.tiles.fused_rows = fused;
      const int64_t B = 2, N = 3, H = 16;
      auto q = torch::randn({B, N, c.T, H}, torch::dtype(torch::kFloat64).requires_grad(true));
      auto k = torch::randn({B, N, c.S, H}, torch::dtype(torch::kFloat64).requires_grad(true));
      auto v = torch::randn({B, N, c.S, H}, torch::dtype(torch::kFloat64).requires_grad(true));
      // float32 inputs (what the kernel computes in); the reference in float64.
      auto q32 = q.detach().to(torch::kFloat32).requires_grad_(true);
      auto k32 = k.detach().to(torch::kFloat32).requires_grad_(true);
      auto v32 = v.detach().to(torch::kFloat32).requires_grad_(true);
      auto want = tiled_attention_reference(q, k, v, c.mask);
      auto got = tiled_attention(q32, k32, v32, c.mask, {}, c.tiles);
      ASSERT_EQ(got.sizes(), want.sizes());
      EXPECT_LT((got.to(torch::kFloat64) - want).abs().max().item<double>(), 2e-6);
      auto g = torch::randn_like(want);
      auto gw = grads_of(want, g, {q, k, v});
      auto gg = grads_of(got, g.to(torch::kFloat32), {q32, k32, v32});
      for (size_t i = 0; i < 3; ++i)
        EXPECT_LT((gg[i].to(torch::kFloat64) - gw[i]).abs().max().item<double>(), 1e-5)
            << "gradient " << i;
    }
}

struct BiasCase {
  std::string name;
  config::PositionConfig pos;
  bool causal;
  int64_t T, S;  // queries at S - T.. (decoding when T < S)
};

std::vector<BiasCase> bias_cases() {
  auto pos = [](auto opts) {
    config::PositionConfig p;
    p.opts = opts;
    return p;
  };
  config::KerpleConfig power;
  power.kernel = config::KerpleKernel::kPower;
  config::FireConfig fire;
  fire.threshold = 16;
  return {{"t5 causal", pos(config::T5Config{}), true, 29, 29},
          {"t5 bidirectional", pos(config::T5Config{}), false, 29, 29},
          {"t5 decoding", pos(config::T5Config{}), true, 5, 26},
          {"alibi", pos(config::AlibiConfig{}), true, 29, 29},
          {"alibi bidirectional", pos(config::AlibiConfig{}), false, 21, 21},
          {"kerple log", pos(config::KerpleConfig{}), true, 29, 29},
          {"kerple power, decoding", pos(power), true, 3, 30},
          {"fire", pos(fire), true, 29, 29},
          {"fire bidirectional", pos(fire), false, 21, 21},
          {"fox", pos(config::FoxConfig{}), true, 29, 29}};
}

TEST(TiledAttention, EveryScoreBiasFamilyEqualsTheQuadraticFormWithGradients) {
  // Each tile's bias computed on the fly (T5's buckets, ALiBi and Kerple as one value per
  // distance, FIRE's MLP per tile, FoX's row and column terms) gives the quadratic form's
  // outputs and gradients, the family's own parameters' included.
  torch::manual_seed(11);
  for (bool fused : {true, false})
    for (const auto& c : bias_cases()) {
      SCOPED_TRACE(c.name + (fused ? ", fused rows" : ", ATen rows"));
      const int64_t B = 2, N = 3, H = 8, D = N * H;
      auto module = make_position(c.pos, PositionDims{D, N, H, c.causal, 1});
      torch::NoGradGuard no_grad;
      for (auto& p : module->parameters()) p.normal_(0.0, 0.5);
      torch::AutoGradMode grad_on(true);
      auto q = torch::randn({B, N, c.T, H}, torch::requires_grad(true));
      auto k = torch::randn({B, N, c.S, H}, torch::requires_grad(true));
      auto v = torch::randn({B, N, c.S, H}, torch::requires_grad(true));
      auto x = torch::randn({B, c.T, D});
      TileMask mask;
      mask.causal = c.causal;
      mask.q_offset = c.S - c.T;
      std::vector<torch::Tensor> inputs{q, k, v};
      for (auto& p : module->parameters()) inputs.push_back(p);
      auto run = [&](bool tiled) {
        PosCache pc = module->prepare(c.T, c.S, c.S - c.T, 0, torch::kCPU);
        ScoreBias bias = module->score_bias(pc);
        if (module->uses_content())
          bias = bias.plus(module->content_bias(LayerContent{x, q, k, {}, 0, nullptr}, pc));
        EXPECT_TRUE(bias.defined() && bias.tileable());
        return tiled ? tiled_attention(q, k, v, mask, bias, {8, 4, fused})
                     : tiled_attention_reference(q, k, v, mask, bias);
      };
      auto got = run(true), want = run(false);
      EXPECT_LT((got - want).abs().max().item<float>(), 2e-5);
      auto g = torch::randn_like(got);
      auto gg = torch::autograd::grad({got}, inputs, {g}, false, false, true);
      auto gw = torch::autograd::grad({want}, inputs, {g}, false, false, true);
      ASSERT_EQ(gg.size(), gw.size());
      for (size_t i = 0; i < gg.size(); ++i) {
        ASSERT_EQ(gg[i].defined(), gw[i].defined()) << "input " << i;
        if (!gw[i].defined()) continue;
        const double scale = std::max(1.0, gw[i].abs().max().item<double>());
        EXPECT_LT((gg[i] - gw[i]).abs().max().item<double>() / scale, 5e-5) << "input " << i;
      }
      if (module->parameters().empty()) continue;
      // The family learns through the tiled kernel: some parameter gets a non-zero gradient.
      double most = 0;
      for (size_t i = 3; i < gg.size(); ++i)
        if (gg[i].defined()) most = std::max(most, gg[i].abs().max().item<double>());
      EXPECT_GT(most, 1e-4);
    }
}

TEST(TiledAttention, ABiasTileIsTheWholeBiasNarrowed) {
  // Property: any tile of a bias is the same block of its whole, for every part.
  torch::manual_seed(13);
  for (const auto& c : bias_cases()) {
    SCOPED_TRACE(c.name);
    auto module = make_position(c.pos, PositionDims{12, 3, 4, c.causal, 1});
    PosCache pc = module->prepare(c.T, c.S, c.S - c.T, 0, torch::kCPU);
    auto x = torch::randn({2, c.T, 12}), q = torch::randn({2, 3, c.T, 4});
    ScoreBias bias = module->score_bias(pc);
    if (module->uses_content())
      bias = bias.plus(module->content_bias(LayerContent{x, q, q, {}, 0, nullptr}, pc));
    auto whole = bias.whole();
    EXPECT_EQ(whole.size(-2), c.T);
    EXPECT_EQ(whole.size(-1), c.S);
    for (int64_t q0 : {int64_t{0}, c.T / 3})
      for (int64_t k0 : {int64_t{0}, c.S / 2}) {
        const int64_t q1 = std::min(c.T, q0 + 5), k1 = std::min(c.S, k0 + 7);
        auto want = whole.narrow(-2, q0, q1 - q0).narrow(-1, k0, k1 - k0);
        EXPECT_TRUE(torch::allclose(bias.tile(q0, q1, k0, k1), want, 1e-6, 1e-6))
            << q0 << "," << k0;
      }
  }
}

TEST(TiledAttention, ARelativeTileIsTheGatherOfItsDistancesWithDiagonalSumGradients) {
  // The Toeplitz view (a strided read and a flip) against an explicit gather
  // rel[n, t - s + S - 1]; its gradient (diagonal sums) against autograd through the gather.
  torch::manual_seed(17);
  const int64_t N = 3, T = 11, S = 13, R = T + S - 1;
  auto rel = torch::randn({N, R}, torch::requires_grad(true));
  for (auto [q0, q1, k0, k1] : std::vector<std::array<int64_t, 4>>{{0, T, 0, S},
                                                                   {0, 1, 0, 1},
                                                                   {T - 1, T, 0, S},
                                                                   {0, T, S - 1, S},
                                                                   {3, 8, 5, 13},
                                                                   {10, 11, 12, 13},
                                                                   {4, 9, 0, 3}}) {
    SCOPED_TRACE(std::to_string(q0) + "," + std::to_string(k0));
    const int64_t tq = q1 - q0, tk = k1 - k0;
    auto idx = (torch::arange(q0, q1).view({tq, 1}) - torch::arange(k0, k1).view({1, tk})) + S - 1;
    auto want = rel.index_select(1, idx.flatten()).view({N, tq, tk});
    auto got = relative_tile(rel, S, q0, q1, k0, k1);
    EXPECT_TRUE(torch::equal(got, want));
    auto g = torch::randn({N, tq, tk});
    auto gw = torch::autograd::grad({want}, {rel}, {g})[0];
    auto gg = torch::autograd::grad({got}, {rel}, {g})[0];
    EXPECT_LT((gg - gw).abs().max().item<float>(), 1e-5);
    EXPECT_GT(gw.abs().sum().item<float>(), 0.0F);
    // float64: the strided-canvas path (the one other devices take).
    auto g64 = torch::zeros({N, R}, torch::kFloat64);
    relative_tile_grad(g64, g.to(torch::kFloat64), S, q0, k0);
    EXPECT_LT((g64 - gw.to(torch::kFloat64)).abs().max().item<double>(), 1e-5);
  }
}

TEST(TiledAttention, RowsThatSeeNoKeyAreZeroWithNoGradient) {
  TileMask m;
  m.key_pad_BS = torch::zeros({1, 6}, torch::kBool);
  auto q = torch::randn({1, 2, 6, 8}, torch::requires_grad(true));
  auto k = torch::randn({1, 2, 6, 8}, torch::requires_grad(true));
  auto v = torch::randn({1, 2, 6, 8}, torch::requires_grad(true));
  auto out = tiled_attention(q, k, v, m, {}, {4, 4});
  EXPECT_TRUE(torch::isfinite(out).all().item<bool>());
  EXPECT_EQ(out.abs().max().item<float>(), 0.0F);
  out.sum().backward();
  for (const auto& t : {q, k, v}) EXPECT_EQ(t.grad().abs().max().item<float>(), 0.0F);
}

TEST(TiledAttention, ReferenceIsTheModelsSoftmaxAttention) {
  // The quadratic reference is the attention the model computes, on every row that sees a key.
  torch::manual_seed(5);
  const int64_t B = 2, N = 2, T = 24, H = 8;
  auto q = torch::randn({B, N, T, H}), k = torch::randn({B, N, T, H}),
       v = torch::randn({B, N, T, H});
  AttnMask am;
  am.causal = true;
  am.key_pad_BS = torch::ones({B, T}, torch::kBool);
  am.key_pad_BS.index_put_({1, torch::indexing::Slice(15, torch::indexing::None)}, false);
  TileMask tm;
  tm.causal = true;
  tm.key_pad_BS = am.key_pad_BS;
  auto want = softmax_attention(q, k, v, torch::Tensor(), am, 0, 0.0, false);
  auto got = tiled_attention_reference(q, k, v, tm);
  EXPECT_LT((got - want).abs().max().item<float>(), 1e-5);
}

TEST(TiledAttention, TheModelsLongSequencesRunTiledAndEqualTheQuadraticForm) {
  // From kTiledFrom on, softmax_attention takes the tiled kernel (without a bias or dropout):
  // the same function, outputs and gradients, under a causal mask with padding.
  torch::manual_seed(9);
  const int64_t B = 2, N = 2, T = kTiledFrom + 37, H = 16;
  EXPECT_TRUE(uses_tiled_attention(torch::kCPU, false, false, T, T));
  EXPECT_FALSE(uses_tiled_attention(torch::kCPU, true, false, T, T));
  EXPECT_FALSE(uses_tiled_attention(torch::kCPU, false, true, T, T));
  EXPECT_FALSE(uses_tiled_attention(torch::kCPU, false, false, 1, T));  // decoding
  auto q = torch::randn({B, N, T, H}, torch::requires_grad(true));
  auto k = torch::randn({B, N, T, H}, torch::requires_grad(true));
  auto v = torch::randn({B, N, T, H}, torch::requires_grad(true));
  AttnMask am;
  am.causal = true;
  am.key_pad_BS = torch::ones({B, T}, torch::kBool);
  am.key_pad_BS.index_put_({1, torch::indexing::Slice(T - 100, torch::indexing::None)}, false);
  TileMask tm;
  tm.causal = true;
  tm.key_pad_BS = am.key_pad_BS;
  auto got = softmax_attention(q, k, v, torch::Tensor(), am, 0, 0.1, /*training=*/false);
  auto want = tiled_attention_reference(q, k, v, tm);
  EXPECT_LT((got - want).abs().max().item<float>(), 1e-5);
  auto g = torch::randn_like(got);
  auto gg = grads_of(got, g, {q, k, v}), gw = grads_of(want, g, {q, k, v});
  for (size_t i = 0; i < 3; ++i)
    EXPECT_LT((gg[i] - gw[i]).abs().max().item<float>(), 1e-4) << "gradient " << i;
  // A position family's score bias goes through too (ALiBi: tiled, never stored whole).
  config::PositionConfig alibi;
  alibi.opts = config::AlibiConfig{};
  auto module = make_position(alibi, PositionDims{N * H, N, H, true, 1});
  ScoreBias bias = module->score_bias(module->prepare(T, T, 0, 0, torch::kCPU));
  EXPECT_TRUE(uses_tiled_attention(torch::kCPU, !bias.tileable(), false, T, T));
  auto with_bias = softmax_attention(q, k, v, bias, am, 0, 0.0, false);
  auto want_bias = tiled_attention_reference(q, k, v, tm, bias);
  EXPECT_LT((with_bias - want_bias).abs().max().item<float>(), 1e-5);
  EXPECT_GT((want_bias - want).abs().max().item<float>(), 1e-2) << "the bias changes the output";
}

TEST(TiledAttention, BFloat16InputsWithinTolerance) {
  torch::manual_seed(7);
  TileMask m;
  m.causal = true;
  m.window = 20;
  const int64_t B = 1, N = 2, T = 70, H = 32;
  auto q = torch::randn({B, N, T, H}), k = torch::randn({B, N, T, H}),
       v = torch::randn({B, N, T, H});
  auto qb = q.to(torch::kBFloat16).requires_grad_(true);
  auto kb = k.to(torch::kBFloat16).requires_grad_(true);
  auto vb = v.to(torch::kBFloat16).requires_grad_(true);
  auto got = tiled_attention(qb, kb, vb, m, {}, {16, 32});
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  // Against float32 math on the same bf16-rounded inputs: only the output's rounding differs.
  auto want =
      tiled_attention_reference(qb.detach().to(torch::kFloat32), kb.detach().to(torch::kFloat32),
                                vb.detach().to(torch::kFloat32), m);
  EXPECT_LT((got.to(torch::kFloat32) - want).abs().max().item<float>(), 2e-2);
  got.to(torch::kFloat32).sum().backward();
  EXPECT_TRUE(torch::isfinite(qb.grad().to(torch::kFloat32)).all().item<bool>());
  // With a score bias (relative and row/column parts) under bf16 autocast, as the model runs:
  // the bias stays float32, the output bf16, within the same tolerance.
  ScoreBias bias;
  bias.T = T;
  bias.S = T;
  bias.rel_NR = torch::randn({N, 2 * T - 1});
  bias.row_BNT = torch::randn({B, N, T});
  bias.col_BNS = torch::randn({B, N, T});
  torch::Tensor with_bias;
  {
    device::Autocast autocast(torch::kCPU, true);
    with_bias = tiled_attention(qb, kb, vb, m, bias, {16, 32});
  }
  EXPECT_EQ(with_bias.scalar_type(), torch::kBFloat16);
  auto want_bias =
      tiled_attention_reference(qb.detach().to(torch::kFloat32), kb.detach().to(torch::kFloat32),
                                vb.detach().to(torch::kFloat32), m, bias);
  EXPECT_LT((with_bias.to(torch::kFloat32) - want_bias).abs().max().item<float>(), 2e-2);
  EXPECT_GT((want_bias - want).abs().max().item<float>(), 0.1) << "the bias changes the output";
}

TEST(TiledAttention, SkippedTilesHoldNoAllowedPair) {
  // Property: over many masks and tile shapes, a tile tile_may_attend rules out has no allowed
  // pair in the quadratic mask, and the window really skips work (fewer tiles than causal).
  for (int64_t window : {0, 1, 3, 9}) {
    for (int64_t chunk : {0, 4, 7}) {
      for (bool causal : {false, true}) {
        for (int64_t off : {0, 5}) {
          TileMask m;
          m.causal = causal;
          m.window = window;
          m.chunk = chunk;
          m.q_offset = off;
          const int64_t T = 23, S = 23 + off;
          for (int64_t tq : {1, 4, 8}) {
            for (int64_t tk : {1, 5, 8}) {
              for (int64_t q0 = 0; q0 < T; q0 += tq) {
                for (int64_t k0 = 0; k0 < S; k0 += tk) {
                  const int64_t q1 = std::min(T, q0 + tq), k1 = std::min(S, k0 + tk);
                  if (tile_may_attend(m, q0, q1, k0, k1)) continue;
                  for (int64_t t = q0; t < q1; ++t)
                    for (int64_t s = k0; s < k1; ++s) {
                      const int64_t i = off + t;
                      bool ok =
                          (!causal || s <= i) &&
                          (window == 0 || (causal ? i - s < window : std::abs(i - s) < window)) &&
                          (chunk == 0 || i / chunk == s / chunk);
                      ASSERT_FALSE(ok) << "window " << window << " chunk " << chunk << " causal "
                                       << causal << " tile " << q0 << "," << k0;
                    }
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST(TiledAttention, WindowSkipsTiles) {
  TileMask global, local;
  global.causal = local.causal = true;
  local.window = 64;
  int64_t n_global = 0, n_local = 0;
  const int64_t T = 4096, tq = 128, tk = 256;
  for (int64_t q0 = 0; q0 < T; q0 += tq)
    for (int64_t k0 = 0; k0 < T; k0 += tk) {
      n_global += tile_may_attend(global, q0, q0 + tq, k0, k0 + tk) ? 1 : 0;
      n_local += tile_may_attend(local, q0, q0 + tq, k0, k0 + tk) ? 1 : 0;
    }
  // Causal: about half of the 512 tiles; a window of 64: one or two per query tile.
  EXPECT_GT(n_global, 250);
  EXPECT_LE(n_local, 2 * T / tq);
}

}  // namespace
}  // namespace ropelab::model
