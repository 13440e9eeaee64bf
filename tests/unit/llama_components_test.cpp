// The Llama-layout options of the backbone (model.norm_type rmsnorm, model.activation swiglu,
// model.n_kv_heads, model.bias) and Gemma's (model.norm sandwich, norm_type rmsnorm_offset,
// activation geglu / geglu_tanh, attention.scale_dim): properties here; their golden values are
// the fixtures' logits (hf_import_test.cpp, hf_gemma3_test.cpp).
#include "config/schema.h"

#include <cmath>
#include <map>
#include <set>

#include "helpers.h"
#include "model/attention.h"
#include "model/heads.h"
#include "model/model.h"
#include "model/norm.h"
#include "model/transformer.h"
#include "model_helpers.h"
#include "tensor_helpers.h"

namespace ropelab::model {
namespace {

using test::close;

config::ModelConfig llama_like(int64_t n_kv_heads) {
  auto c = test::tiny_model("decoder", "rope");
  c.n_heads = 4;
  c.n_kv_heads = n_kv_heads;
  c.norm_type = config::NormType::kRmsNorm;
  c.activation = config::Activation::kSwiglu;
  c.bias = config::LinearBias::kNone;
  std::get<config::RopeConfig>(c.position.opts).pairing = config::RopePairing::kHalf;
  return c;
}

TEST(RmsNorm, ScalesEachRowToUnitRootMeanSquare) {
  Norm n(8, 1e-6, config::NormType::kRmsNorm);
  EXPECT_FALSE(n->bias.defined());
  torch::NoGradGuard ng;
  n->weight.copy_(torch::linspace(0.5, 2.0, 8));
  auto x = torch::randn({3, 5, 8}) * 3 + 1;
  auto y = n(x);
  auto want = x / torch::sqrt(x.pow(2).mean(-1, true) + 1e-6) * n->weight;
  EXPECT_TRUE(close(y, want, 1e-5, 1e-6));
  auto unit = y / n->weight;
  EXPECT_TRUE(close(unit.pow(2).mean(-1), torch::ones({3, 5}), 1e-4, 1e-5));
  // LayerNorm keeps torch's names and numbers.
  Norm ln(8, 1e-5, config::NormType::kLayerNorm);
  EXPECT_TRUE(close(ln(x), torch::layer_norm(x, {8}, {}, {}, 1e-5), 1e-5, 1e-6));
}

TEST(GroupedQueryAttention, EqualsMultiHeadWithEachKvHeadRepeated) {
  // n_kv_heads 2 of 4: kv head j serves query heads 2j and 2j+1, which is multi-head attention
  // whose k/v projections repeat each kv head's rows for its two query heads.
  torch::manual_seed(5);
  config::AttentionConfig a;
  const int64_t D = 16, N = 4, H = 4;
  MultiHeadAttention gqa(D, N, a, 2, config::LinearBias::kQkv);
  MultiHeadAttention mha(D, N, a, 0, config::LinearBias::kQkv);
  auto named = [](MultiHeadAttention& m) {
    std::map<std::string, torch::Tensor> out;
    for (const auto& p : m->named_parameters()) out[p.key()] = p.value();
    return out;
  };
  auto g = named(gqa), h = named(mha);
  EXPECT_EQ(g["k_proj.weight"].sizes(), (std::vector<int64_t>{2 * H, D}));
  EXPECT_EQ(g.count("o_proj.bias"), 0u);  // bias qkv: none on the output projection
  {
    torch::NoGradGuard ng;
    for (const char* k : {"q_proj.weight", "q_proj.bias", "o_proj.weight"}) h[k].copy_(g[k]);
    for (const char* k : {"k_proj", "v_proj"}) {
      auto w = g[std::string(k) + ".weight"].view({2, H, D}).repeat_interleave(2, 0);
      auto b = g[std::string(k) + ".bias"].view({2, H}).repeat_interleave(2, 0);
      h[std::string(k) + ".weight"].copy_(w.reshape({N * H, D}));
      h[std::string(k) + ".bias"].copy_(b.reshape({N * H}));
    }
  }
  auto x = torch::randn({2, 7, D});
  AttnMask mask{{}, true, {}};
  auto yg = gqa->forward(x, x, mask.with_bias(7, 7, 0, torch::kCPU), {}, 0, nullptr);
  auto yh = mha->forward(x, x, mask.with_bias(7, 7, 0, torch::kCPU), {}, 0, nullptr);
  EXPECT_TRUE(close(yg, yh, 1e-5, 1e-6));
}

TEST(LlamaLayout, IncrementalDecodingEqualsFullForwardAndEveryParameterLearns) {
  for (int64_t kv : {1, 2, 4}) {
    SCOPED_TRACE(kv);
    torch::manual_seed(7);
    auto c = llama_like(kv);
    Transformer backbone(c, 30);
    auto head = std::make_shared<LmHeadImpl>(c, 30);
    Model m(backbone, head, c.init_std);
    m->eval();
    auto tokens = torch::randint(0, 30, {2, 9});
    auto full = backbone->decode(tokens);
    DecodeState st;
    std::vector<torch::Tensor> steps;
    steps.push_back(backbone->decode(tokens.narrow(1, 0, 4), {}, {}, &st));
    for (int64_t t = 4; t < 9; ++t)
      steps.push_back(backbone->decode(tokens.narrow(1, t, 1), {}, {}, &st));
    EXPECT_TRUE(close(torch::cat(steps, 1), full, 1e-4, 1e-5));
    // No biases anywhere, no norm shift; a gradient reaches every parameter (gate included).
    m->train();
    auto loss = m->logits(backbone->decode(tokens)).logsumexp(-1).mean();
    loss.backward();
    for (const auto& p : m->named_parameters()) {
      EXPECT_EQ(p.key().find("bias"), std::string::npos) << p.key();
      ASSERT_TRUE(p.value().grad().defined()) << p.key();
      EXPECT_GT(p.value().grad().abs().sum().item<double>(), 0.0) << p.key();
    }
    EXPECT_EQ(m->named_parameters().contains("backbone.decoder.layers.0.gate.weight"), true);
  }
}

TEST(RmsNormOffset, IsRmsNormWithOnePlusItsGainStartingAtZero) {
  Norm n(8, 1e-6, config::NormType::kRmsNormOffset);
  Norm plain(8, 1e-6, config::NormType::kRmsNorm);
  EXPECT_TRUE(torch::equal(n->weight, torch::zeros({8})));
  // Initialised and left out of weight decay as a shift (it starts at zero).
  EXPECT_EQ(n->role_of("weight"), ParamRole::kNormShift);
  auto x = torch::randn({3, 5, 8}) * 3 + 1;
  torch::NoGradGuard ng;
  EXPECT_TRUE(close(n(x), plain(x), 1e-6, 1e-7));
  n->weight.copy_(torch::linspace(-0.5, 1.0, 8));
  plain->weight.copy_(torch::linspace(0.5, 2.0, 8));
  EXPECT_TRUE(close(n(x), plain(x), 1e-5, 1e-6));
}

config::ModelConfig gemma_like() {
  auto c = llama_like(2);
  c.norm = config::Norm::kSandwich;
  c.norm_type = config::NormType::kRmsNormOffset;
  c.activation = config::Activation::kGegluTanh;
  c.attention.qk_norm = true;
  c.scale_embeddings = true;
  return c;
}

TEST(GemmaLayout, OneLayerIsItsFormulaAndEveryParameterLearns) {
  // With attention's o_proj at zero the attention sublayer adds post_norm1(0) = 0, so one layer
  // is x + post2(fc2(act(gate(n2(x))) * fc1(n2(x)))), x the embeddings times sqrt(d_model), and
  // every norm x / rms(x) * (1 + w).
  for (auto act : {config::Activation::kGegluTanh, config::Activation::kGeglu}) {
    SCOPED_TRACE(config::to_string(act));
    torch::manual_seed(11);
    auto c = gemma_like();
    c.activation = act;
    c.n_layers = 1;
    Transformer backbone(c, 30);
    std::map<std::string, torch::Tensor> p;
    for (const auto& kv : backbone->named_parameters()) p[kv.key()] = kv.value();
    for (const char* n :
         {"decoder.layers.0.norm1.weight", "decoder.layers.0.post_norm1.weight",
          "decoder.layers.0.norm2.weight", "decoder.layers.0.post_norm2.weight",
          "decoder.layers.0.gate.weight", "decoder.layers.0.self_attn.q_norm.weight"})
      ASSERT_EQ(p.count(n), 1u) << n;
    auto tokens = torch::randint(0, 30, {2, 7});
    torch::Tensor got, want;
    {
      torch::NoGradGuard ng;
      for (auto& [name, t] : p) t.normal_(0, 0.3);
      p.at("decoder.layers.0.self_attn.o_proj.weight").zero_();
      backbone->eval();
      got = backbone->decode(tokens);
      const double eps = c.norm_eps;
      auto norm = [&](const torch::Tensor& x, const std::string& w) {
        return x / torch::sqrt(x.pow(2).mean(-1, true) + eps) * (1 + p.at(w));
      };
      auto lin = [&](const torch::Tensor& x, const std::string& w) {
        return torch::matmul(x, p.at(w).t());
      };
      const std::string L = "decoder.layers.0.";
      auto x = p.at("tok_emb.weight").index_select(0, tokens.reshape(-1)).view({2, 7, -1}) *
               std::sqrt(static_cast<double>(c.d_model));
      auto h = norm(x, L + "norm2.weight");
      auto g = lin(h, L + "gate.weight");
      g = act == config::Activation::kGeglu
              ? 0.5 * g * (1 + torch::erf(g / std::sqrt(2.0)))
              : 0.5 * g * (1 + torch::tanh(std::sqrt(2.0 / M_PI) * (g + 0.044715 * g.pow(3))));
      auto f = lin(g * lin(h, L + "fc1.weight"), L + "fc2.weight");
      want = norm(x + norm(f, L + "post_norm2.weight"), "decoder.final_norm.weight");
    }
    EXPECT_TRUE(close(got, want, 1e-5, 1e-5));
    // From a fresh start every parameter gets a gradient, the four norms' included.
    torch::manual_seed(12);
    Transformer fresh(c, 30);
    auto head = std::make_shared<LmHeadImpl>(c, 30);
    Model m(fresh, head, c.init_std);
    m->train();
    m->logits(fresh->decode(tokens)).logsumexp(-1).mean().backward();
    for (const auto& q : m->named_parameters()) {
      ASSERT_TRUE(q.value().grad().defined()) << q.key();
      EXPECT_GT(q.value().grad().abs().sum().item<double>(), 0.0) << q.key();
    }
  }
}

TEST(GemmaLayout, ScoreScaleDividesByTheSquareRootOfScaleDim) {
  // q.k / sqrt(4 H) is (q / 2).k / sqrt(H): scale_dim 4H equals halving q_proj, and scale_dim
  // H (the head width) changes nothing.
  auto c = llama_like(2);
  auto out = [&](double scale_dim, double q_factor) {
    torch::manual_seed(13);
    auto cc = c;
    cc.attention.scale_dim = scale_dim;
    Transformer b(cc, 30);
    auto head = std::make_shared<LmHeadImpl>(cc, 30);
    Model m(b, head, cc.init_std);
    m->eval();
    torch::NoGradGuard ng;
    for (auto& q : b->named_parameters())
      if (q.key().find("q_proj.weight") != std::string::npos) q.value().mul_(q_factor);
    return b->decode(torch::arange(0, 24).remainder(30).view({2, 12}));
  };
  const double H = static_cast<double>(config::head_dim_of(c));
  EXPECT_TRUE(close(out(4 * H, 1.0), out(0, 0.5), 1e-5, 1e-6));
  EXPECT_TRUE(close(out(H, 1.0), out(0, 1.0), 1e-6, 1e-7));
  EXPECT_FALSE(close(out(4 * H, 1.0), out(0, 1.0), 1e-3, 1e-3));
}

}  // namespace
}  // namespace ropelab::model
