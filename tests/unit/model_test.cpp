// Property tests of the position modules, attention kernels and architectures.
#include <array>
#include <functional>
#include <set>

#include "compat/torch_compat.h"
#include "config/schema.h"

#include "helpers.h"
#include "model/attention.h"
#include "model/dropout.h"
#include "model/heads.h"
#include "model/init.h"
#include "model/model.h"
#include "model/position/absolute.h"
#include "model/position/alibi.h"
#include "model/position/rotary.h"
#include "model/position/t5.h"
#include "model/transformer.h"
#include "model_helpers.h"
#include "tensor_helpers.h"
#include "util/device.h"
#include "util/error.h"

namespace ropelab::model {
namespace {

using test::close;

PosCache cache_for(PositionModuleImpl& m, int64_t T, int64_t S, int64_t qo = 0, int64_t ko = 0) {
  return m.prepare(T, S, qo, ko, torch::kCPU);
}

RotaryImpl rope(int64_t head_dim, const std::string& pairing = "interleaved") {
  config::RopeConfig c;
  c.pairing = config::enum_from<config::RopePairing>(pairing);
  return RotaryImpl(c, PositionDims{head_dim, 1, head_dim, false});
}

// ---- the test vectors of docs/conventions.md (float64 reference values, float32 tables here)

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
  c.scaling.opts = config::LinearScaling{{}, 4.0};
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

// attend(qd, kd, v) on fresh leaf copies of the inputs: its output in float32 and the gradients
// of qd, kd and v for the loss sum(output * g).
using Attend =
    std::function<torch::Tensor(const torch::Tensor&, const torch::Tensor&, const torch::Tensor&)>;
std::vector<torch::Tensor> output_and_grads(const Attend& attend, const torch::Tensor& qd0,
                                            const torch::Tensor& kd0, const torch::Tensor& v0,
                                            const torch::Tensor& g) {
  auto qd = qd0.clone().requires_grad_(), kd = kd0.clone().requires_grad_();
  auto v = v0.clone().requires_grad_();
  auto out = attend(qd, kd, v).to(torch::kFloat32);
  (out * g).sum().backward();
  return {out.detach(), qd.grad(), kd.grad(), v.grad()};
}
constexpr std::array<const char*, 4> kOutputAndGrads{"output", "d qd", "d kd", "d v"};

// Forward and every input's gradient, causal and not, rotated and not, with key padding and
// without: T = 150 spans two chunks of 64 and a padded tail of 22; T = 20 is one short chunk.
TEST(LinearAttention, EqualsQuadraticForm) {
  torch::manual_seed(2);
  const int64_t B = 2, N = 2, F = 8, H = 6;
  for (int64_t T : {150, 20}) {
    auto pos = rope(F);
    auto c = cache_for(pos, T, T);
    auto qd0 = torch::rand({B, N, T, F}) + 0.1, kd0 = torch::rand({B, N, T, F}) + 0.1;
    auto v0 = torch::randn({B, N, T, H}), g = torch::randn({B, N, T, H});
    auto pad = torch::ones({B, T}, torch::kBool);
    pad.index_put_({1, torch::indexing::Slice(T - 10, T)}, false);
    for (bool causal : {false, true})
      for (bool rotate : {false, true})
        for (bool padded : {false, true}) {
          AttnMask m{padded ? pad : torch::Tensor(), causal, {}};
          auto attend = [&](bool fast) -> Attend {
            return [&, fast](const torch::Tensor& qd, const torch::Tensor& kd,
                             const torch::Tensor& v) {
              auto qn = rotate ? pos.rotate_q(qd, c) : qd, kn = rotate ? pos.rotate_k(kd, c) : kd;
              return fast ? linear_attention(qn, kn, qd, kd, v, m, 0)
                          : linear_attention_quadratic(qn, kn, qd, kd, v, m, 0);
            };
          };
          auto fast = output_and_grads(attend(true), qd0, kd0, v0, g);
          auto slow = output_and_grads(attend(false), qd0, kd0, v0, g);
          for (size_t i = 0; i < fast.size(); ++i)
            EXPECT_TRUE(close(fast[i], slow[i], 1e-4, 1e-5))
                << kOutputAndGrads[i] << ": T " << T << " causal " << causal << " rotate " << rotate
                << " padded " << padded;
        }
  }
}

// Under bf16 autocast the chunks' matmuls, and so their key-value states, are bf16; the states'
// prefix sums run in float32. The chunked form stays within bf16's precision of the float32
// quadratic form, in the output and every gradient.
TEST(LinearAttention, ChunkedFormUnderBf16AutocastMatchesFloat32) {
  torch::manual_seed(4);
  const int64_t B = 2, N = 2, T = 200, F = 8, H = 6;  // four chunks, the last one ragged
  auto qd0 = torch::rand({B, N, T, F}) + 0.1, kd0 = torch::rand({B, N, T, F}) + 0.1;
  auto v0 = torch::randn({B, N, T, H}), g = torch::randn({B, N, T, H});
  AttnMask m{torch::Tensor(), true, {}};
  auto chunked_bf16 = [&](const torch::Tensor& qd, const torch::Tensor& kd,
                          const torch::Tensor& v) {
    device::Autocast ac(torch::kCPU, true);
    return linear_attention(qd, kd, qd, kd, v, m, 0);
  };
  auto quadratic = [&](const torch::Tensor& qd, const torch::Tensor& kd, const torch::Tensor& v) {
    return linear_attention_quadratic(qd, kd, qd, kd, v, m, 0);
  };
  auto low = output_and_grads(chunked_bf16, qd0, kd0, v0, g);
  auto ref = output_and_grads(quadratic, qd0, kd0, v0, g);
  for (size_t i = 0; i < low.size(); ++i)
    EXPECT_TRUE(close(low[i], ref[i], 3e-2, 3e-2)) << kOutputAndGrads[i];
}

// The GPU's softmax attention (libtorch's SDPA, 2.1 on) equals the unfused form for every mask
// it is given: a plain causal score (the kernels' own causal flag), causal with a position bias,
// key padding, queries after a cache (q_offset > 0: an explicit mask aligned at the bottom), and
// q, k wider than v (PoPE); each mask also in the form a stack passes it (its additive bias_B1TS
// built once per forward pass). Checked on the CPU, where SDPA has the same semantics; skipped on a
// libtorch without SDPA (Debian 12's 1.13), run on Debian 13's 2.6 and on a wheel.
TEST(FusedAttention, EqualsTheUnfusedFormForEveryMask) {
  if (!compat::has_sdpa()) GTEST_SKIP() << "this libtorch has no scaled_dot_product_attention";
  torch::manual_seed(6);
  const int64_t B = 2, N = 3, T = 12, H = 8;
  auto pad = torch::ones({B, T}, torch::kBool);
  pad.index_put_({1, torch::indexing::Slice(9, T)}, false);
  auto bias = torch::randn({1, N, T, T}).requires_grad_();
  struct Case {
    const char* name;
    bool causal, padded, with_bias;
    int64_t q_len, q_offset, qk_width;
  };
  for (const Case& k : {Case{"causal", true, false, false, T, 0, H},
                        Case{"causal + bias", true, false, true, T, 0, H},
                        Case{"bidirectional + padding", false, true, false, T, 0, H},
                        Case{"padding + bias", false, true, true, T, 0, H},
                        Case{"causal after a cache", true, false, false, 3, 9, H},
                        Case{"wide q and k", true, false, false, T, 0, 2 * H}})
    for (bool stack_form : {false, true}) {
      auto q = torch::randn({B, N, k.q_len, k.qk_width}).requires_grad_();
      auto kk = torch::randn({B, N, T, k.qk_width}).requires_grad_();
      auto v = torch::randn({B, N, T, H}).requires_grad_();
      AttnMask m{k.padded ? pad : torch::Tensor(), k.causal, {}};
      if (stack_form) m = m.with_bias(k.q_len, T, k.q_offset, torch::kCPU);
      auto b = k.with_bias ? bias.narrow(2, T - k.q_len, k.q_len) : torch::Tensor();
      auto want = softmax_attention(q, kk, v, b, m, k.q_offset, 0.0, false);
      auto got = fused_attention(q, kk, v, b, m, k.q_offset, 0.0, false);
      EXPECT_TRUE(close(got, want, 1e-4, 1e-5)) << k.name << (stack_form ? " (stack form)" : "");
      // Gradients too, the bias's included (the score-bias families learn through it).
      auto w = torch::randn_like(want);
      auto g_want = torch::autograd::grad({(want * w).sum()}, {q, kk, v, bias}, {}, true, false,
                                          /*allow_unused=*/true);
      auto g_got = torch::autograd::grad({(got * w).sum()}, {q, kk, v, bias}, {}, false, false,
                                         /*allow_unused=*/true);
      for (size_t i = 0; i < 4; ++i) {
        ASSERT_EQ(g_got[i].defined(), g_want[i].defined()) << k.name << " gradient " << i;
        if (g_want[i].defined()) {
          EXPECT_TRUE(close(g_got[i], g_want[i], 1e-4, 1e-5)) << k.name << " gradient " << i;
        }
      }
    }
}

// A stack's causal mask reaches the kernels' own causal flag (no mask tensor, the masked blocks
// skipped) although it carries its additive form; anything else added keeps the explicit mask.
TEST(FusedAttention, AStacksPlainCausalMaskUsesTheKernelsCausalFlag) {
  const int64_t T = 16;
  auto pad = torch::ones({2, T}, torch::kBool);
  const AttnMask causal{torch::Tensor(), true, {}};
  EXPECT_TRUE(uses_kernel_causal(causal, false, 0, T, T));
  EXPECT_TRUE(uses_kernel_causal(causal.with_bias(T, T, 0, torch::kCPU), false, 0, T, T));
  EXPECT_FALSE(uses_kernel_causal(causal, true, 0, T, T)) << "a position bias";
  EXPECT_FALSE(uses_kernel_causal(AttnMask{pad, true, {}}, false, 0, T, T)) << "key padding";
  EXPECT_FALSE(uses_kernel_causal(causal.with_bias(3, T, T - 3, torch::kCPU), false, T - 3, 3, T))
      << "queries after a cache";
  EXPECT_FALSE(uses_kernel_causal(AttnMask{}, false, 0, T, T)) << "bidirectional";
}

// ---- architectures

using test::tiny_model;

const std::vector<std::string> kPositions = {"none",  "sinusoidal", "learned", "t5",    "rope",
                                             "alibi", "xpos",       "fire",    "kerple"};
bool biases_scores(const std::string& pos) {
  return std::visit([](const auto& p) { return std::decay_t<decltype(p)>::kBiasesScores; },
                    test::position(pos).opts);
}

TEST(Architecture, IncrementalDecodingEqualsFullForward) {
  for (const auto& arch : {"decoder", "encdec"})
    for (const auto& pos : kPositions)
      for (const auto& kernel : {"softmax", "linear"}) {
        if (biases_scores(pos) && std::string(kernel) == "linear") continue;
        torch::manual_seed(3);
        Transformer m(tiny_model(arch, pos, kernel), 30);
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

// A model with the head a task would put on each architecture (the encoder also gets a
// classification head, after the MLM head, to exercise every head).
struct WithHeads {
  Transformer backbone{nullptr};
  std::shared_ptr<HeadImpl> lm, cls;
  WithHeads(const config::ModelConfig& c, int64_t V, int64_t classes) {
    backbone = Transformer(c, V);
    if (c.arch == config::Arch::kEncoder) {
      lm = std::make_shared<MlmHeadImpl>(c, V);
      cls = std::make_shared<ClassificationHeadImpl>(c, classes);
      init_weights(*cls, c.init_std);
    } else {
      lm = std::make_shared<LmHeadImpl>(c, V);
    }
    Model(backbone, lm, c.init_std);  // initialises the backbone and the LM head
  }
};

TEST(Architecture, NoParameterRegisteredTwiceAndCountsMatchFormulas) {
  int64_t V = 30, D = 16, Fd = 32, L = 2;
  int64_t attn = 4 * (D * D + D), ffn = D * Fd + Fd + Fd * D + D, ln = 2 * D;
  for (const auto& pos : kPositions) {
    int64_t N = 2, W = 32;  // heads; FIRE's MLP width
    int64_t pos_params = pos == "learned"  ? 512 * D
                         : pos == "t5"     ? 32 * N
                         : pos == "fire"   ? (W + W) + (W * N + N) + 2  // MLP, c, threshold
                         : pos == "kerple" ? 2 * N                      // r1, r2 per head
                                           : 0;
    for (const auto& arch : {"decoder", "encoder", "encdec"}) {
      auto cfg = tiny_model(arch, pos);
      Transformer backbone(cfg, V);
      std::shared_ptr<HeadImpl> head;
      if (std::string(arch) == "encoder")
        head = std::make_shared<MlmHeadImpl>(cfg, V);
      else
        head = std::make_shared<LmHeadImpl>(cfg, V);
      Model m(backbone, head, 0.02);
      auto cls = std::make_shared<ClassificationHeadImpl>(cfg, 3);
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
        want = V * D + L * layer + ln + pos_params;  // pre-LN final norm; tied LM head
      if (std::string(arch) == "encoder")            // segments; MLM head: dense, norm, output bias
        want = V * D + 2 * D + L * layer + ln + pos_params + (D * D + D) + ln + V;
      if (std::string(arch) == "encdec")
        want = V * D + 2 * (L * layer + ln + pos_params) + L * (attn + ln);
      EXPECT_EQ(total, want) << arch << " " << pos;
      int64_t cls_params = 0;
      for (const auto& p : cls->parameters()) cls_params += p.numel();
      EXPECT_EQ(cls_params, (D * D + D) + (D * 3 + 3));  // pooler + classifier
    }
  }
}

// bf16 autocast (the CPU fast path): every architecture and head runs, and stays close to fp32.
TEST(Architecture, Bf16AutocastMatchesFp32Closely) {
  for (const auto& arch : {"decoder", "encoder", "encdec"})
    for (const auto& norm : {"pre", "post"}) {
      torch::manual_seed(5);
      auto cfg = tiny_model(arch, "rope");
      cfg.norm = config::enum_from<config::Norm>(norm);
      WithHeads w(cfg, 30, 2);
      auto& m = w.backbone;
      m->eval();
      w.lm->eval();
      if (w.cls) w.cls->eval();
      auto tok = torch::randint(7, 30, {2, 9});
      auto run = [&] {
        if (std::string(arch) == "decoder") return w.lm->forward(m->decode(tok), *m);
        if (std::string(arch) == "encoder") {
          auto h = m->encode(tok, torch::ones({2, 9}, torch::kBool));
          return torch::cat({w.lm->forward(h, *m).flatten().to(torch::kFloat32),
                             w.cls->forward(h, *m).flatten().to(torch::kFloat32)});
        }
        return w.lm->forward(m->decode(tok, m->encode(tok, {}), {}), *m);
      };
      auto ref = run().to(torch::kFloat32);
      torch::Tensor got;
      {
        device::Autocast ac(torch::kCPU, true);
        got = run().to(torch::kFloat32);
      }
      EXPECT_TRUE(close(got, ref, 0.05, 0.05)) << arch << " " << norm;
    }
}

TEST(Architecture, T5TableIsOnePerStackSharedByLayers) {
  Transformer m(tiny_model("decoder", "t5"), 30);
  int64_t tables = 0;
  for (const auto& p : m->named_parameters())
    if (p.key().find("table") != std::string::npos) ++tables;
  EXPECT_EQ(tables, 1);
}

TEST(Architecture, EncoderRespectsPaddingAndHeadsHaveShapes) {
  torch::manual_seed(4);
  for (const auto& pos : kPositions) {
    WithHeads w(tiny_model("encoder", pos), 30, 2);
    auto& m = w.backbone;
    m->eval();
    auto tok = torch::randint(7, 30, {1, 6});
    auto pad = torch::ones({1, 6}, torch::kBool);
    auto h1 = m->encode(tok, pad);
    // Appending padding must not change the real positions' outputs.
    auto tok2 = torch::cat({tok, torch::zeros({1, 3}, torch::kInt64)}, 1);
    auto pad2 = torch::cat({pad, torch::zeros({1, 3}, torch::kBool)}, 1);
    auto h2 = m->encode(tok2, pad2).narrow(1, 0, 6);
    EXPECT_TRUE(close(h2, h1, 1e-4, 1e-5)) << pos;
    EXPECT_EQ(w.lm->forward(h1, *m).sizes(), (std::vector<int64_t>{1, 6, 30}));
    EXPECT_EQ(w.cls->forward(h1, *m).sizes(), (std::vector<int64_t>{1, 2}));
  }
}

// The stack computes its position tables once per forward pass and every layer reuses them
// (rotation tables once per rotated width; T5/ALiBi biases once).
TEST(Architecture, PositionTablesAreComputedOncePerForward) {
  for (const auto& pos : {"rope", "xpos", "t5", "alibi"})
    for (const auto& kernel : {"softmax", "linear"}) {
      if ((std::string(pos) == "t5" || std::string(pos) == "alibi") &&
          std::string(kernel) == "linear")
        continue;
      auto cfg = tiny_model("decoder", pos, kernel);
      cfg.n_layers = 4;
      Transformer m(cfg, 30);
      auto& p = m->position();
      m->decode(torch::randint(0, 30, {2, 9}));
      EXPECT_EQ(p.prepare_count(), 1) << pos << " " << kernel;
      bool rotates = std::string(pos) == "rope" || std::string(pos) == "xpos";
      // eq19 with elu features rotates phi(q) of the head width: one table set per forward.
      EXPECT_EQ(p.table_count(), rotates ? 1 : 0) << pos << " " << kernel;
      m->decode(torch::randint(0, 30, {2, 9}));
      EXPECT_EQ(p.prepare_count(), 2) << pos << " " << kernel;
    }
}

// Initialisation and weight decay follow the module type that owns a parameter, not its name.
TEST(Init, RolesComeFromModuleTypesNotNames) {
  auto cfg = tiny_model("encoder", "t5");
  Transformer backbone(cfg, 30);
  Model m(backbone, std::make_shared<MlmHeadImpl>(cfg, 30), 0.02);
  std::map<std::string, ParamRole> roles;
  for (const auto& p : param_roles(*m)) roles[p.name] = p.role;
  EXPECT_EQ(roles.size(), m->parameters().size());
  EXPECT_EQ(roles.at("backbone.tok_emb.weight"), ParamRole::kMatrix);
  EXPECT_EQ(roles.at("backbone.encoder.layers.0.self_attn.q_proj.weight"), ParamRole::kMatrix);
  EXPECT_EQ(roles.at("backbone.encoder.layers.0.self_attn.q_proj.bias"), ParamRole::kBias);
  EXPECT_EQ(roles.at("backbone.encoder.layers.0.norm1.weight"), ParamRole::kNormGain);
  EXPECT_EQ(roles.at("backbone.encoder.position.table"), ParamRole::kPosition);
  EXPECT_EQ(roles.at("head.bias"), ParamRole::kBias);
  EXPECT_EQ(roles.at("head.norm.bias"), ParamRole::kNormShift);
  EXPECT_TRUE(decays(ParamRole::kMatrix));
  EXPECT_FALSE(decays(ParamRole::kPosition));
  // Values follow the roles: gains 1, biases 0.
  EXPECT_TRUE(torch::all(m->named_parameters()["head.norm.weight"] == 1).item<bool>());
  EXPECT_TRUE(torch::all(m->named_parameters()["head.bias"] == 0).item<bool>());

  // A module type with no rule is refused, not initialised by a guess.
  struct Odd : torch::nn::Module {
    Odd() { register_parameter("w", torch::zeros({2})); }
  };
  Odd odd;
  EXPECT_THROW(init_weights(odd, 0.02), std::logic_error);
}

}  // namespace
}  // namespace ropelab::model

namespace ropelab {
namespace {

// The fast CPU dropout: keeps 1-p of the elements, scales them by 1/(1-p), keeps the dtype,
// is reproducible under manual_seed, draws a new mask per call, and its gradient is the mask.
TEST(Dropout, KeepsTheRightFractionScaledAndReproducibly) {
  const double p = 0.1;
  auto x = torch::ones({1000, 1001}, torch::requires_grad());
  torch::manual_seed(5);
  auto y = model::dropout(x, p, true);
  double kept = (y != 0).to(torch::kFloat64).mean().item<double>();
  EXPECT_NEAR(kept, 1.0 - p, 0.002);  // 1M draws: std 3e-4
  auto nonzero = y.masked_select(y != 0);
  EXPECT_TRUE(torch::allclose(nonzero, torch::full_like(nonzero, 1.0 / (1.0 - p))));
  // Both halves of each 64-bit draw are used and independent: neighbours are not correlated.
  auto k = (y != 0).to(torch::kFloat64).flatten();
  auto both = (k.narrow(0, 0, k.numel() - 1) * k.narrow(0, 1, k.numel() - 1)).mean().item<double>();
  EXPECT_NEAR(both, (1.0 - p) * (1.0 - p), 0.002);
  torch::manual_seed(5);
  EXPECT_TRUE(torch::equal(model::dropout(x, p, true), y));
  EXPECT_FALSE(torch::equal(model::dropout(x, p, true), y));  // the next call, another mask
  y.sum().backward();
  EXPECT_TRUE(torch::equal(x.grad(), y.detach()));  // d(x*m)/dx = m (x is ones)
  // Not training, or p = 0: the input itself.
  EXPECT_TRUE(model::dropout(x, p, false).is_same(x));
  EXPECT_TRUE(model::dropout(x, 0.0, true).is_same(x));
  auto b = model::dropout(torch::ones({64, 64}, torch::kBFloat16), 0.5, true);
  EXPECT_EQ(b.scalar_type(), torch::kBFloat16);
  EXPECT_NEAR((b != 0).to(torch::kFloat64).mean().item<double>(), 0.5, 0.05);
}

}  // namespace
}  // namespace ropelab
