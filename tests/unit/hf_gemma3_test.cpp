// Gemma3ForCausalLM in and out (hf/gemma3.cpp): the fixtures gemma3 (transformers 4's keys:
// sliding_window_pattern, rope_local_base_freq, rope_scaling on the global layers) and
// gemma3-v5 (layer_types, rope_parameters per layer type), whose logits come from an
// independent float64 implementation (scripts/golden/hf_fixtures.py). Both must give those
// logits within 1e-4 (and decode with the cache as the full forward does: hf_import_test.cpp),
// export back key for key
// and tensor for tensor, and refuse what ropelab does not compute with one line naming the key.
#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/layout.h"
#include "config/loader.h"
#include "eval/evaluate.h"
#include "helpers.h"
#include "hf/export.h"
#include "hf/import.h"
#include "hf_helpers.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/weights.h"

namespace ropelab::hf {
namespace {

namespace stdfs = std::filesystem;
using test::kHfDir;

TEST(HfGemma3, ImportsGiveTheReferenceLogits) {
  struct Case {
    const char* fixture;
    std::string summary;
    double scale_dim;
    config::Activation act;
    bool tied;
  };
  for (const auto& c :
       {Case{"gemma3", "2x sliding_attention (rope, window 5) + full_attention (rope)", 24,
             config::Activation::kGegluTanh, true},
        Case{"gemma3-v5", "sliding_attention (rope, window 6) + full_attention (rope)", 256,
             config::Activation::kGeglu, false}}) {
    SCOPED_TRACE(c.fixture);
    test::TempDir d;
    auto expected = Checkpoint::open(kHfDir + "/" + c.fixture + "/expected.safetensors");
    import_hf(kHfDir + "/" + c.fixture, d.file("run"));
    auto order = test::vocab_order(d.file("run"));
    auto m = weights::load_run_model(d.file("run"));
    const auto& mc = m.config.model;
    EXPECT_EQ(config::position_summary(mc), c.summary);
    EXPECT_EQ(mc.norm, config::Norm::kSandwich);
    EXPECT_EQ(mc.norm_type, config::NormType::kRmsNormOffset);
    EXPECT_EQ(mc.activation, c.act);
    EXPECT_TRUE(mc.attention.qk_norm && mc.scale_embeddings);
    EXPECT_EQ(mc.tie_embeddings, c.tied);
    EXPECT_EQ(mc.attention.scale_dim, c.scale_dim);  // query_pre_attn_scalar: 24, default 256
    EXPECT_EQ(config::head_dim_of(mc), 16);
    // The global layers' RoPE is model.position (base 1e6, linear); the sliding layers' own.
    const auto& global = std::get<config::RopeConfig>(mc.position.opts);
    const auto& local =
        std::get<config::RopeConfig>(mc.layout.kinds.at("sliding_attention").position.opts);
    EXPECT_EQ(global.base, 1e6);
    EXPECT_STREQ(global.scaling.type(), "linear");
    EXPECT_EQ(local.base, 1e4);
    EXPECT_STREQ(local.scaling.type(), "none");
    m.model->eval();
    torch::NoGradGuard ng;
    auto cols = torch::tensor(order, torch::kLong);
    for (const std::string tag : {"", "_short"}) {
      auto ids = test::to_ropelab_ids(order, test::tensor(expected, "input_ids" + tag));
      auto logits = m.model->logits(m.model->backbone->decode(ids));
      auto want = test::tensor(expected, "logits" + tag).index_select(2, cols);
      EXPECT_LT(test::max_diff(logits, want), 1e-4) << tag;
    }
    // eval --rope-scaling extends the global layers only, as Gemma 3's own scaling does.
    EXPECT_EQ(
        eval::rope_scaling_overrides("yarn:2", mc, 64),
        (std::vector<std::string>{"model.layout.kinds.full_attention.position.scaling.type=yarn",
                                  "model.layout.kinds.full_attention.position.scaling.factor=2"}));
  }
}

TEST(HfGemma3, ExportGivesTheCheckpointBackKeyForKey) {
  // Each fixture in its own form (gemma3: --hf-v4; gemma3-v5: the default), then the other
  // form, which imports again to the same model.
  for (const auto& [fixture, form] :
       {std::pair{"gemma3", HfConfigForm::kV4}, std::pair{"gemma3-v5", HfConfigForm::kV5}}) {
    SCOPED_TRACE(fixture);
    test::TempDir d;
    import_hf(kHfDir + "/" + fixture, d.file("run"));
    auto summary = export_hf(d.file("run"), d.file("out"), form);
    EXPECT_NE(summary.find("Gemma3ForCausalLM"), std::string::npos) << summary;
    test::expect_same_tensors(fixture, d.file("out"));
    auto theirs = nlohmann::json::parse(fs::read_file(kHfDir + "/" + fixture + "/config.json"));
    auto ours = nlohmann::json::parse(fs::read_file(d.file("out/config.json")));
    for (const auto& [key, value] : theirs.items()) {
      if (key == "transformers_version" || key == "cache_implementation" || key == "use_cache")
        continue;  // who saved it; generation settings ropelab does not keep
      EXPECT_EQ(ours[key].dump(), value.dump()) << key;
    }
    const auto first = test::model_yaml_of(weights::load_run_model(d.file("run")).config.model);
    const auto other = form == HfConfigForm::kV4 ? HfConfigForm::kV5 : HfConfigForm::kV4;
    export_hf(d.file("run"), d.file("out2"), other);
    for (const char* out : {"out", "out2"}) {
      const std::string again = d.file(std::string("again-") + out);
      import_hf(d.file(out), again);
      EXPECT_EQ(test::model_yaml_of(weights::load_run_model(again).config.model), first) << out;
    }
  }
}

TEST(HfGemma3, EveryLayerGlobalIsPlainRope) {
  // sliding_window_pattern 1: every layer global. No layout; sliding_window and
  // rope_local_base_freq are read (not refused as unknown) though no layer uses them.
  test::TempDir d;
  auto dir =
      test::damaged_copy(d, "gemma3", [](nlohmann::json& j) { j["sliding_window_pattern"] = 1; });
  import_hf(dir, d.file("run"));
  auto c = weights::load_run_model(d.file("run")).config;
  EXPECT_TRUE(c.model.layout.kinds.empty());
  EXPECT_EQ(config::position_summary(c.model), "rope");
  export_hf(d.file("run"), d.file("out"), HfConfigForm::kV4);
  auto ours = nlohmann::json::parse(fs::read_file(d.file("out/config.json")));
  EXPECT_EQ(ours["sliding_window_pattern"], 1);
  EXPECT_FALSE(ours.contains("layer_types")) << ours.dump();
  EXPECT_EQ(ours["rope_local_base_freq"], 10000.0);
  test::expect_same_tensors("gemma3", d.file("out"));
}

TEST(HfGemma3, RefusalsNameTheKey) {
  struct Case {
    const char* fixture;
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  // clang-format off: versions 14 and 19 lay out these lambdas differently
  const std::vector<Case> cases = {
      {"gemma3", [](nlohmann::json& j) { j["attn_logit_softcapping"] = 50.0; },
       "attn_logit_softcapping"},
      {"gemma3", [](nlohmann::json& j) { j["final_logit_softcapping"] = 30.0; },
       "final_logit_softcapping"},
      {"gemma3", [](nlohmann::json& j) { j["use_bidirectional_attention"] = true; },
       "use_bidirectional_attention"},
      {"gemma3", [](nlohmann::json& j) { j["attention_bias"] = true; }, "attention_bias"},
      {"gemma3", [](nlohmann::json& j) { j["hidden_activation"] = "relu"; }, "hidden_activation"},
      {"gemma3", [](nlohmann::json& j) { j["sliding_window"] = nullptr; }, "sliding_window"},
      {"gemma3",
       [](nlohmann::json& j) {
         j["layer_types"] = {"sliding_attention", "chunked_attention", "full_attention",
                             "full_attention"};
       },
       "layer_types"},
      {"gemma3",
       [](nlohmann::json& j) {
         j["architectures"] = {"Gemma3ForConditionalGeneration"};
         j["vision_config"] = {{"hidden_size", 32}};
       },
       "vision_config"},
      {"qwen3",
       [](nlohmann::json& j) {
         j["architectures"] = {"Qwen3MoeForCausalLM"};
         j["num_experts"] = 8;
       },
       "num_experts = 8"},
      // A flat rope_parameters: Gemma 3 reads one entry per layer type.
      {"gemma3-v5",
       [](nlohmann::json& j) {
         j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1e6}};
       },
       "rope_parameters"},
      // v4 and v5 saying different bases for the sliding layers.
      {"gemma3-v5", [](nlohmann::json& j) { j["rope_local_base_freq"] = 20000.0; }, "disagree"},
  };
  // clang-format on
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expect);
    test::TempDir d;
    test::expect_import_refused(test::damaged_copy(d, c.fixture, c.edit), d.file("run"), c.expect);
  }
}

}  // namespace
}  // namespace ropelab::hf
