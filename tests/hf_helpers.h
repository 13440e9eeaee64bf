// Helpers of the Hugging Face tests (tests/unit/hf_*_test.cpp): the fixtures that
// scripts/golden/hf_fixtures.py writes under tests/data/hf, their tensors, and copies of them
// with config.json edited.
#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "config/loader.h"
#include "helpers.h"
#include "hf/import.h"
#include "hf/safetensors.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/weights.h"

namespace ropelab::test {

inline const std::string kHfDir = std::string(ROPELAB_SOURCE_DIR) + "/tests/data/hf";

// A fixture tensor (int64 or float32) copied out of a safetensors file.
inline at::Tensor tensor(const hf::Checkpoint& c, const std::string& name) {
  const auto& v = c.get(name);
  auto dt = v.dtype == hf::DType::kI64 ? torch::kLong : torch::kFloat32;
  auto t = torch::empty(v.shape, dt);
  std::memcpy(t.data_ptr(), v.data, v.bytes);
  return t;
}

// The inverse of the import's re-numbering: checkpoint id -> ropelab id.
inline at::Tensor to_ropelab_ids(const std::vector<int64_t>& order, const at::Tensor& ids) {
  auto inv = torch::empty({static_cast<int64_t>(order.size())}, torch::kLong);
  for (size_t r = 0; r < order.size(); ++r) inv[order[r]] = static_cast<int64_t>(r);
  return inv.index_select(0, ids.reshape(-1)).reshape(ids.sizes());
}

// An imported run's vocabulary order (RUN/hf/vocab_order.json).
inline std::vector<int64_t> vocab_order(const std::string& run) {
  return nlohmann::json::parse(fs::read_file(run + "/hf/vocab_order.json"))
      .get<std::vector<int64_t>>();
}

inline double max_diff(const at::Tensor& a, const at::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>();
}

// A copy of a fixture under `d`, with `edit` applied to its config.json.
inline std::string damaged_copy(const TempDir& d, const std::string& fixture,
                                const std::function<void(nlohmann::json&)>& edit) {
  const std::string dir = d.file(fixture);
  std::filesystem::copy(kHfDir + "/" + fixture, dir, std::filesystem::copy_options::recursive);
  auto j = nlohmann::json::parse(fs::read_file(dir + "/config.json"));
  edit(j);
  write(dir + "/config.json", j.dump(2));
  return dir;
}

// Every tensor of `fixture`'s model.safetensors that its class keeps equals the export's.
inline void expect_same_tensors(const std::string& fixture, const std::string& exported,
                                const std::set<std::string>& dropped = {}) {
  auto a = hf::Checkpoint::open(kHfDir + "/" + fixture + "/model.safetensors");
  auto b = hf::Checkpoint::open(exported + "/model.safetensors");
  size_t compared = 0;
  for (const auto& name : a.names()) {
    std::string modern = name;  // TF-converted names come back modern
    for (auto [from, to] : {std::pair{"LayerNorm.gamma", "LayerNorm.weight"},
                            std::pair{"LayerNorm.beta", "LayerNorm.bias"}})
      if (modern.size() > std::strlen(from) &&
          modern.compare(modern.size() - std::strlen(from), std::strlen(from), from) == 0)
        modern = modern.substr(0, modern.size() - std::strlen(from)) + to;
    if (dropped.count(modern) != 0) continue;
    // A bare model's names (the hub's first GPT-2) come back under the class's prefix.
    for (const char* prefix : {"transformer.", "gpt_neox."})
      if (!b.has(modern) && b.has(prefix + modern)) modern = prefix + modern;
    SCOPED_TRACE(name);
    ASSERT_TRUE(b.has(modern)) << "not exported";
    // The MLM head's bias goes out under both names, the one in use (hf/bert.cpp): a
    // transformers 5 untied head's dead cls.predictions.bias comes back as the decoder's.
    std::string from = name;
    if (name == "cls.predictions.bias" && a.has("cls.predictions.decoder.bias"))
      from = "cls.predictions.decoder.bias";
    EXPECT_TRUE(torch::equal(tensor(a, from), tensor(b, modern)));
    ++compared;
  }
  if (a.has("cls.predictions.bias") && !a.has("cls.predictions.decoder.bias")) {
    ASSERT_TRUE(b.has("cls.predictions.decoder.bias"));
    EXPECT_TRUE(
        torch::equal(tensor(a, "cls.predictions.bias"), tensor(b, "cls.predictions.decoder.bias")));
    ++compared;
  }
  EXPECT_EQ(compared + dropped.size() >= b.names().size(), true);
  EXPECT_GT(compared, 10u);
}

// A decoder fixture's imported run against its expected.safetensors: the logits of the long
// (40-token) and short (12-token) inputs within 1e-4, in the checkpoint's vocabulary order.
inline void expect_reference_logits(const std::string& fixture, const std::string& run) {
  auto expected = hf::Checkpoint::open(kHfDir + "/" + fixture + "/expected.safetensors");
  auto order = vocab_order(run);
  auto m = weights::load_run_model(run);
  m.model->eval();
  torch::NoGradGuard ng;
  auto cols = torch::tensor(order, torch::kLong);
  for (const std::string tag : {"", "_short"}) {
    auto ids = to_ropelab_ids(order, tensor(expected, "input_ids" + tag));
    auto logits = m.model->logits(m.model->backbone->decode(ids));
    auto want = tensor(expected, "logits" + tag).index_select(2, cols);
    EXPECT_LT(max_diff(logits, want), 1e-4) << tag;
    EXPECT_GT(want.abs().max().item<double>(), 1.0);
  }
}

// import-hf of `dir` refuses with one line holding `expect`, and leaves no run behind.
inline void expect_import_refused(const std::string& dir, const std::string& run,
                                  const std::string& expect) {
  try {
    hf::import_hf(dir, run);
    ADD_FAILURE() << "accepted";
  } catch (const UserError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
  EXPECT_FALSE(std::filesystem::exists(run));
}

// The model section of a config as YAML (what must survive an export and an import).
inline std::string model_yaml_of(const config::ModelConfig& m) {
  config::Config c;
  c.model = m;
  const std::string all = config::dump(c);
  std::string out;
  std::istringstream lines(all.substr(all.find("\nmodel:") + 1));
  for (std::string line; std::getline(lines, line);) {
    if (!out.empty() && !line.empty() && line[0] != ' ') break;  // the next section
    out += line + "\n";
  }
  return out;
}
}  // namespace ropelab::test
