// Property tests of the position modules, attention kernels and architectures.
#include <set>

#include <ATen/autocast_mode.h>
#include "config/schema.h"

#include "helpers.h"
#include "model/attention.h"
#include "model/position/absolute.h"
#include "model/position/alibi.h"
#include "model/position/rotary.h"
#include "model/position/t5.h"
#include "model/transformer.h"
#include "tensor_helpers.h"
#include "util/error.h"

namespace ropelab::model {
namespace {

using test::close;

PosCache cache_for(PositionModuleImpl& m, int64_t T, int64_t S, int64_t qo = 0, int64_t ko = 0) {
  return m.prepare(T, S, qo, ko, torch::kCPU);
}

RotaryImpl rope(int64_t head_dim, const std::string& pairing = "interleaved") {
  config::RopeConfig c;
  c.pairing = pairing;
  return RotaryImpl(c, PositionDims{head_dim, 1, head_dim, false});
}

// ---- roformer.md test vectors (float64 reference values, float32 tables here)

TEST(Rope, TestVectors) {
  auto q = torch::tensor({1.0, 2.0, 3.0, 4.0}, torch::kFloat64).view({1, 1, 1, 4});
  for (auto [pairing, want] : {std::pair<std::string, std::vector<double>>{
                                   "interleaved", {-1.1426397, 1.9220756, 2.9598507, 4.0297995}},
                               {"half", {-1.9841106, 1.9599007, 2.4623779, 4.0197997}}}) {
    auto m = rope(4, pairing);
    auto c = cache_for(m, 1, 1, 1, 1);  // position 1
    EXPECT_TRUE(close(m.rotate_q(q, c).flatten(), torch::tensor(want, torch::kFloat64), 1e-6, 1e-6))
        << pairing;
  }
}

TEST(Rope, ScoreDependsOnlyOnRelativePosition) {
  auto m = rope(4);
  auto q = torch::tensor({1.0, 2.0, 3.0, 4.0}, torch::kFloat64).view({1, 1, 1, 4});
  auto k = torch::tensor({0.5, -1.0, 2.0, 0.25}, torch::kFloat64).view({1, 1, 1, 4});
  auto score = [&](int64_t mpos, int64_t npos) {
    auto cq = cache_for(m, 1, 1, mpos, npos);
    return (m.rotate_q(q, cq) * m.rotate_k(k, cq)).sum().item<double>();
  };
  EXPECT_NEAR(score(5, 2), 7.9821316, 1e-5);
  EXPECT_NEAR(score(103, 100), 7.9821316, 1e-5);
  // And on random vectors, many offsets, both pairings, head dim 64.
  torch::manual_seed(0);
  for (const char* pairing : {"interleaved", "half"}) {
    auto r = rope(64, pairing);
    auto a = torch::randn({1, 1, 1, 64}), b = torch::randn({1, 1, 1, 64});
    auto s = [&](int64_t mp, int64_t np) {
      auto c = cache_for(r, 1, 1, mp, np);
      return (r.rotate_q(a, c) * r.rotate_k(b, c)).sum().item<double>();
    };
    for (int64_t off : {0, 7, 250, 1000})
      EXPECT_NEAR(s(10 + off, 3 + off), s(10, 3), 1e-3) << pairing;
  }
}

TEST(Rope, PreservesNormAndPartialRotaryKeepsTheRest) {
  torch::manual_seed(1);
  auto m = rope(32);
  auto x = torch::randn({2, 3, 17, 32});
  auto c = cache_for(m, 17, 17, 5, 5);
  EXPECT_TRUE(close(m.rotate_q(x, c).norm(2, -1), x.norm(2, -1), 1e-5, 1e-5));
  config::RopeConfig pc;
  pc.rotary_dim = 8;
  RotaryImpl partial(pc, PositionDims{32, 1, 32, false});
  auto y = partial.rotate_q(x, cache_for(partial, 17, 17, 5, 5));
  using torch::indexing::Slice;
  EXPECT_TRUE(torch::equal(y.index({"...", Slice(8, 32)}), x.index({"...", Slice(8, 32)})));
  EXPECT_TRUE(close(y.norm(2, -1), x.norm(2, -1), 1e-5, 1e-5));
}

TEST(Rope, LinearScalingInterpolatesPositions) {
  config::RopeConfig c;
  c.scaling = "linear";
  c.scale = 4;
  RotaryImpl scaled(c, PositionDims{8, 1, 8, false});
  auto plain = rope(8);
  auto x = torch::randn({1, 1, 1, 8});
  // position 8 under 4x interpolation == position 2 without.
  EXPECT_TRUE(close(scaled.rotate_q(x, cache_for(scaled, 1, 1, 8, 8)),
                    plain.rotate_q(x, cache_for(plain, 1, 1, 2, 2)), 1e-5, 1e-6));
}

TEST(Sinusoidal, TestVector) {
  auto t = SinusoidalImpl::table(1, 1, 4, 10000.0);
  EXPECT_TRUE(
      close(t.flatten(), torch::tensor({0.8414710, 0.5403023, 0.0099998, 0.9999500}), 1e-5, 1e-6));
}

TEST(T5, BucketsMatchTheReferenceTable) {
  auto b = [](int64_t rp, bool bidi) {
    return t5_bucket(torch::tensor({rp}), bidi, 32, 128).item<int64_t>();
  };
  // Bidirectional, key before the query (rp = -distance).
  std::vector<std::pair<std::vector<int64_t>, int64_t>> before = {
      {{8, 11}, 8},   {{12, 15}, 9},  {{16, 22}, 10}, {{23, 31}, 11},
      {{32, 45}, 12}, {{46, 63}, 13}, {{64, 90}, 14}, {{91, 500}, 15}};
  for (int64_t d = 0; d < 8; ++d) EXPECT_EQ(b(-d, true), d);
  for (const auto& [range, bucket] : before)
    for (int64_t d : range) {
      EXPECT_EQ(b(-d, true), bucket) << "distance " << d;
      EXPECT_EQ(b(d, true), bucket + 16) << "distance " << d << " after";
    }
  EXPECT_EQ(b(1, true), 17);
  for (int64_t d = 0; d < 16; ++d) EXPECT_EQ(b(-d, false), d);
  std::vector<std::pair<int64_t, int64_t>> causal = {
      {16, 16}, {19, 17}, {21, 18}, {24, 19}, {27, 20}, {31, 21}, {35, 22},  {40, 23},  {46, 24},
      {52, 25}, {59, 26}, {67, 27}, {77, 28}, {87, 29}, {99, 30}, {113, 31}, {1000, 31}};
  for (auto [d, bucket] : causal) EXPECT_EQ(b(-d, false), bucket) << "causal distance " << d;
  EXPECT_EQ(b(5, false), 0);  // future keys (masked anyway) share bucket 0
}

TEST(Alibi, Slopes) {
  auto s = AlibiImpl::slopes(8);
  EXPECT_TRUE(close(
      s, torch::tensor({0.5, 0.25, 0.125, 0.0625, 0.03125, 0.015625, 0.0078125, 0.00390625})));
  EXPECT_EQ(AlibiImpl::slopes(6).size(0), 6);  // non-power-of-two head counts work
}

TEST(Learned, LongerInputIsAClearError) {
  config::LearnedConfig c;
  c.max_len = 8;
  LearnedImpl m(c, PositionDims{4, 1, 4, false});
  EXPECT_NO_THROW(m.add_to_input(torch::zeros({1, 8, 4}), 0));
  EXPECT_THROW(m.add_to_input(torch::zeros({1, 9, 4}), 0), UserError);
  EXPECT_THROW(m.add_to_input(torch::zeros({1, 1, 4}), 8), UserError);
}

// ---- linear attention equals its quadratic form

TEST(LinearAttention, EqualsQuadraticForm) {
  torch::manual_seed(2);
  int64_t B = 2, N = 2, T = 150, F = 8, H = 6;  // T spans three chunks of 64
  auto pos = rope(F);
  auto c = cache_for(pos, T, T);
  auto qd = torch::rand({B, N, T, F}) + 0.1, kd = torch::rand({B, N, T, F}) + 0.1;
  auto v = torch::randn({B, N, T, H});
  auto pad = torch::ones({B, T}, torch::kBool);
  pad.index_put_({1, torch::indexing::Slice(140, T)}, false);
  for (bool causal : {false, true})
    for (bool rotate : {false, true})
      for (bool padded : {false, true}) {
        auto qn = rotate ? pos.rotate_q(qd, c) : qd, kn = rotate ? pos.rotate_k(kd, c) : kd;
        AttnMask m{padded ? pad : torch::Tensor(), causal};
        auto fast = linear_attention(qn, kn, qd, kd, v, m, 0);
        auto slow = linear_attention_quadratic(qn, kn, qd, kd, v, m, 0);
        EXPECT_TRUE(close(fast, slow, 1e-4, 1e-5))
            << "causal " << causal << " rotate " << rotate << " padded " << padded;
      }
}

// ---- architectures

config::ModelConfig tiny(const std::string& arch, const std::string& pos,
                         const std::string& kernel = "softmax") {
  config::ModelConfig c;
  c.arch = arch;
  c.d_model = 16;
  c.n_heads = 2;
  c.n_layers = 2;
  c.d_ff = 32;
  c.dropout = 0.0;
  c.norm = "pre";
  c.position.type = pos;
  if (pos == "none") c.position.opts = config::NoPositionConfig{};
  if (pos == "sinusoidal") c.position.opts = config::SinusoidalConfig{};
  if (pos == "learned") c.position.opts = config::LearnedConfig{};
  if (pos == "t5") c.position.opts = config::T5Config{};
  if (pos == "rope") c.position.opts = config::RopeConfig{};
  if (pos == "alibi") c.position.opts = config::AlibiConfig{};
  if (pos == "xpos") c.position.opts = config::XposConfig{};
  c.attention.kernel = kernel;
  return c;
}

const std::vector<std::string> kPositions = {"none", "sinusoidal", "learned", "t5",
                                             "rope", "alibi",      "xpos"};

TEST(Architecture, IncrementalDecodingEqualsFullForward) {
  for (const auto& arch : {"decoder", "encdec"})
    for (const auto& pos : kPositions)
      for (const auto& kernel : {"softmax", "linear"}) {
        if ((pos == "t5" || pos == "alibi") && std::string(kernel) == "linear") continue;
        torch::manual_seed(3);
        Transformer m(tiny(arch, pos, kernel), 30);
        m->eval();
        auto tokens = torch::randint(0, 30, {2, 9});
        torch::Tensor mem, mem_pad;
        if (std::string(arch) == "encdec") {
          auto src = torch::randint(0, 30, {2, 7});
          mem_pad = torch::ones({2, 7}, torch::kBool);
          mem_pad.index_put_({0, torch::indexing::Slice(5, 7)}, false);
          mem = m->encode(src, mem_pad);
        }
        auto full = m->decode(tokens, mem, mem_pad);
        DecodeState st;
        std::vector<torch::Tensor> steps;
        steps.push_back(m->decode(tokens.narrow(1, 0, 4), mem, mem_pad, &st));  // a prompt
        for (int64_t t = 4; t < 9; ++t)
          steps.push_back(m->decode(tokens.narrow(1, t, 1), mem, mem_pad, &st));
        EXPECT_TRUE(close(torch::cat(steps, 1), full, 1e-4, 1e-5))
            << arch << " " << pos << " " << kernel;
        EXPECT_EQ(st.offset, 9);
      }
}

TEST(Architecture, NoParameterRegisteredTwiceAndCountsMatchFormulas) {
  int64_t V = 30, D = 16, Fd = 32, L = 2;
  int64_t attn = 4 * (D * D + D), ffn = D * Fd + Fd + Fd * D + D, ln = 2 * D;
  for (const auto& pos : kPositions) {
    int64_t pos_params = pos == "learned" ? 512 * D : pos == "t5" ? 32 * 2 : 0;
    for (const auto& arch : {"decoder", "encoder", "encdec"}) {
      Transformer m(tiny(arch, pos), V, std::string(arch) == "encoder" ? 3 : -1);
      std::set<const void*> seen;
      int64_t total = 0;
      for (const auto& p : m->parameters()) {
        EXPECT_TRUE(seen.insert(p.data_ptr()).second)
            << arch << " " << pos << ": a tensor is registered twice";
        total += p.numel();
      }
      int64_t layer = attn + ffn + 2 * ln;
      int64_t want = 0;
      if (std::string(arch) == "decoder")
        want = V * D + L * layer + ln + pos_params;  // pre-LN final norm
      if (std::string(arch) == "encoder")
        want = V * D + 2 * D + L * layer + ln + pos_params + (D * D + D) + ln + V + (D * D + D) +
               (D * 3 + 3);
      if (std::string(arch) == "encdec")
        want = V * D + 2 * (L * layer + ln + pos_params) + L * (attn + ln);
      EXPECT_EQ(total, want) << arch << " " << pos;
    }
  }
}

// bf16 autocast (the CPU fast path): every architecture and head runs, and stays close to fp32.
TEST(Architecture, Bf16AutocastMatchesFp32Closely) {
  for (const auto& arch : {"decoder", "encoder", "encdec"})
    for (const auto& norm : {"pre", "post"}) {
      torch::manual_seed(5);
      auto cfg = tiny(arch, "rope");
      cfg.norm = norm;
      Transformer m(cfg, 30, std::string(arch) == "encoder" ? 2 : -1);
      m->eval();
      auto tok = torch::randint(7, 30, {2, 9});
      auto run = [&] {
        if (std::string(arch) == "decoder") return m->lm_logits(m->decode(tok));
        if (std::string(arch) == "encoder") {
          auto h = m->encode(tok, torch::ones({2, 9}, torch::kBool));
          return torch::cat({m->mlm_logits(h).flatten().to(torch::kFloat32),
                             m->classify(h).flatten().to(torch::kFloat32)});
        }
        return m->lm_logits(m->decode(tok, m->encode(tok, {}), {}));
      };
      auto ref = run().to(torch::kFloat32);
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
      torch::Tensor got;
      try {
        got = run().to(torch::kFloat32);
      } catch (...) {
        at::autocast::set_cpu_enabled(false);
        throw;
      }
      at::autocast::clear_cache();
      at::autocast::set_cpu_enabled(false);
      EXPECT_TRUE(close(got, ref, 0.05, 0.05)) << arch << " " << norm;
    }
}

TEST(Architecture, T5TableIsOnePerStackSharedByLayers) {
  Transformer m(tiny("decoder", "t5"), 30);
  int64_t tables = 0;
  for (const auto& p : m->named_parameters())
    if (p.key().find("table") != std::string::npos) ++tables;
  EXPECT_EQ(tables, 1);
}

TEST(Architecture, EncoderRespectsPaddingAndHeadsHaveShapes) {
  torch::manual_seed(4);
  for (const auto& pos : kPositions) {
    Transformer m(tiny("encoder", pos), 30, 2);
    m->eval();
    auto tok = torch::randint(7, 30, {1, 6});
    auto pad = torch::ones({1, 6}, torch::kBool);
    auto h1 = m->encode(tok, pad);
    // Appending padding must not change the real positions' outputs.
    auto tok2 = torch::cat({tok, torch::zeros({1, 3}, torch::kInt64)}, 1);
    auto pad2 = torch::cat({pad, torch::zeros({1, 3}, torch::kBool)}, 1);
    auto h2 = m->encode(tok2, pad2).narrow(1, 0, 6);
    EXPECT_TRUE(close(h2, h1, 1e-4, 1e-5)) << pos;
    EXPECT_EQ(m->mlm_logits(h1).sizes(), (std::vector<int64_t>{1, 6, 30}));
    EXPECT_EQ(m->classify(h1).sizes(), (std::vector<int64_t>{1, 2}));
  }
}

}  // namespace
}  // namespace ropelab::model
