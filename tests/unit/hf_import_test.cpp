// `ropelab import-hf` (hf/import.h): BERT checkpoints written in save_pretrained's layout by
// scripts/golden/hf_fixtures.py, whose outputs come from an independent PyTorch implementation
// of the published architecture. An imported run, loaded back as any run is, must give those
// outputs within 1e-4; damaged or unsupported checkpoints are refused with one line.
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <tuple>

#include "config/layout.h"
#include "config/loader.h"
#include "data/prepare.h"
#include "helpers.h"
#include "hf/export.h"
#include "hf/import.h"
#include "hf/safetensors.h"
#include "hf_helpers.h"
#include "tasks/task.h"
#include "tokenizers/bpe.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/checkpoint.h"
#include "weights/weights.h"

namespace ropelab::hf {
namespace {

namespace stdfs = std::filesystem;
using test::damaged_copy;
using test::expect_reference_logits;
using test::expect_same_tensors;
using test::kHfDir;
using test::max_diff;
using test::model_yaml_of;
using test::tensor;
using test::to_ropelab_ids;
using test::vocab_order;

struct Outputs {
  at::Tensor hidden, logits;
};

// Imports `fixture`, loads the run like eval does, and runs the fixture's inputs through it.
Outputs run_imported(const std::string& fixture, const test::TempDir& d, Checkpoint& expected,
                     const std::vector<std::string>& overrides = {}) {
  const std::string run = d.file("run");
  std::string summary = import_hf(kHfDir + "/" + fixture, run, overrides);
  EXPECT_NE(summary.find("imported"), std::string::npos) << summary;
  auto order = vocab_order(run);
  auto m = weights::load_run_model(run);
  m.model->eval();
  torch::NoGradGuard ng;
  auto ids = to_ropelab_ids(order, tensor(expected, "input_ids"));
  auto pad = tensor(expected, "attention_mask").to(torch::kBool);
  auto types = tensor(expected, "token_type_ids");
  Outputs o;
  o.hidden = m.model->backbone->encode(ids, pad, types);
  o.logits = m.model->logits(o.hidden);
  return o;
}

// D/run becomes a fresh run of config `c` (its weights would no longer match: norm biases, a
// T5 table, a changed layout); export must refuse it with one line naming `expect` and leave
// no D/out.
void expect_export_refused(const test::TempDir& d, const config::Config& c,
                           const std::string& expect) {
  test::write(d.file("run/config.yaml"), config::dump(c));
  auto model = tasks::make_task(c, 64)->build_model();
  weights::TrainState st;
  st.vocab = 64;
  stdfs::remove_all(d.file("run/checkpoints"));
  weights::save_checkpoint(d.file("run"), *model, nullptr, st, 1);
  try {
    export_hf(d.file("run"), d.file("out"));
    ADD_FAILURE() << "exported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find(expect), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("no Hugging Face class"), std::string::npos);
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
  EXPECT_FALSE(stdfs::exists(d.file("out")));
}

TEST(HfImport, SpecialsComeFirstAndTheRestKeepTheirOrder) {
  // BERT: [PAD] 0, [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103; no BOS/EOS, which take the
  // lowest free ids.
  auto o = tokenizers::special_first_order(110, {0, 100, -1, -1, 101, 102, 103});
  ASSERT_EQ(o.size(), 110u);
  EXPECT_EQ((std::vector<int64_t>(o.begin(), o.begin() + 8)),
            (std::vector<int64_t>{0, 100, 1, 2, 101, 102, 103, 3}));
  std::vector<int64_t> sorted = o;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 110; ++i) EXPECT_EQ(sorted[i], i);  // a permutation
  for (size_t i = 8; i + 1 < o.size(); ++i) EXPECT_LT(o[i], o[i + 1]);
  EXPECT_THROW(tokenizers::special_first_order(10, {0, 0, -1, -1, 1, 2, 3}), UserError);
  EXPECT_THROW(tokenizers::special_first_order(10, {0, 1, -1, -1, 2, 3, 10}), UserError);
}

TEST(HfImport, MaskedLmClassesGiveTheReferenceLogits) {
  // BERT tied and untied, and RoFormer (RoPE in every layer, no position embeddings).
  // RoFormer also with embedding_size 16 < hidden_size 32: the embeddings' projection. BERT and
  // RoFormer as transformers 5 saves them (dtype, no torch_dtype).
  for (const char* fixture : {"bert-mlm", "bert-mlm-untied", "roformer-mlm", "roformer-mlm-small",
                              "bert-mlm-v5", "roformer-mlm-v5"}) {
    SCOPED_TRACE(fixture);
    test::TempDir d;
    auto expected = Checkpoint::open(kHfDir + "/" + fixture + "/expected.safetensors");
    auto o = run_imported(fixture, d, expected);
    auto order = torch::tensor(vocab_order(d.file("run")), torch::kLong);
    auto want = tensor(expected, "logits").index_select(2, order);
    double diff = max_diff(o.logits, want);
    EXPECT_LT(diff, 1e-4);
    // Not vacuous: the logits spread over several units, and a wrong order would show.
    EXPECT_GT(want.abs().max().item<double>(), 1.0);
    EXPECT_GT(max_diff(o.logits, tensor(expected, "logits")), 0.1);
  }
  // bert-mlm-untied is in transformers 5's layout: the head computes with
  // cls.predictions.decoder.bias, and cls.predictions.bias is the unused zeros beside it.
  auto untied = Checkpoint::open(kHfDir + "/bert-mlm-untied/model.safetensors");
  EXPECT_EQ(tensor(untied, "cls.predictions.bias").abs().max().item<double>(), 0.0);
  EXPECT_GT(tensor(untied, "cls.predictions.decoder.bias").abs().max().item<double>(), 0.05);
}

TEST(HfImport, SequenceClassificationGivesTheReferenceLogits) {
  // BERT: the tanh pooler and the classifier; labels named as MNLI's (the data's order).
  // RoFormer: dense -> GELU -> out_proj, transformers' default label names.
  struct Case {
    const char* fixture;
    std::vector<std::string> data;
  };
  test::TempDir glue;
  for (const auto& c :
       {Case{"bert-cls",
             {"data.source=glue", "data.glue_task=MNLI", "data.train=" + glue.file("MNLI")}},
        Case{"roformer-cls", {"data.source=bible-sst2"}}}) {
    SCOPED_TRACE(c.fixture);
    test::TempDir d;
    auto expected = Checkpoint::open(kHfDir + "/" + c.fixture + "/expected.safetensors");
    auto o = run_imported(c.fixture, d, expected, c.data);
    auto want = tensor(expected, "logits");
    EXPECT_LT(max_diff(o.logits, want), 1e-4);
    EXPECT_GT(want.abs().max().item<double>(), 0.3);  // not vacuous
    auto m = weights::load_run_model(d.file("run"));
    EXPECT_STREQ(m.config.task.type(), "glue");
    EXPECT_EQ(m.config.model.pooler_activation, std::string(c.fixture) == "bert-cls"
                                                    ? config::PoolerActivation::kTanh
                                                    : config::PoolerActivation::kGelu);
  }
}

TEST(HfImport, ClassifierRowsFollowTheDataLabelNames) {
  // id2label lists neutral first: ropelab's MNLI order is entailment, neutral, contradiction.
  test::TempDir d;
  auto dir = damaged_copy(d, "bert-cls", [](nlohmann::json& j) {
    j["id2label"] = {{"0", "neutral"}, {"1", "entailment"}, {"2", "contradiction"}};
  });
  import_hf(dir, d.file("run"),
            {"data.source=glue", "data.glue_task=MNLI", "data.train=" + d.file("MNLI")});
  auto expected = Checkpoint::open(kHfDir + "/bert-cls/expected.safetensors");
  auto m = weights::load_run_model(d.file("run"));
  m.model->eval();
  torch::NoGradGuard ng;
  auto ids = to_ropelab_ids(vocab_order(d.file("run")), tensor(expected, "input_ids"));
  auto h = m.model->backbone->encode(ids, tensor(expected, "attention_mask").to(torch::kBool),
                                     tensor(expected, "token_type_ids"));
  auto got = m.model->logits(h);
  auto want = tensor(expected, "logits").index_select(1, torch::tensor({1, 0, 2}));
  EXPECT_LT(max_diff(got, want), 1e-4);

  // Names that are not the data's: kept in id order, and the summary says so.
  test::TempDir e;
  auto dir2 = damaged_copy(e, "roformer-cls", [](nlohmann::json& j) {
    j["id2label"] = {{"0", "negative"}, {"1", "positive"}};
  });
  auto summary = import_hf(dir2, e.file("run"), {"data.source=bible-sst2"});
  EXPECT_NE(summary.find("taken in id order"), std::string::npos) << summary;
}

TEST(HfImport, ClassificationRefusals) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::vector<std::string> data;
    std::string expect;
  };
  const std::vector<std::string> sst2 = {"data.source=bible-sst2"};
  // clang-format off: versions 14 and 19 lay out these lambdas differently
  std::vector<Case> cases = {
      {[](nlohmann::json&) {}, {}, "needs the data its labels are for"},
      {[](nlohmann::json&) {}, sst2, "id2label has 3 labels but the data bible-sst2"},
      {[](nlohmann::json& j) { j["problem_type"] = "multi_label_classification"; }, sst2,
       "problem_type"},
      {[](nlohmann::json& j) {
         j["id2label"] = {{"0", "a"}, {"7", "b"}};
       },
       sst2, "id2label"},
  };
  // clang-format on
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expect);
    test::TempDir d;
    auto dir = damaged_copy(d, "bert-cls", c.edit);
    try {
      import_hf(dir, d.file("run"), c.data);
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      EXPECT_NE(std::string(e.what()).find(c.expect), std::string::npos) << e.what();
    }
    EXPECT_FALSE(stdfs::exists(d.file("run")));
  }
}

TEST(HfImport, TheRunTokenizesWithTheCheckpointVocabulary) {
  test::TempDir d;
  import_hf(kHfDir + "/bert-mlm", d.file("run"));
  auto c = weights::load_run_model(d.file("run")).config;
  const auto& t = c.data.tokenizer;
  EXPECT_EQ(t.type, config::TokenizerType::kWordPiece);
  EXPECT_EQ(t.model, d.file("run/hf/vocab.txt"));
  EXPECT_TRUE(t.lowercase);  // BertTokenizer's default without tokenizer_config.json
  EXPECT_EQ(c.run.name, "run");
  EXPECT_EQ(c.run.out_dir, d.path());
  auto tok = data::load_tokenizer(data::plan(c.data, c.task.seq_len));
  auto ids = tok->encode("Let there be LIGHT, [MASK] god said!");
  std::vector<std::string> pieces;
  for (auto id : ids) pieces.push_back(tok->piece(id));
  EXPECT_EQ(pieces, (std::vector<std::string>{"let", "there", "be", "light", ",", "[MASK]", "god",
                                              "said", "!"}));
  EXPECT_EQ(ids[5], tokenizers::Special::kMask);

  // A cased checkpoint: do_lower_case false in tokenizer_config.json.
  test::TempDir e;
  stdfs::copy(kHfDir + "/bert-mlm", e.file("cased"), stdfs::copy_options::recursive);
  test::write(e.file("cased/tokenizer_config.json"), R"({"do_lower_case": false})");
  import_hf(e.file("cased"), e.file("run"));
  auto cased = weights::load_run_model(e.file("run")).config.data.tokenizer;
  EXPECT_FALSE(cased.lowercase);
  EXPECT_EQ(cased.strip_accents, config::StripAccents::kAuto);
  test::write(e.file("cased/tokenizer_config.json"), R"({"do_lower_case": "no"})");
  EXPECT_THROW(import_hf(e.file("cased"), e.file("run2")), UserError);
}

TEST(HfImport, LlamaLayoutDecodersGiveTheReferenceLogits) {
  // Grouped-query (4 heads, 2 kv) untied; multi-query tied; Qwen2's q/k/v biases; Mistral; and
  // every rope_scaling type, each on a short input (12 tokens) and a long one (40).
  for (const char* fixture :
       {"llama", "llama-tied-mqa", "qwen2", "mistral", "llama-linear", "llama-dynamic",
        "llama-yarn", "llama-llama3", "llama-longrope", "llama-bpe", "llama-spm"}) {
    SCOPED_TRACE(fixture);
    test::TempDir d;
    import_hf(kHfDir + "/" + fixture, d.file("run"));
    expect_reference_logits(fixture, d.file("run"));
  }
}

TEST(HfImport, Phi3SplitsItsFusedProjectionsAndGivesTheReferenceLogits) {
  // qkv_proj and gate_up_proj split; LongRoPE with the original length at the top level (short
  // factors for the 12 tokens, long ones for the 40); partial rotary (4 of 8 channels) with a
  // window of 7 on every layer, in transformers 5's layout.
  struct Case {
    const char* fixture;
    std::string summary;
    int64_t rotary_dim;
  };
  for (const auto& c : {Case{"phi3", "rope", 0},
                        Case{"phi3-v5-partial", "sliding_attention (rope, window 7)", 4}}) {
    SCOPED_TRACE(c.fixture);
    test::TempDir d;
    import_hf(kHfDir + "/" + c.fixture, d.file("run"));
    expect_reference_logits(c.fixture, d.file("run"));
    auto m = weights::load_run_model(d.file("run"));
    EXPECT_EQ(config::position_summary(m.config.model), c.summary);
    const auto& rope = std::get<config::RopeConfig>(m.config.model.position.opts);
    EXPECT_EQ(rope.rotary_dim, c.rotary_dim);
    EXPECT_DOUBLE_EQ(m.config.model.norm_eps, 1e-5);
    if (c.rotary_dim == 0) {
      const auto& lr = std::get<config::LongRopeScaling>(rope.scaling.opts);
      EXPECT_EQ(lr.original_len, 16);
      EXPECT_DOUBLE_EQ(lr.factor, 4.0);
      EXPECT_EQ(lr.long_factor, (std::vector<double>{1.0, 2.5, 5.0, 9.0}));
    }
  }
}

TEST(HfImport, LlamaConfigMapsOntoTheDecoder) {
  test::TempDir d;
  import_hf(kHfDir + "/llama", d.file("run"));
  auto c = weights::load_run_model(d.file("run")).config;
  EXPECT_EQ(c.model.arch, config::Arch::kDecoder);
  EXPECT_EQ(c.model.norm_type, config::NormType::kRmsNorm);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-6);
  EXPECT_EQ(c.model.activation, config::Activation::kSwiglu);
  EXPECT_EQ(c.model.bias, config::LinearBias::kNone);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.model.n_kv_heads, 2);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_STREQ(c.task.type(), "clm");
  const auto& rope = std::get<config::RopeConfig>(c.model.position.opts);
  EXPECT_EQ(rope.pairing, config::RopePairing::kHalf);
  EXPECT_DOUBLE_EQ(rope.base, 10000.0);
  import_hf(kHfDir + "/qwen2", d.file("qwen2"));
  EXPECT_EQ(weights::load_run_model(d.file("qwen2")).config.model.bias, config::LinearBias::kQkv);
  import_hf(kHfDir + "/llama-yarn", d.file("yarn"));
  auto yc = weights::load_run_model(d.file("yarn")).config;
  const auto& yarn = std::get<config::YarnScaling>(
      std::get<config::RopeConfig>(yc.model.position.opts).scaling.opts);
  EXPECT_DOUBLE_EQ(yarn.factor, 4.0);
  EXPECT_EQ(yarn.original_len, 256);
  // BOS and EOS from config.json sit at ropelab's ids.
  auto order = vocab_order(d.file("run"));
  EXPECT_EQ(order[tokenizers::Special::kBos], 1);
  EXPECT_EQ(order[tokenizers::Special::kEos], 2);
}

TEST(HfImport, LlamaTokenizersComeAlongRenumbered) {
  // SentencePiece (Llama 2's layout): the ids of the sentencepiece library on the test strings.
  test::TempDir d;
  import_hf(kHfDir + "/llama-spm", d.file("spm"));
  auto c = weights::load_run_model(d.file("spm")).config;
  EXPECT_EQ(c.data.tokenizer.type, config::TokenizerType::kSpm);
  EXPECT_EQ(c.data.tokenizer.vocab_order, d.file("spm/hf/vocab_order.json"));
  auto tok = data::load_tokenizer(data::plan(c.data, c.task.seq_len));
  auto order = vocab_order(d.file("spm"));
  auto ref = nlohmann::json::parse(fs::read_file(kHfDir + "/llama-spm/spm_ids.json"));
  for (size_t i = 0; i < ref["texts"].size(); ++i) {
    const auto text = ref["texts"][i].get<std::string>();
    std::vector<int64_t> got;
    for (int32_t id : tok->encode(text)) got.push_back(order[static_cast<size_t>(id)]);
    EXPECT_EQ(got, ref["ids"][i].get<std::vector<int64_t>>()) << text;
  }
  EXPECT_EQ(order[tokenizers::Special::kUnk], 0);  // <unk>
  EXPECT_EQ(order[tokenizers::Special::kBos], 1);
  EXPECT_EQ(order[tokenizers::Special::kEos], 2);
  EXPECT_EQ(tok->decode(tok->encode("In the beginning")), "In the beginning");

  // Byte-level BPE (Llama 3's layout, embeddings padded past the tokenizer's 470 ids): the
  // specials it lacks take the padding rows.
  import_hf(kHfDir + "/llama-bpe", d.file("bpe"));
  auto cb = weights::load_run_model(d.file("bpe")).config;
  EXPECT_EQ(cb.data.tokenizer.type, config::TokenizerType::kBpe);
  auto border = vocab_order(d.file("bpe"));
  auto cfg = nlohmann::json::parse(fs::read_file(kHfDir + "/llama-bpe/config.json"));
  EXPECT_EQ(border[tokenizers::Special::kBos], cfg["bos_token_id"].get<int64_t>());
  EXPECT_EQ(border[tokenizers::Special::kEos], cfg["eos_token_id"][0].get<int64_t>());
  for (int32_t s : {tokenizers::Special::kPad, tokenizers::Special::kUnk, tokenizers::Special::kCls,
                    tokenizers::Special::kSep, tokenizers::Special::kMask})
    EXPECT_GE(border[static_cast<size_t>(s)], 470) << s;
  auto btok = data::load_tokenizer(data::plan(cb.data, cb.task.seq_len));
  tokenizers::BpeTokenizer plain(kHfDir + "/llama-bpe/tokenizer.json");
  const std::string text = "<|begin_of_text|>In the beginning, they're 12345 caf\u00e9!";
  auto ids = btok->encode(text);
  auto want = plain.encode_original(text);
  ASSERT_EQ(ids.size(), want.size());
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(border[static_cast<size_t>(ids[i])], want[i]);
  EXPECT_EQ(ids[0], tokenizers::Special::kBos);

  // Without tokenizer files the import says the run cannot tokenize text.
  auto summary = import_hf(kHfDir + "/llama", d.file("none"));
  EXPECT_NE(summary.find("cannot tokenize"), std::string::npos) << summary;
}

TEST(HfImport, LlamaRefusalsNameTheKey) {
  struct Case {
    const char* fixture;
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  // clang-format off: versions 14 and 19 lay out these lambdas differently
  std::vector<Case> cases = {
      {"llama", [](nlohmann::json& j) { j["hidden_act"] = "gelu"; }, "hidden_act"},
      {"llama", [](nlohmann::json& j) { j["head_dim"] = 7; }, "head_dim"},
      {"qwen3", [](nlohmann::json& j) { j["attention_bias"] = true; }, "attention_bias"},
      {"qwen3", [](nlohmann::json& j) { j.erase("head_dim"); }, "q_proj"},
      {"llama", [](nlohmann::json& j) { j["num_key_value_heads"] = 3; }, "num_key_value_heads"},
      {"llama", [](nlohmann::json& j) { j["attention_bias"] = true; }, "attention_bias"},
      {"llama",
       [](nlohmann::json& j) {
         j["rope_scaling"] = {{"rope_type", "su"}};
       },
       "rope_scaling.rope_type = \"su\""},
      {"llama",
       [](nlohmann::json& j) {
         j["rope_scaling"] = {{"factor", 2.0}};
       },
       "rope_type"},
      {"llama-yarn", [](nlohmann::json& j) { j["rope_scaling"]["mscale"] = 0.7; }, "mscale"},
      {"llama-linear", [](nlohmann::json& j) { j["rope_scaling"]["alpha"] = 2.0; }, "alpha"},
      {"llama-longrope", [](nlohmann::json& j) { j["rope_scaling"].erase("long_factor"); },
       "long_factor"},
      {"mistral", [](nlohmann::json& j) { j["sliding_window"] = 0; }, "sliding_window"},
      // OLMo 3 in transformers 4's layout: a base transformers 4 and 5 read differently.
      {"olmo3", [](nlohmann::json& j) { j["rope_theta"] = 10000.0; },
       "rope_theta = 10000.0 is not supported: transformers 5 gives OLMo 3's sliding layers"},
      {"olmo3", [](nlohmann::json& j) { j.erase("rope_theta"); }, "rope_theta = null"},
      {"mistral", [](nlohmann::json& j) { j["sliding_window"] = "4k"; }, "sliding_window"},
      {"mistral",
       [](nlohmann::json& j) {
         j["layer_types"] = {"full_attention", "sliding_attention"};
       },
       "layer_types"},
      {"llama",
       [](nlohmann::json& j) {
         j["layer_types"] = {"sliding_attention", "sliding_attention"};
       },
       "layer_types"},
      {"qwen2",
       [](nlohmann::json& j) {
         j["layer_types"] = {"full_attention", "sliding_attention"};
       },
       "use_sliding_window"},
      {"qwen2",
       [](nlohmann::json& j) {
         j["layer_types"] = {"full_attention", "chunked_attention"};
       },
       "layer_types"},
  };
  // clang-format on
  for (const auto& c : cases) {
    SCOPED_TRACE(c.expect);
    test::TempDir d;
    auto dir = damaged_copy(d, c.fixture, c.edit);
    try {
      import_hf(dir, d.file("run"));
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    EXPECT_FALSE(stdfs::exists(d.file("run")));
  }
}

TEST(HfImport, The2025DecodersGiveTheReferenceLogits) {
  // Windows (5, 6, 7) shorter than the long input (40 tokens): Mistral slides every layer; Qwen2
  // from max_window_layers on, or where layer_types says (here the first layer, not the last).
  // Qwen3's QK-norm, and heads 16 wide in a model 32 wide (4 heads: q has 64 channels).
  // SmolLM3's NoPE layer (the second), as no_rope_layers or no_rope_layer_interval, and with a
  // window on it. OLMo 2's QK-norm over the whole projections and norms after the sublayers;
  // OLMo 3's sliding layers, the global ones with YaRN, the sliding ones without.
  struct Case {
    const char* fixture;
    std::string summary;
    int64_t head_dim;
  };
  for (const auto& c :
       {Case{"qwen3", "rope", 16}, Case{"llama-head-dim", "rope", 16},
        Case{"qwen3-v5-swa", "full_attention (rope) + sliding_attention (rope, window 6)", 16},
        Case{"mistral-swa", "sliding_attention (rope, window 5)", 8},
        Case{"mistral-v5-swa", "sliding_attention (rope, window 5)", 8},
        Case{"qwen2-swa", "full_attention (rope) + sliding_attention (rope, window 6)", 8},
        Case{"qwen2-v5-swa", "sliding_attention (rope, window 7) + full_attention (rope)", 8},
        Case{"smollm3", "rope", 8}, Case{"smollm3-v5", "rope", 8}, Case{"olmo2", "rope", 8},
        Case{"olmo2-v5", "rope", 8},
        Case{"olmo3", "3x sliding_attention (rope, window 5) + full_attention (rope)", 8},
        Case{"olmo3-v5", "sliding_attention (rope, window 6) + full_attention (rope)", 8},
        Case{"smollm3-v5-swa", "full_attention (rope) + sliding_attention_nope (none, window 5)",
             8}}) {
    SCOPED_TRACE(c.fixture);
    test::TempDir d;
    import_hf(kHfDir + "/" + c.fixture, d.file("run"));
    expect_reference_logits(c.fixture, d.file("run"));
    auto m = weights::load_run_model(d.file("run"));
    EXPECT_EQ(config::position_summary(m.config.model), c.summary);
    const bool qwen3 = std::string(c.fixture).rfind("qwen3", 0) == 0,
               olmo2 = std::string(c.fixture).rfind("olmo", 0) == 0;  // OLMo 2 and 3
    EXPECT_EQ(m.config.model.attention.qk_norm, qwen3 || olmo2);
    EXPECT_EQ(m.config.model.attention.qk_norm_over,
              olmo2 ? config::QkNormOver::kProjection : config::QkNormOver::kHead);
    EXPECT_EQ(m.config.model.norm, olmo2 ? config::Norm::kReordered : config::Norm::kPre);
    EXPECT_EQ(config::head_dim_of(m.config.model), c.head_dim);
    if (c.summary == "rope" && std::string(c.fixture).rfind("smollm3", 0) == 0) {
      EXPECT_EQ(std::get<config::RopeConfig>(m.config.model.position.opts).nope_layers,
                std::vector<int64_t>{1});
      EXPECT_DOUBLE_EQ(std::get<config::RopeConfig>(m.config.model.position.opts).base, 2e6);
    }
  }
  // Mistral without sliding_window: transformers' default of 4096, said in the summary.
  test::TempDir d;
  auto dir = damaged_copy(d, "mistral", [](nlohmann::json& j) { j.erase("sliding_window"); });
  auto summary = import_hf(dir, d.file("run"));
  EXPECT_NE(summary.find("4096"), std::string::npos) << summary;
  auto c = weights::load_run_model(d.file("run")).config;
  EXPECT_EQ(c.model.layout.kinds.at("sliding_attention").window.value, 4096);
  // qwen2-v5-swa's global layer follows a sliding one: transformers 5's layer_types say it,
  // transformers 4's max_window_layers cannot, so only the v5 form exports.
  import_hf(kHfDir + "/qwen2-v5-swa", d.file("q"));
  export_hf(d.file("q"), d.file("q-hf"));
  auto ours = nlohmann::json::parse(fs::read_file(d.file("q-hf/config.json")));
  EXPECT_EQ(ours["layer_types"], nlohmann::json::array({"sliding_attention", "full_attention"}));
  EXPECT_EQ(ours["sliding_window"], 7);
  EXPECT_EQ(ours["use_sliding_window"], true);
  try {
    export_hf(d.file("q"), d.file("q-hf4"), HfConfigForm::kV4);
    ADD_FAILURE() << "exported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("max_window_layers"), std::string::npos) << e.what();
  }
  EXPECT_FALSE(stdfs::exists(d.file("q-hf4")));
  // A SmolLM3 whose NoPE layers slide is a layout with a kind of its own positions: imported,
  // not exported (no class writes NoPE layers with windows here).
  import_hf(kHfDir + "/smollm3-v5-swa", d.file("s"));
  try {
    export_hf(d.file("s"), d.file("s-hf"));
    ADD_FAILURE() << "exported";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("positions of its own"), std::string::npos) << e.what();
  }
}

TEST(HfImport, The2025DecodersDecodeWithTheCacheAsTheFullForward) {
  // A prompt, then one token at a time: wide heads with QK-norm per head (Qwen3) or over the
  // projections (OLMo 2), NoPE layers (SmolLM3), sliding windows of 5 and 6 over 20 tokens (the
  // ring buffer drops keys), Gemma 3's sliding layers with RoPE of their own, GPT-2's learned
  // positions (the table read from the cache's length) and GPT-NeoX's parallel residual.
  for (const char* fixture :
       {"qwen3", "olmo2", "smollm3", "mistral-swa", "qwen2-swa", "smollm3-v5-swa", "gemma3",
        "gemma3-v5", "phi3-v5-partial", "olmo3", "gpt2", "gpt-neox"}) {
    SCOPED_TRACE(fixture);
    test::TempDir d;
    import_hf(kHfDir + "/" + fixture, d.file("run"));
    auto m = weights::load_run_model(d.file("run"));
    m.model->eval();
    torch::NoGradGuard ng;
    torch::manual_seed(3);
    auto tokens = torch::randint(7, 64, {2, 20});
    auto full = m.model->backbone->decode(tokens);
    model::DecodeState st;
    std::vector<torch::Tensor> steps{
        m.model->backbone->decode(tokens.narrow(1, 0, 4), {}, {}, &st)};
    for (int64_t t = 4; t < 20; ++t)
      steps.push_back(m.model->backbone->decode(tokens.narrow(1, t, 1), {}, {}, &st));
    EXPECT_LT(max_diff(torch::cat(steps, 1), full), 1e-4);
  }
}

TEST(HfExport, LayoutsNoLlamaLayoutClassHasAreRefused) {
  // Mixed sliding and global layers without Qwen2's biases (Mistral slides all or none), a
  // chunk, a temperature, a kind with positions of its own.
  for (auto [edit, expect] :
       {std::pair{"model.bias=none", "a mix of sliding-window"},
        {"model.layout.kinds.sliding_attention.chunk=4", "chunk"},
        {"model.layout.kinds.full_attention.temperature.scale=0.1", "temperature"},
        {"model.layout.kinds.full_attention.position.type=none", "positions of its own"}}) {
    SCOPED_TRACE(expect);
    test::TempDir d;
    import_hf(kHfDir + "/qwen2-swa", d.file("run"));
    std::vector<config::Override> ov = {config::Override{edit}};
    if (std::string(edit).find("chunk") != std::string::npos)
      ov.insert(ov.begin(), config::Override{"model.layout.kinds.sliding_attention.window=~"});
    expect_export_refused(d, config::load_config(d.file("run/config.yaml"), ov), expect);
  }
}

TEST(HfImport, ConfigMapsOntoTheEncoder) {
  test::TempDir d;
  import_hf(kHfDir + "/bert-mlm-untied", d.file("run"));
  auto m = weights::load_run_model(d.file("run"));
  const auto& c = m.config;
  EXPECT_EQ(c.model.arch, config::Arch::kEncoder);
  EXPECT_EQ(c.model.norm, config::Norm::kPost);
  EXPECT_EQ(c.model.d_model, 32);
  EXPECT_EQ(c.model.n_layers, 2);
  EXPECT_EQ(c.model.n_heads, 4);
  EXPECT_EQ(c.model.d_ff, 48);
  EXPECT_DOUBLE_EQ(c.model.norm_eps, 1e-5);
  EXPECT_FALSE(c.model.tie_embeddings);
  EXPECT_STREQ(c.task.type(), "mlm");
  EXPECT_EQ(c.task.seq_len, 40);
  EXPECT_EQ(m.vocab, 64);
  // The checkpoint's configuration and vocabulary travel with the run.
  EXPECT_TRUE(stdfs::exists(d.file("run/hf/config.json")));
  EXPECT_TRUE(stdfs::exists(d.file("run/hf/vocab.txt")));
  // BERT's own epsilon and the tied head.
  import_hf(kHfDir + "/bert-mlm", d.file("tied"));
  auto tied = weights::load_run_model(d.file("tied"));
  EXPECT_DOUBLE_EQ(tied.config.model.norm_eps, 1e-12);
  EXPECT_TRUE(tied.config.model.tie_embeddings);
  auto order = vocab_order(d.file("run"));
  // ropelab's pad, unk, cls, sep and mask ids hold BERT's [PAD], [UNK], [CLS], [SEP], [MASK].
  std::vector<std::string> tokens;
  std::istringstream lines(fs::read_file(d.file("run/hf/vocab.txt")));
  for (std::string line; std::getline(lines, line);) tokens.push_back(line);
  EXPECT_EQ(tokens[order[0]], "[PAD]");
  EXPECT_EQ(tokens[order[1]], "[UNK]");
  EXPECT_EQ(tokens[order[4]], "[CLS]");
  EXPECT_EQ(tokens[order[5]], "[SEP]");
  EXPECT_EQ(tokens[order[6]], "[MASK]");
}

TEST(HfImport, RoFormerBecomesAnEncoderWithRoPE) {
  test::TempDir d;
  import_hf(kHfDir + "/roformer-mlm", d.file("run"));
  auto m = weights::load_run_model(d.file("run"));
  EXPECT_STREQ(m.config.model.position.type(), "rope");
  EXPECT_EQ(m.config.model.arch, config::Arch::kEncoder);
  EXPECT_EQ(m.config.task.seq_len, 64);
  EXPECT_EQ(m.config.model.embedding_size, 0);
  import_hf(kHfDir + "/roformer-mlm-small", d.file("small"));
  EXPECT_EQ(weights::load_run_model(d.file("small")).config.model.embedding_size, 16);
  // RoFormer's own refusals: RoPE on the values; an embedding_size the tensors do not have.
  for (auto [key, value] :
       {std::pair<std::string, nlohmann::json>{"rotary_value", true}, {"embedding_size", 8}}) {
    test::TempDir e;
    auto dir = damaged_copy(e, "roformer-mlm", [&](nlohmann::json& j) { j[key] = value; });
    try {
      import_hf(dir, e.file("run"));
      ADD_FAILURE() << key << " accepted";
    } catch (const UserError& err) {
      EXPECT_NE(std::string(err.what()).find(key == "rotary_value" ? key : "word_embeddings"),
                std::string::npos)
          << err.what();
    }
  }
}

TEST(HfImport, BareBertModelGivesTheReferenceHiddenStates) {
  // TF-converted names (LayerNorm.gamma/beta) and a saved position_ids buffer; no MLM head.
  test::TempDir d;
  auto expected = Checkpoint::open(kHfDir + "/bert-base/expected.safetensors");
  auto o = run_imported("bert-base", d, expected);
  EXPECT_LT(max_diff(o.hidden, tensor(expected, "last_hidden_state")), 1e-4);
}

TEST(HfImport, RefusesWhatItCannotRepresentWithOneLine) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string expect;
  };
  std::vector<Case> cases = {
      {[](nlohmann::json& j) { j["architectures"] = {"GPT2LMHeadModel"}; }, "GPT2LMHeadModel"},
      {[](nlohmann::json& j) { j.erase("architectures"); }, "architectures"},
      {[](nlohmann::json& j) { j["hidden_act"] = "gelu_new"; }, "hidden_act"},
      {[](nlohmann::json& j) { j["position_embedding_type"] = "relative_key"; },
       "position_embedding_type"},
      {[](nlohmann::json& j) { j["type_vocab_size"] = 3; }, "type_vocab_size"},
      {[](nlohmann::json& j) { j["hidden_size"] = 64; }, "config.json implies"},
      {[](nlohmann::json& j) { j["num_hidden_layers"] = 3; }, "encoder.layer.2"},
      {[](nlohmann::json& j) { j["num_hidden_layers"] = 1; }, "encoder.layer.1"},
      {[](nlohmann::json& j) { j["vocab_size"] = 65; }, "vocab.txt"},
      {[](nlohmann::json& j) { j["num_attention_heads"] = "four"; }, "num_attention_heads"},
      {[](nlohmann::json& j) { j["layer_norm_eps"] = 2.0; }, "norm_eps"},
      {[](nlohmann::json& j) { j["is_decoder"] = true; }, "is_decoder"},
      // A bare BertModel has no MLM head: tensors the class lacks are refused, not dropped.
      {[](nlohmann::json& j) { j["architectures"] = {"BertModel"}; }, "BertModel does not have"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE(cases[i].expect);
    test::TempDir d;
    auto dir = damaged_copy(d, "bert-mlm", cases[i].edit);
    try {
      import_hf(dir, d.file("run"));
      ADD_FAILURE() << "accepted";
    } catch (const UserError& e) {
      std::string msg = e.what();
      EXPECT_NE(msg.find(cases[i].expect), std::string::npos) << msg;
      EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
    }
    EXPECT_FALSE(stdfs::exists(d.file("run")));
    EXPECT_FALSE(stdfs::exists(d.file("run.tmp")));
  }
}

TEST(HfImport, CliRefusesAnExistingRunAndAMissingVocabularyWithExit2) {
  test::TempDir d;
  const std::string bin = test::ropelab_bin();
  stdfs::create_directories(d.file("taken"));
  test::write(d.file("taken/keep.txt"), "mine");
  auto r = test::run(bin + " import-hf " + kHfDir + "/bert-mlm --out " + d.file("taken"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("already exists"), std::string::npos) << r.out;
  EXPECT_EQ(fs::read_file(d.file("taken/keep.txt")), "mine");

  stdfs::copy(kHfDir + "/bert-mlm", d.file("novocab"), stdfs::copy_options::recursive);
  stdfs::remove(d.file("novocab/vocab.txt"));
  r = test::run(bin + " import-hf " + d.file("novocab") + " --out " + d.file("run"));
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("vocab.txt"), std::string::npos) << r.out;
  EXPECT_FALSE(stdfs::exists(d.file("run")));

  // A bare BertModel imports as an MLM run whose head is new, and says so.
  r = test::run(bin + " import-hf " + kHfDir + "/bert-base --out " + d.file("run2"));
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("initialised"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("not used"), std::string::npos) << r.out;  // the pooler
}

// ---- export: the inverse of the import

std::string model_yaml(const config::Config& c) { return model_yaml_of(c.model); }

TEST(HfExport, ImportThenExportGivesTheCheckpointBack) {
  // The rows un-permuted, the names restored; what the class does not keep is left out (the
  // pooler of an MLM class, buffers, the tied decoder).
  struct Case {
    const char* fixture;
    std::vector<std::string> data;
    std::set<std::string> dropped;
    const char* cls;
  };
  test::TempDir glue;
  const std::vector<std::string> mnli = {"data.source=glue", "data.glue_task=MNLI",
                                         "data.train=" + glue.file("MNLI")};
  for (const auto& c :
       {Case{"bert-mlm",
             {},
             {"bert.pooler.dense.weight", "bert.pooler.dense.bias"},
             "BertForMaskedLM"},
        Case{"bert-mlm-untied",
             {},
             {"bert.pooler.dense.weight", "bert.pooler.dense.bias"},
             "BertForMaskedLM"},
        Case{"bert-cls", mnli, {}, "BertForSequenceClassification"},
        Case{"roformer-mlm", {}, {}, "RoFormerForMaskedLM"},
        Case{"roformer-mlm-small", {}, {}, "RoFormerForMaskedLM"},
        Case{"roformer-cls", {"data.source=bible-sst2"}, {}, "RoFormerForSequenceClassification"},
        Case{"llama", {}, {}, "LlamaForCausalLM"},
        Case{"llama-tied-mqa", {}, {}, "LlamaForCausalLM"},
        Case{"mistral", {}, {}, "MistralForCausalLM"},
        Case{"mistral-swa", {}, {}, "MistralForCausalLM"},
        Case{"mistral-v5-swa", {}, {}, "MistralForCausalLM"},
        Case{"qwen2-swa", {}, {}, "Qwen2ForCausalLM"},
        Case{"qwen3", {}, {}, "Qwen3ForCausalLM"},
        Case{"qwen3-v5-swa", {}, {}, "Qwen3ForCausalLM"},
        Case{"llama-head-dim", {}, {}, "LlamaForCausalLM"},
        Case{"smollm3", {}, {}, "SmolLM3ForCausalLM"},
        Case{"smollm3-v5", {}, {}, "SmolLM3ForCausalLM"},
        Case{"olmo2", {}, {}, "Olmo2ForCausalLM"},
        Case{"olmo2-v5", {}, {}, "Olmo2ForCausalLM"},
        Case{"phi3", {}, {}, "Phi3ForCausalLM"},
        Case{"olmo3", {}, {}, "Olmo3ForCausalLM"},
        Case{"olmo3-v5", {}, {}, "Olmo3ForCausalLM"},
        Case{"phi3-v5-partial", {}, {}, "Phi3ForCausalLM"},
        Case{"qwen2", {}, {}, "Qwen2ForCausalLM"},
        Case{"llama-yarn", {}, {}, "LlamaForCausalLM"},
        Case{"llama-longrope", {}, {}, "LlamaForCausalLM"},
        Case{"llama-bpe", {}, {}, "LlamaForCausalLM"},
        Case{"llama-spm", {}, {}, "LlamaForCausalLM"},
        Case{"llama-v5-yarn", {}, {}, "LlamaForCausalLM"},
        Case{"llama-v5-longrope", {}, {}, "LlamaForCausalLM"},
        Case{"llama-v5-llama3", {}, {}, "LlamaForCausalLM"},
        Case{"qwen2-v5-dynamic", {}, {}, "Qwen2ForCausalLM"},
        Case{"gpt2",
             {},
             {"h.0.attn.bias", "h.0.attn.masked_bias", "h.1.attn.bias", "h.1.attn.masked_bias"},
             "GPT2LMHeadModel"},
        Case{"gpt2-untied-v5", {}, {}, "GPT2LMHeadModel"},
        Case{"gpt-neox",
             {},
             {"gpt_neox.layers.0.attention.bias", "gpt_neox.layers.0.attention.masked_bias",
              "gpt_neox.layers.0.attention.rotary_emb.inv_freq", "gpt_neox.layers.1.attention.bias",
              "gpt_neox.layers.1.attention.masked_bias",
              "gpt_neox.layers.1.attention.rotary_emb.inv_freq"},
             "GPTNeoXForCausalLM"},
        Case{"gpt-neox-v5", {}, {}, "GPTNeoXForCausalLM"},
        Case{"bert-mlm-v5",
             {},
             {"bert.pooler.dense.weight", "bert.pooler.dense.bias"},
             "BertForMaskedLM"}}) {
    SCOPED_TRACE(c.fixture);
    test::TempDir d;
    import_hf(kHfDir + "/" + c.fixture, d.file("run"), c.data);
    auto summary = export_hf(d.file("run"), d.file("out"));
    EXPECT_NE(summary.find(c.cls), std::string::npos) << summary;
    expect_same_tensors(c.fixture, d.file("out"), c.dropped);
    auto theirs = nlohmann::json::parse(fs::read_file(kHfDir + "/" + c.fixture + "/config.json"));
    auto ours = nlohmann::json::parse(fs::read_file(d.file("out/config.json")));
    for (const char* k : {"vocab_size",
                          "hidden_size",
                          "num_hidden_layers",
                          "num_attention_heads",
                          "intermediate_size",
                          "max_position_embeddings",
                          "num_key_value_heads",
                          "tie_word_embeddings",
                          "bos_token_id",
                          "embedding_size",
                          "sliding_window",
                          "use_sliding_window",
                          "max_window_layers",
                          "layer_types",
                          "architectures",
                          "head_dim",
                          "attention_bias",
                          "no_rope_layers",
                          "no_rope_layer_interval",
                          "n_embd",
                          "n_layer",
                          "n_head",
                          "n_positions",
                          "n_inner",
                          "activation_function",
                          "scale_attn_weights",
                          "layer_norm_epsilon",
                          "hidden_act",
                          "use_parallel_residual",
                          "layer_norm_eps"})
      if (theirs.contains(k)) {
        EXPECT_EQ(ours[k], theirs[k]) << k;
      }
    // transformers 5's layout by default: the base inside rope_parameters, dtype.
    EXPECT_FALSE(ours.contains("rope_theta") || ours.contains("rope_scaling") ||
                 ours.contains("torch_dtype"))
        << ours.dump();
    EXPECT_EQ(ours["dtype"], "float32");
    if (theirs.contains("rope_theta")) {  // OLMo 3's are per layer type
      const auto& rp = ours["rope_parameters"];
      EXPECT_EQ(
          rp.contains("full_attention") ? rp["full_attention"]["rope_theta"] : rp["rope_theta"],
          theirs["rope_theta"]);
    }
    if (theirs.contains("rope_parameters") &&
        theirs["rope_parameters"].contains("partial_rotary_factor")) {
      EXPECT_EQ(ours["rope_parameters"]["partial_rotary_factor"],
                theirs["rope_parameters"]["partial_rotary_factor"]);
    }
    // --hf-v4: transformers 4's keys, as the v4 fixtures have them.
    export_hf(d.file("run"), d.file("out4"), HfConfigForm::kV4);
    auto ours4 = nlohmann::json::parse(fs::read_file(d.file("out4/config.json")));
    EXPECT_FALSE(ours4.contains("rope_parameters") || ours4.contains("dtype")) << ours4.dump();
    if (theirs.contains("rope_scaling") && theirs["rope_scaling"].contains("type")) {
      auto& rs = theirs["rope_scaling"];  // the older key (Phi-3's): read as rope_type
      rs["rope_type"] = rs["type"];
      rs.erase("type");
    }
    for (const char* k :
         {"rope_theta", "rope_scaling", "original_max_position_embeddings",
          "max_position_embeddings", "partial_rotary_factor", "rotary_pct", "rotary_emb_base"})
      if (theirs.contains(k) && !theirs.contains("rope_parameters")) {
        EXPECT_EQ(ours4[k], theirs[k]) << k;
      }
    if (std::string(c.fixture) == "bert-cls") {
      EXPECT_EQ(ours["id2label"], theirs["id2label"]);
    }
    // Either export is a checkpoint import-hf takes again, with the same model.
    const auto first = weights::load_run_model(d.file("run")).config.model;
    for (const char* out : {"out", "out4"}) {
      const std::string again = d.file(std::string("again-") + out);
      EXPECT_NE(import_hf(d.file(out), again, c.data).find(c.cls), std::string::npos);
      EXPECT_EQ(model_yaml(weights::load_run_model(again).config), model_yaml_of(first)) << out;
    }
    for (const char* f : {"vocab.txt", "tokenizer.json", "tokenizer.model"})
      if (stdfs::exists(kHfDir + "/" + c.fixture + "/" + f)) {
        EXPECT_EQ(fs::read_file(d.file("out/") + f),
                  fs::read_file(kHfDir + "/" + c.fixture + "/" + f))
            << f;
      }
  }
}

TEST(HfExport, RunsNoClassComputesAreRefusedNamingTheDifference) {
  // A ropelab decoder with LayerNorm and GELU (GPT-style), T5's bias in a decoder, an encoder
  // with FIRE: no Hugging Face class computes them.
  for (auto [pos, norm, expect] :
       {std::tuple{"rope", "layernorm", "LayerNorm"}, std::tuple{"t5", "rmsnorm", "position t5"}}) {
    SCOPED_TRACE(expect);
    test::TempDir d;
    import_hf(kHfDir + "/llama", d.file("run"));
    expect_export_refused(
        d,
        config::load_config(d.file("run/config.yaml"),
                            {config::Override{std::string("model.norm_type=") + norm},
                             config::Override{std::string("model.position.type=") + pos}}),
        expect);
  }
}

}  // namespace
}  // namespace ropelab::hf
