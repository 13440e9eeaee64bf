// The Llama-layout options of the backbone (model.norm_type rmsnorm, model.activation swiglu,
// model.n_kv_heads, model.bias): properties here; their golden values are the Llama fixtures'
// logits (hf_import_test.cpp: LlamaLayoutDecodersGiveTheReferenceLogits).
#include "config/schema.h"

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

}  // namespace
}  // namespace ropelab::model
