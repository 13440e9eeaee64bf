// `ropelab import-hf` never computes another function than the checkpoint without a word
// (hf/rope_params.cpp, hf/config_keys.cpp): transformers 5's config.json layout
// (rope_parameters, flat or per layer type) gives the reference outputs as transformers 4's
// does; settings of the two layouts that disagree, and keys ropelab does not know, are refused
// naming them; special tokens that share an id are taken as the checkpoint defines them. The
// fixtures and their outputs come from scripts/golden/hf_fixtures.py (an independent PyTorch
// implementation).
#include <torch/torch.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "hf/export.h"
#include "hf/import.h"
#include "hf/safetensors.h"
#include "hf_helpers.h"
#include "tokenizers/tokenizer.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/weights.h"

namespace ropelab::hf {
namespace {

namespace stdfs = std::filesystem;
using nlohmann::json;
using test::damaged_copy;
using test::kHfDir;
using test::tensor;

// The largest difference between an imported decoder's logits and the fixture's reference, on
// each of its inputs (40 tokens, beyond every scaled type's original length, and 12).
double decoder_diff(const std::string& dir, const std::string& expected_dir, const test::TempDir& d,
                    const std::string& run = "run") {
  auto expected = Checkpoint::open(expected_dir + "/expected.safetensors");
  import_hf(dir, d.file(run));
  auto order = test::vocab_order(d.file(run));
  auto m = weights::load_run_model(d.file(run));
  m.model->eval();
  torch::NoGradGuard ng;
  auto cols = torch::tensor(order, torch::kLong);
  double worst = 0;
  for (const std::string tag : {"", "_short"}) {
    auto ids = test::to_ropelab_ids(order, tensor(expected, "input_ids" + tag));
    auto logits = m.model->logits(m.model->backbone->decode(ids));
    auto want = tensor(expected, "logits" + tag).index_select(2, cols);
    EXPECT_GT(want.abs().max().item<double>(), 1.0);  // not vacuous
    worst = std::max(worst, test::max_diff(logits, want));
  }
  return worst;
}

// The UserError an import of `dir` throws (one line, no run left behind), or "" if it imports.
std::string refusal(const std::string& dir, const test::TempDir& d,
                    const std::vector<std::string>& overrides = {}) {
  try {
    import_hf(dir, d.file("refused"), overrides);
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    EXPECT_FALSE(stdfs::exists(d.file("refused")));
    return msg;
  }
  return "";
}

const char* const kRopeTypes[] = {"default", "linear", "dynamic", "yarn", "llama3", "longrope"};

TEST(HfConfig, TransformersFiveLayoutGivesTheReferenceLogits) {
  // Llama, Mistral and Qwen2 with rope_parameters of every type, base 500000: transformers 5
  // writes no rope_theta and no rope_scaling. (ropelab before this read the base as 10000 and
  // no scaling, without a word.)
  for (const char* cls : {"llama", "mistral", "qwen2"})
    for (const char* type : kRopeTypes) {
      const std::string fixture = std::string(cls) + "-v5-" + type;
      SCOPED_TRACE(fixture);
      test::TempDir d;
      EXPECT_LT(decoder_diff(kHfDir + "/" + fixture, kHfDir + "/" + fixture, d), 1e-4);
      auto c = weights::load_run_model(d.file("run")).config;
      const auto& rope = std::get<config::RopeConfig>(c.model.position.opts);
      EXPECT_DOUBLE_EQ(rope.base, 500000.0);
      EXPECT_STREQ(rope.scaling.type(), std::string(type) == "default" ? "none" : type);
    }
}

TEST(HfConfig, TheSameModelInEitherLayoutImportsAlike) {
  // Each v5 fixture rewritten in transformers 4's layout (rope_theta, rope_scaling; the
  // original length of LongRoPE at the top level, as Phi-3 has it) gives the same logits.
  for (const char* type : kRopeTypes) {
    SCOPED_TRACE(type);
    test::TempDir d;
    const std::string fixture = std::string("llama-v5-") + type;
    auto dir = damaged_copy(d, fixture, [&](json& j) {
      json rp = j["rope_parameters"];
      j.erase("rope_parameters");
      j["rope_theta"] = rp["rope_theta"];
      rp.erase("rope_theta");
      if (rp["rope_type"] == "longrope") {
        j["original_max_position_embeddings"] = rp["original_max_position_embeddings"];
        rp.erase("original_max_position_embeddings");
      }
      j["rope_scaling"] = rp["rope_type"] == "default" ? json(nullptr) : rp;
    });
    EXPECT_LT(decoder_diff(dir, kHfDir + "/" + fixture, d), 1e-4);
  }
}

TEST(HfConfig, RopeParametersNestedPerLayerTypeReadAsOne) {
  // transformers 5 nests rope_parameters per layer type (keyed like layer_types) in models with
  // several attention kinds; with every layer full attention it is one setting.
  test::TempDir d;
  auto dir = damaged_copy(d, "qwen2-v5-yarn", [](json& j) {
    j["rope_parameters"] = {{"full_attention", j["rope_parameters"]}};
  });
  EXPECT_LT(decoder_diff(dir, kHfDir + "/qwen2-v5-yarn", d), 1e-4);
  // A sliding layer is refused (ropelab's import has no sliding window yet), naming the key.
  auto sliding = damaged_copy(d, "qwen2-v5-default", [](json& j) {
    j["layer_types"] = {"full_attention", "sliding_attention"};
  });
  EXPECT_NE(refusal(sliding, d).find("layer_types"), std::string::npos);
}

TEST(HfConfig, LayoutsThatDisagreeAreRefusedNamingBothKeys) {
  test::TempDir d;
  // The fixture: rope_theta 10000 beside rope_parameters' 500000.
  auto msg = refusal(kHfDir + "/llama-v4-v5-disagree", d);
  EXPECT_NE(msg.find("rope_theta = 10000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("rope_parameters.rope_theta = 500000"), std::string::npos) << msg;
  EXPECT_NE(msg.find("disagree"), std::string::npos) << msg;
  EXPECT_NE(msg.find("llama-v4-v5-disagree/config.json"), std::string::npos) << msg;

  struct Case {
    const char* fixture;
    std::function<void(json&)> edit;
    std::vector<std::string> expect;  // all in the message; empty: accepted
  };
  // clang-format off: versions 14 and 19 lay out these lambdas differently
  std::vector<Case> cases = {
      // Agreeing copies are accepted.
      {"llama-v5-default", [](json& j) { j["rope_theta"] = 500000.0; }, {}},
      {"llama-v5-yarn",
       [](json& j) {
         j["rope_scaling"] = j["rope_parameters"];
         j["rope_scaling"].erase("rope_theta");
       },
       {}},
      // A scaling in one layout only, or another one in each.
      {"llama-v5-yarn",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
       },
       {"rope_scaling = ", "rope_parameters = ", "disagree"}},
      {"llama-v5-default",
       [](json& j) {
         j["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 2.0}};
       },
       {"rope_scaling", "rope_parameters", "disagree"}},
      // The original length in two places.
      {"llama-v5-yarn",
       [](json& j) { j["original_max_position_embeddings"] = 512; },
       {"rope_parameters.original_max_position_embeddings = 256",
        "original_max_position_embeddings = 512"}},
      // LongRoPE's factor against the ratio transformers 4 takes.
      {"llama-v5-longrope",
       [](json& j) {
         j["rope_parameters"]["factor"] = 2.0;
         j["original_max_position_embeddings"] = 16;
       },
       {"rope_parameters.factor = 2", "max_position_embeddings / original"}},
      // Settings transformers reads and ropelab cannot follow.
      {"llama-v5-dynamic",
       [](json& j) { j["rope_parameters"]["original_max_position_embeddings"] = 8; },
       {"rope_parameters.original_max_position_embeddings = 8"}},
      {"llama-v5-default",
       [](json& j) { j["rope_parameters"]["partial_rotary_factor"] = 0.5; },
       {"rope_parameters.partial_rotary_factor = 0.5"}},
      {"llama-v5-yarn", [](json& j) { j["rope_parameters"]["mscale"] = 0.7; }, {"mscale"}},
      {"llama-v5-linear",
       [](json& j) { j["rope_parameters"]["alpha"] = 2.0; },
       {"rope_parameters.alpha = 2.0"}},
      {"llama-v5-default",
       [](json& j) { j["rope_parameters"]["rope_type"] = "proportional"; },
       {"rope_parameters.rope_type = \"proportional\""}},
      {"llama-v5-default", [](json& j) { j["rope_parameters"] = "fast"; }, {"rope_parameters"}},
  };
  // clang-format on
  for (const auto& c : cases) {
    SCOPED_TRACE(c.fixture + std::string(" ") + (c.expect.empty() ? "accepted" : c.expect[0]));
    test::TempDir e;
    auto got = refusal(damaged_copy(e, c.fixture, c.edit), e);
    if (c.expect.empty()) {
      EXPECT_EQ(got, "");
    } else {
      for (const auto& want : c.expect) EXPECT_NE(got.find(want), std::string::npos) << got;
    }
  }
}

TEST(HfConfig, UnknownKeysAreRefusedUnlessAllowedAndThenListed) {
  test::TempDir d;
  // Gemma 2's attention softcapping on a Llama: it would change the function.
  auto msg = refusal(kHfDir + "/llama-v5-unknown-key", d);
  EXPECT_NE(msg.find("attn_logit_softcapping = 30.0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("LlamaForCausalLM"), std::string::npos) << msg;
  EXPECT_NE(msg.find("--allow-unknown-keys"), std::string::npos) << msg;
  auto summary = import_hf(kHfDir + "/llama-v5-unknown-key", d.file("run"), {}, true);
  EXPECT_NE(summary.find("1 config.json key(s) ignored (--allow-unknown-keys): "
                         "attn_logit_softcapping = 30.0"),
            std::string::npos)
      << summary;

  // Every class refuses a key it does not know, and accepts the irrelevant ones.
  for (const char* fixture : {"bert-mlm", "roformer-mlm-v5", "llama", "mistral-v5-yarn", "qwen2"}) {
    SCOPED_TRACE(fixture);
    test::TempDir e;
    auto unknown = refusal(damaged_copy(e, fixture,
                                        [](json& j) {
                                          j["sliding_window_pattern"] = 6;
                                          j["final_logit_softcapping"] = 30.0;
                                        }),
                           e);
    EXPECT_NE(unknown.find("2 keys ropelab does not know"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("sliding_window_pattern = 6"), std::string::npos) << unknown;
    EXPECT_NE(unknown.find("final_logit_softcapping = 30.0"), std::string::npos) << unknown;
    test::TempDir f;
    auto irrelevant = damaged_copy(f, fixture, [](json& j) {
      j["use_cache"] = false;
      j["_name_or_path"] = "somewhere";
      j["output_attentions"] = true;
      j["temperature"] = 0.7;
      j["is_encoder_decoder"] = false;
    });
    EXPECT_EQ(refusal(irrelevant, f), "");
  }
  // Structure switches are irrelevant only at their default.
  for (auto [key, value] : {std::pair<std::string, json>{"is_encoder_decoder", true},
                            {"pruned_heads", {{"0", {1}}}},
                            {"quantization_config", {{"quant_method", "bitsandbytes"}}}}) {
    test::TempDir e;
    auto got = refusal(damaged_copy(e, "llama-v5-default", [&](json& j) { j[key] = value; }), e);
    EXPECT_NE(got.find(key + " = " + value.dump()), std::string::npos) << got;
  }
}

TEST(HfConfig, SpecialTokensThatShareAnIdAreAccepted) {
  test::TempDir d;
  // Qwen2.5 and Qwen3 base models: bos = eos. ropelab's eos is that token (its LM data ends
  // documents with eos); the logits are the reference's (TransformersFiveLayout...).
  auto summary = import_hf(kHfDir + "/qwen2-v5-default", d.file("qwen"));
  EXPECT_NE(summary.find("bos_token_id shares id 2 with eos_token_id"), std::string::npos)
      << summary;
  auto order = test::vocab_order(d.file("qwen"));
  EXPECT_EQ(order[tokenizers::Special::kEos], 2);
  EXPECT_NE(order[tokenizers::Special::kBos], 2);
  // The export writes the checkpoint's own ids back.
  export_hf(d.file("qwen"), d.file("qwen-hf"));
  auto back = json::parse(fs::read_file(d.file("qwen-hf/config.json")));
  EXPECT_EQ(back["bos_token_id"], 2);
  EXPECT_EQ(back["eos_token_id"], 2);
  // pad = eos (Mistral's fixture).
  summary = import_hf(kHfDir + "/mistral-v5-default", d.file("mistral"));
  EXPECT_NE(summary.find("pad_token_id shares id 2 with eos_token_id"), std::string::npos)
      << summary;
  EXPECT_EQ(test::vocab_order(d.file("mistral"))[tokenizers::Special::kEos], 2);

  // Genuine conflicts name the file and the keys: an end of sequence on the unknown token, an
  // id outside the vocabulary.
  auto msg = refusal(damaged_copy(d, "llama-spm", [](json& j) { j["eos_token_id"] = 0; }), d);
  EXPECT_NE(msg.find("llama-spm/config.json: eos_token_id = 0"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown token"), std::string::npos) << msg;
  test::TempDir e;
  msg = refusal(damaged_copy(e, "llama", [](json& j) { j["bos_token_id"] = 64; }), e);
  EXPECT_NE(msg.find("config.json: bos_token_id = 64 is outside the vocabulary"), std::string::npos)
      << msg;
}

}  // namespace
}  // namespace ropelab::hf
