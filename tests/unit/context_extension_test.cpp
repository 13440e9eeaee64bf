// Context extension on trained models: position changes on task.init_from (what is allowed,
// what is refused, what the run records), stages of an experiment, sliding-window perplexity
// against hand-computed windows and a direct forward, and the passkey prompt.
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "eval/ids.h"
#include "eval/long_context.h"
#include "helpers.h"
#include "train/metrics.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/weights.h"

namespace ropelab {
namespace {

namespace stdfs = std::filesystem;

const char* kTrain =
    "max_steps: 6, batch_size: 2, log_every: 3, eval_every: 6, eval_batches: 1, "
    "checkpoint_every: 6, schedule: {warmup: 2}";

std::string expect_refused(const config::Config& c) {
  try {
    train::train(c);
  } catch (const UserError& e) {
    return e.what();
  }
  ADD_FAILURE() << "the run trained";
  return "";
}

// ---- position changes on task.init_from

TEST(InitFrom, ScalingChangeTrainsAndIsRecorded) {
  test::TempDir d;
  train::train(test::tiny_clm_run(d, 1, "ref", kTrain));
  const std::string ref = d.file("runs/ref");
  auto ext = test::tiny_clm_run(
      d, 1, "ext", kTrain, "",
      {"task.init_from=" + ref, "task.seq_len=32",
       "model.position.scaling={type: yarn, factor: 4, original_len: 16}"});
  train::train(ext);
  auto j = nlohmann::json::parse(fs::read_file(d.file("runs/ext/init_from.json")));
  EXPECT_EQ(j["source"], ref);
  EXPECT_EQ(j["step"], 6);
  std::map<std::string, std::pair<std::string, std::string>> changes;
  for (const auto& c : j["position_changes"]) changes[c["key"]] = {c["before"], c["after"]};
  EXPECT_EQ(changes.at("model.position.scaling.type"), std::make_pair(std::string("none"),
                                                                       std::string("yarn")));
  EXPECT_EQ(changes.at("model.position.scaling.factor").second, "4.0");
  EXPECT_EQ(changes.count("task.seq_len"), 0u);  // not a model key
  const std::string summary = j["summary"];
  EXPECT_EQ(summary.rfind("yarn x4.0", 0), 0u) << summary;
  EXPECT_NE(summary.find("from " + ref + " (step 6)"), std::string::npos) << summary;
  // metrics.h5 carries it for compare's position column.
  auto attrs = train::read_metric_attrs(d.file("runs/ext/metrics.h5"));
  EXPECT_EQ(attrs.at("origin"), summary);
}

TEST(InitFrom, BaseNopeLayersAndDropeAreAllowed) {
  test::TempDir d;
  train::train(test::tiny_clm_run(d, 1, "ref", kTrain, ", n_layers: 2"));
  const std::string from = "task.init_from=" + d.file("runs/ref");
  for (const auto& [name, change] :
       std::vector<std::pair<std::string, std::string>>{
           {"base", "model.position.base=500000"},
           {"nope", "model.position.nope_layers=[1]"},
           {"fraction", "model.position.fraction=0.5"},
           {"drope", "model.position.type=none"}}) {
    train::train(test::tiny_clm_run(d, 1, name, kTrain, ", n_layers: 2", {from, change}));
    auto j = nlohmann::json::parse(fs::read_file(d.file("runs/" + name + "/init_from.json")));
    EXPECT_FALSE(j["position_changes"].empty()) << name;
  }
  auto drope = nlohmann::json::parse(fs::read_file(d.file("runs/drope/init_from.json")));
  EXPECT_EQ(drope["summary"].get<std::string>().rfind("type rope -> none", 0), 0u)
      << drope["summary"];
}

TEST(InitFrom, OtherChangesAndNewParametersAreRefused) {
  test::TempDir d;
  train::train(test::tiny_clm_run(d, 1, "ref", kTrain));
  const std::string from = "task.init_from=" + d.file("runs/ref");
  // Another width: strict as before, with the hint that positions may change.
  auto msg = expect_refused(test::tiny_clm_run(d, 1, "wide", kTrain, "", {from, "model.d_ff=64"}));
  EXPECT_NE(msg.find("model.d_ff: 32 (pretrained) vs 64"), std::string::npos) << msg;
  EXPECT_NE(msg.find("model.position or model.layout alone"), std::string::npos) << msg;
  // A position family with parameters of its own has no stated initialisation.
  msg = expect_refused(
      test::tiny_clm_run(d, 1, "t5", kTrain, "", {from, "model.position.type=t5"}));
  EXPECT_NE(msg.find("model.position.type: rope (pretrained) vs t5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("adds parameters the pretrained model lacks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("relative_attention_bias"), std::string::npos) << msg;
  // Refused before anything was written into the runs directory.
  EXPECT_FALSE(stdfs::exists(d.file("runs/t5")));
  EXPECT_FALSE(stdfs::exists(d.file("runs/wide")));
}

TEST(InitFrom, DescribeChanges) {
  using weights::PositionChange;
  EXPECT_EQ(weights::describe_changes({}), "");
  EXPECT_EQ(weights::describe_changes(
                {{"model.position.scaling.attention_factor", "(absent)", "0.0"},
                 {"model.position.scaling.factor", "(absent)", "4.0"},
                 {"model.position.scaling.original_len", "(absent)", "64"},
                 {"model.position.scaling.type", "none", "yarn"}}),
            "yarn x4.0, scaling.original_len 64");
  EXPECT_EQ(weights::describe_changes({{"model.position.base", "10000.0", "500000.0"}}),
            "base 10000.0 -> 500000.0");
  EXPECT_EQ(weights::describe_changes(
                {{"model.layout.kinds.global.position.scaling.factor", "(absent)", "8.0"},
                 {"model.layout.kinds.global.position.scaling.type", "none", "linear"}}),
            "layout.kinds.global.position.scaling linear x8.0");
  EXPECT_TRUE(weights::is_position_key("model.layout.pattern"));
  EXPECT_FALSE(weights::is_position_key("model.attention.ssmax"));
}

// ---- stages

TEST(Stages, OrderedAfterTheirSourceAndChecked) {
  test::TempDir d;
  test::tiny_clm_run(d, 1, "x", kTrain);  // writes d/c.yaml
  auto write_exp = [&](const std::string& variants) {
    return test::write(d.file("e.yaml"), "name: e\nbase: c.yaml\nout_dir: " + d.file("runs") +
                                             "\nseeds: [1, 2]\nvariants:\n" + variants);
  };
  auto e = config::load_experiment(write_exp(
      "  - {name: s3, from: s2, set: [task.seq_len=64]}\n"
      "  - {name: s1}\n"
      "  - {name: s2, from: s1, set: [task.seq_len=32]}\n"));
  auto runs = config::experiment_runs(e);
  ASSERT_EQ(runs.size(), 6u);
  EXPECT_EQ(runs[0].name, "s1.seed1");
  EXPECT_EQ(runs[2].name, "s2.seed1");
  EXPECT_EQ(runs[4].name, "s3.seed1");
  EXPECT_EQ(runs[5].config.task.init_from, d.file("runs") + "/e/s2.seed2");
  EXPECT_EQ(runs[1].config.task.init_from, "");
  auto refused = [&](const std::string& variants, const std::string& words) {
    try {
      config::load_experiment(write_exp(variants));
      ADD_FAILURE() << "accepted: " << variants;
    } catch (const config::ConfigError& err) {
      EXPECT_NE(std::string(err.what()).find(words), std::string::npos) << err.what();
    }
  };
  refused("  - {name: a, from: b}\n  - {name: b, from: a}\n", "form a cycle");
  refused("  - {name: a, from: ab}\n  - {name: abc}\n", "variants[0].from");
}

// ---- sliding-window perplexity

TEST(SlidingWindows, HandComputed) {
  auto w = eval::sliding_windows(10, 4, 2);
  ASSERT_EQ(w.size(), 4u);
  const int64_t want[4][3] = {{0, 4, 1}, {2, 6, 4}, {4, 8, 6}, {6, 10, 8}};
  for (size_t i = 0; i < 4; ++i) {
    EXPECT_EQ(w[i].begin, want[i][0]);
    EXPECT_EQ(w[i].end, want[i][1]);
    EXPECT_EQ(w[i].first, want[i][2]);
  }
  // A window longer than the sequence: one pass.
  w = eval::sliding_windows(5, 8, 4);
  ASSERT_EQ(w.size(), 1u);
  EXPECT_EQ(w[0].end, 5);
  EXPECT_EQ(w[0].first, 1);
  // Every target once, with at least min(t, W - S) tokens of context.
  for (int64_t n : {2, 3, 7, 50, 101})
    for (int64_t W : {2, 3, 8, 16})
      for (int64_t S = 1; S < W; ++S) {
        std::vector<int> scored(static_cast<size_t>(n), 0);
        for (const auto& x : eval::sliding_windows(n, W, S)) {
          EXPECT_LE(x.end - x.begin, W);
          for (int64_t t = x.first; t < x.end; ++t) {
            ++scored[static_cast<size_t>(t)];
            EXPECT_GE(t - x.begin, std::min(t, W - S)) << n << " " << W << " " << S;
          }
        }
        for (int64_t t = 1; t < n; ++t) EXPECT_EQ(scored[static_cast<size_t>(t)], 1) << t;
        EXPECT_EQ(scored[0], 0);
      }
  EXPECT_THROW(eval::sliding_windows(10, 4, 4), UserError);
  EXPECT_THROW(eval::sliding_windows(10, 4, 0), UserError);
}

}  // namespace
}  // namespace ropelab
