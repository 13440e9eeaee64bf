// GPT2LMHeadModel and GPTNeoXForCausalLM in and out (hf/gpt2.cpp, hf/gpt_neox.cpp): the fixtures
// gpt2 (the hub's layout: no prefix, mask buffers, tied, gelu_new), gpt2-untied-v5 (lm_head,
// GELU with erf, no score scale), gpt-neox (Pythia's transformers 4 keys: rotary_pct 0.25,
// parallel residual) and gpt-neox-v5 (rope_parameters with partial_rotary_factor and linear
// scaling, sequential residual), whose logits come from an independent float64 implementation
// (scripts/golden/hf_fixtures.py). Each must give those logits within 1e-4 (export and cached
// decoding: hf_import_test.cpp), GPT-2's specials must not take tokens text produces, and what
// ropelab does not compute is refused in one line naming the key.
#include <torch/torch.h>

#include <functional>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "data/prepare.h"
#include "helpers.h"
#include "hf/export.h"
#include "hf/import.h"
#include "hf_helpers.h"
#include "tasks/task.h"
#include "tokenizers/bpe.h"
#include "tokenizers/tokenizer.h"
#include "util/error.h"
#include "weights/checkpoint.h"
#include "weights/weights.h"

namespace ropelab::hf {
namespace {

using test::kHfDir;

TEST(HfGpt, ImportsGiveTheReferenceLogits) {
  struct Case {
    const char* fixture;
    const char* position;
    config::Activation act;
    bool parallel, tied;
    int64_t rotary_dim;
    double scale_dim;
  };
  using A = config::Activation;
  for (const auto& c : {Case{"gpt2", "learned", A::kGeluTanh, false, true, 0, 0},
                        Case{"gpt2-untied-v5", "learned", A::kGelu, false, false, 0, 1},
                        Case{"gpt-neox", "rope", A::kGelu, true, false, 4, 0},
                        Case{"gpt-neox-v5", "rope", A::kGeluTanh, false, true, 8, 0}}) {
    SCOPED_TRACE(c.fixture);
    test::TempDir d;
    import_hf(kHfDir + "/" + c.fixture, d.file("run"));
    test::expect_reference_logits(c.fixture, d.file("run"));
    const auto mc = weights::load_run_model(d.file("run")).config.model;
    EXPECT_EQ(std::string(mc.position.type()), c.position);
    EXPECT_EQ(mc.activation, c.act);
    EXPECT_EQ(mc.parallel_residual, c.parallel);
    EXPECT_EQ(mc.tie_embeddings, c.tied);
    EXPECT_EQ(mc.norm_type, config::NormType::kLayerNorm);
    EXPECT_EQ(mc.bias, config::LinearBias::kAll);
    EXPECT_EQ(mc.attention.scale_dim, c.scale_dim);
    if (const auto* r = std::get_if<config::RopeConfig>(&mc.position.opts)) {
      EXPECT_EQ(r->rotary_dim, c.rotary_dim);  // 16-wide heads: 0.25 and 0.5 of them
      EXPECT_EQ(r->pairing, config::RopePairing::kHalf);
    } else {
      EXPECT_EQ(std::get<config::LearnedConfig>(mc.position.opts).max_len, 48);
    }
  }
}

TEST(HfGpt, Gpt2SpecialsTakeControlByteTokensNotText) {
  // GPT-2's vocabulary is its tokenizer, no row to spare: eos is <|endoftext|>, bos shares it,
  // and ropelab's other specials take the tokens of control bytes (ids 188 on in GPT-2's byte
  // order), not "!", "\"", "#" (ids 0, 1, 2). Text tokenises to the tokenizer's own ids.
  test::TempDir d;
  const std::string summary = import_hf(kHfDir + "/gpt2", d.file("run"));
  EXPECT_NE(summary.find("bos_token_id shares id 464 with eos_token_id"), std::string::npos)
      << summary;
  const auto order = test::vocab_order(d.file("run"));
  EXPECT_EQ(order[tokenizers::Special::kEos], 464);  // <|endoftext|>, the last id
  tokenizers::BpeTokenizer plain(kHfDir + "/gpt2/tokenizer.json");
  for (int32_t s :
       {tokenizers::Special::kPad, tokenizers::Special::kUnk, tokenizers::Special::kBos,
        tokenizers::Special::kCls, tokenizers::Special::kSep, tokenizers::Special::kMask}) {
    const int64_t id = order[static_cast<size_t>(s)];
    EXPECT_GE(id, 188) << s;
    EXPECT_LT(id, 188 + 32) << s;  // U+0100 + a control byte
  }
  const auto c = weights::load_run_model(d.file("run")).config;
  auto tok = data::load_tokenizer(data::plan(c.data, c.task.seq_len));
  const std::string text = "In the beginning! \"God\" said #1 $5 %& 'light'";
  const auto ids = tok->encode(text);
  const auto want = plain.encode_original(text);
  ASSERT_EQ(ids.size(), want.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    EXPECT_GE(ids[i], tokenizers::Special::kCount) << i;
    EXPECT_EQ(order[static_cast<size_t>(ids[i])], want[i]) << i;
  }
  EXPECT_EQ(tok->decode(ids), text);
}

TEST(HfGpt, RefusalsNameTheKey) {
  struct Case {
    const char* fixture;
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  // clang-format off
  const std::vector<Case> cases = {
      {"gpt2", [](nlohmann::json& j) { j["scale_attn_by_inverse_layer_idx"] = true; },
       "scale_attn_by_inverse_layer_idx"},
      {"gpt2", [](nlohmann::json& j) { j["activation_function"] = "silu"; },
       "activation_function = \"silu\""},
      {"gpt2", [](nlohmann::json& j) { j["add_cross_attention"] = true; }, "add_cross_attention"},
      {"gpt2", [](nlohmann::json& j) { j["n_head"] = 5; }, "n_head"},
      {"gpt2", [](nlohmann::json& j) { j["n_positions"] = 40; }, "wpe.weight"},
      {"gpt-neox", [](nlohmann::json& j) { j["attention_bias"] = false; }, "attention_bias"},
      {"gpt-neox", [](nlohmann::json& j) { j["rotary_pct"] = 0.1; }, "rotary_pct = 0.1"},
      {"gpt-neox", [](nlohmann::json& j) { j["rope_theta"] = 500000; }, "rope_theta"},
      {"gpt-neox",
       [](nlohmann::json& j) { j["rope_parameters"] = {{"rope_type", "default"},
                                                       {"rope_theta", 10000.0},
                                                       {"partial_rotary_factor", 0.5}}; },
       "disagree"},
      {"gpt-neox-v5", [](nlohmann::json& j) { j["hidden_act"] = "gelu_10"; }, "hidden_act"},
      {"gpt-neox-v5", [](nlohmann::json& j) { j["rope_parameters"]["mscale"] = 1.0; }, "mscale"},
  };
  // clang-format on
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expect);
    test::TempDir d;
    test::expect_import_refused(test::damaged_copy(d, c.fixture, c.edit), d.file("run"), c.expect);
  }
  // A top-level rope_theta equal to the base (transformers 4.4x wrote one) is accepted.
  test::TempDir d;
  auto dir = test::damaged_copy(d, "gpt-neox", [](nlohmann::json& j) { j["rope_theta"] = 1e4; });
  EXPECT_NO_THROW(import_hf(dir, d.file("run")));
}

TEST(HfGpt, RopelabRunsExportAsTheClassThatComputesThem) {
  // A GPT-style run of ropelab's own (LayerNorm, biases, tanh GELU, learned positions) is
  // GPT-2; with partial RoPE and a parallel residual it is GPT-NeoX; either imports back to the
  // same model. A parallel residual with learned positions has no class.
  struct Case {
    std::vector<std::string> overrides;
    std::string cls;
  };
  for (const auto& c :
       {Case{{"model.activation=gelu_tanh", "model.position.type=learned",
              "model.position.max_len=64"},
             "GPT2LMHeadModel"},
        Case{{"model.activation=gelu", "model.position.type=rope", "model.position.pairing=half",
              "model.position.rotary_dim=4", "model.parallel_residual=true"},
             "GPTNeoXForCausalLM"},
        Case{{"model.position.type=learned", "model.parallel_residual=true"}, ""}}) {
    SCOPED_TRACE(c.cls);
    test::TempDir d;
    std::vector<std::string> ov = {"model.norm=pre", "model.norm_type=layernorm", "model.bias=all",
                                   "model.n_kv_heads=2"};
    ov.insert(ov.end(), c.overrides.begin(), c.overrides.end());
    const auto cfg =
        test::tiny_clm_run(d, 1, "gpt", "max_steps: 10, schedule: {warmup: 1}", "", ov);
    std::filesystem::create_directories(d.file("run"));
    test::write(d.file("run/config.yaml"), config::dump(cfg));
    auto model = tasks::make_task(cfg, 64)->build_model();
    weights::TrainState st;
    st.vocab = 64;
    weights::save_checkpoint(d.file("run"), *model, nullptr, st, 1);
    if (c.cls.empty()) {
      try {
        export_hf(d.file("run"), d.file("out"));
        ADD_FAILURE() << "exported";
      } catch (const UserError& e) {
        EXPECT_NE(std::string(e.what()).find("GPT2LMHeadModel: a parallel residual"),
                  std::string::npos)
            << e.what();
      }
      continue;
    }
    EXPECT_NE(export_hf(d.file("run"), d.file("out")).find(c.cls), std::string::npos);
    import_hf(d.file("out"), d.file("again"));
    EXPECT_EQ(test::model_yaml_of(weights::load_run_model(d.file("again")).config.model),
              test::model_yaml_of(cfg.model));
  }
}

}  // namespace
}  // namespace ropelab::hf
