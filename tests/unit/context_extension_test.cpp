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
#include "lab/long_eval.h"
#include "text/lines.h"
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
  auto ext =
      test::tiny_clm_run(d, 1, "ext", kTrain, "",
                         {"task.init_from=" + ref, "task.seq_len=32",
                          "model.position.scaling={type: yarn, factor: 4, original_len: 16}"});
  train::train(ext);
  auto j = nlohmann::json::parse(fs::read_file(d.file("runs/ext/init_from.json")));
  EXPECT_EQ(j["source"], ref);
  EXPECT_EQ(j["step"], 6);
  std::map<std::string, std::pair<std::string, std::string>> changes;
  for (const auto& c : j["position_changes"]) changes[c["key"]] = {c["before"], c["after"]};
  EXPECT_EQ(changes.at("model.position.scaling.type"),
            std::make_pair(std::string("none"), std::string("yarn")));
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
  train::train(test::tiny_clm_run(d, 1, "ref", kTrain, "", {"model.n_layers=2"}));
  const std::string from = "task.init_from=" + d.file("runs/ref");
  for (const auto& [name, change] : std::vector<std::pair<std::string, std::string>>{
           {"base", "model.position.base=500000"},
           {"nope", "model.position.nope_layers=[1]"},
           {"fraction", "model.position.fraction=0.5"},
           {"drope", "model.position.type=none"},
           {"sliding", "model.layout.kinds.all={window: 8}"}}) {
    train::train(test::tiny_clm_run(d, 1, name, kTrain, "", {"model.n_layers=2", from, change}));
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
  msg =
      expect_refused(test::tiny_clm_run(d, 1, "t5", kTrain, "", {from, "model.position.type=t5"}));
  EXPECT_NE(msg.find("model.position.type: rope (pretrained) vs t5"), std::string::npos) << msg;
  EXPECT_NE(msg.find("adds parameters the pretrained model lacks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("backbone.decoder.position.table"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("num_buckets"), std::string::npos) << msg;  // only what both sides have
  // Refused before anything was written into the runs directory.
  EXPECT_FALSE(stdfs::exists(d.file("runs/t5")));
  EXPECT_FALSE(stdfs::exists(d.file("runs/wide")));
}

TEST(InitFrom, DescribeChanges) {
  using weights::PositionChange;
  EXPECT_EQ(weights::describe_changes({}), "");
  EXPECT_EQ(
      weights::describe_changes({{"model.position.scaling.attention_factor", "(absent)", "0.0"},
                                 {"model.position.scaling.factor", "(absent)", "4.0"},
                                 {"model.position.scaling.original_len", "(absent)", "64"},
                                 {"model.position.scaling.type", "none", "yarn"}}),
      "yarn x4.0");
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
  auto e =
      config::load_experiment(write_exp("  - {name: s3, from: s2, set: [task.seq_len=64]}\n"
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

// The model's summed NLL of targets [first, end) of `seq` read by the window [begin, end).
double direct_nll(model::ModelImpl& m, const std::vector<int64_t>& seq, int64_t begin,
                  int64_t first, int64_t end) {
  torch::NoGradGuard ng;
  std::vector<int64_t> in(seq.begin() + begin, seq.begin() + end);
  auto logits = m.logits(m.backbone->decode(torch::tensor(in).unsqueeze(0)))[0];
  auto logp = torch::log_softmax(logits.to(torch::kFloat64), -1);
  double sum = 0;
  for (int64_t t = first; t < end; ++t) sum -= logp[t - 1 - begin][seq[t]].item<double>();
  return sum;
}

TEST(SlidingPerplexity, MatchesHandListedWindowsAndEvalIds) {
  test::TempDir d;
  train::train(test::tiny_clm_run(d, 1, "ref", kTrain));
  const std::string run = d.file("runs/ref");
  eval::PerplexityOptions o;
  o.split = "valid";
  o.windows = {16, 40};
  o.stride = 8;
  o.doc_tokens = 40;
  o.max_documents = 3;
  auto r = eval::sliding_perplexity(run, o);
  ASSERT_EQ(r.rows.size(), 2u);
  EXPECT_EQ(r.documents, 3);
  // The documents as the clm task reads them: EOS, then the bytes (id = byte + 7).
  std::vector<std::vector<int64_t>> docs;
  std::string ids_jsonl;
  for (const auto& line : text::read_lines(d.file("valid.txt"))) {
    if (line.empty() || docs.size() == 3) continue;
    std::vector<int64_t> doc = {3};
    for (int i = 0; i < 39; ++i) doc.push_back(static_cast<unsigned char>(line[i]) + 7);
    ids_jsonl += nlohmann::json(doc).dump() + "\n";
    docs.push_back(doc);
  }
  // Window 16, stride 8 over 40 tokens, by hand: [0,16) scores 1..15, [8,24) 16..23,
  // [16,32) 24..31, [24,40) 32..39.
  auto m = weights::load_run_model(run, /*best=*/true).model;
  m->eval();
  double sum = 0;
  for (const auto& doc : docs)
    sum += direct_nll(*m, doc, 0, 1, 16) + direct_nll(*m, doc, 8, 16, 24) +
           direct_nll(*m, doc, 16, 24, 32) + direct_nll(*m, doc, 24, 32, 40);
  EXPECT_EQ(r.rows[0].targets, 3 * 39);
  EXPECT_NEAR(r.rows[0].nll, sum / (3 * 39), 1e-6);
  // Window 40 covers each document: one forward pass, as `eval --ids` computes it.
  test::write(d.file("docs.jsonl"), ids_jsonl);
  auto ids = eval::eval_ids(run, d.file("docs.jsonl"), "", true);
  EXPECT_NEAR(r.rows[1].nll, ids.mean_nll, 1e-6);
  EXPECT_GT(r.rows[0].nll, 0.5);  // a real loss, not a constant
  auto saved = nlohmann::json::parse(fs::read_file(run + "/perplexity-valid.json"));
  EXPECT_EQ(saved["windows"][1]["targets"], 3 * 39);
  // A split without a document that long: one line naming it.
  o.doc_tokens = 100000;
  o.windows = {16};
  try {
    eval::sliding_perplexity(run, o);
    ADD_FAILURE() << "accepted";
  } catch (const UserError& e) {
    EXPECT_NE(std::string(e.what()).find("no document of split 'valid' has 100000 tokens"),
              std::string::npos)
        << e.what();
  }
}

// ---- passkey

TEST(Passkey, PromptHandComputed) {
  eval::PasskeyParts p;
  p.start = 3;
  p.intro = {10, 11};
  p.filler = {20, 21, 22};
  p.key_sentence = {30, 31};
  p.question = {40};
  // 12 tokens: 6 fixed, 6 of filler, 3 before the key at depth 0.5.
  auto q = eval::passkey_prompt(p, 12, 0.5);
  EXPECT_EQ(q.ids, (std::vector<int32_t>{3, 10, 11, 20, 21, 22, 30, 31, 20, 21, 22, 40}));
  EXPECT_EQ(q.key_at, 6);
  q = eval::passkey_prompt(p, 11, 0.0);  // key right after the intro; filler cut at a token
  EXPECT_EQ(q.ids, (std::vector<int32_t>{3, 10, 11, 30, 31, 20, 21, 22, 20, 21, 40}));
  q = eval::passkey_prompt(p, 11, 1.0);
  EXPECT_EQ(q.ids, (std::vector<int32_t>{3, 10, 11, 20, 21, 22, 20, 21, 30, 31, 40}));
  EXPECT_THROW(eval::passkey_prompt(p, 6, 0.5), UserError);
  EXPECT_EQ(eval::first_number(" 12345. Remember"), "12345");
  EXPECT_EQ(eval::first_number("the key is 7 or 8"), "7");
  EXPECT_EQ(eval::first_number("no digits"), "");
  // Word keys: five number words from the hash, base 9; the answer's first five words.
  EXPECT_EQ(eval::passkey_key(0, true), "one one one one one");
  EXPECT_EQ(eval::passkey_key(1 + 2 * 9 + 8 * 81, true), "two three nine one one");
  EXPECT_EQ(eval::passkey_key(5, false), "10005");
  EXPECT_TRUE(
      eval::answer_matches(" Seven four one, nine two. And", "seven four one nine two", true));
  EXPECT_FALSE(eval::answer_matches(" seven four one nine", "seven four one nine two", true));
  EXPECT_TRUE(eval::answer_matches(" 12345.", "12345", false));
  EXPECT_FALSE(eval::answer_matches(" 1234", "12345", false));
}

TEST(Passkey, RunsOnATrainedRun) {
  test::TempDir d;
  train::train(test::tiny_clm_run(d, 1, "ref", kTrain));
  eval::PasskeyOptions o;
  o.lengths = {300, 600};
  o.depths = {0.0, 1.0};
  o.trials = 2;
  auto r = eval::passkey_retrieval(d.file("runs/ref"), o);
  ASSERT_EQ(r.cells.size(), 4u);
  for (const auto& c : r.cells) {
    EXPECT_TRUE(c.applicable);
    EXPECT_EQ(c.trials, 2);
    EXPECT_LE(c.correct, 2);
  }
  EXPECT_TRUE(stdfs::exists(d.file("runs/ref/passkey.json")));
  // A learned table shorter than the prompt: n/a, not an error.
  train::train(test::tiny_clm_run(d, 1, "learned", kTrain, "",
                                  {"model.position.type=learned", "model.position.max_len=400"}));
  r = eval::passkey_retrieval(d.file("runs/learned"), o);
  EXPECT_TRUE(r.cells[0].applicable);
  EXPECT_FALSE(r.cells[2].applicable);
}

}  // namespace
}  // namespace ropelab

namespace ropelab {
namespace {

// The seeds' tables of an experiment's perplexity, against hand-computed paired t-tests: at
// window 64 yarn - rope = 0.1, 0.2, 0.3 (mean 0.2, sd 0.1, t = 2*sqrt(3) = 3.464 with 2 degrees
// of freedom: p = 1 - t / sqrt(2 + t^2) = 0.0742); at 256 -0.2, -0.3, -0.3 (t = -8, p = 1 -
// 8 / sqrt(66) = 0.0153).
TEST(SlidingSeeds, MeansAndPairedTestsHandComputed) {
  std::vector<lab::SlidingResult> rs = {
      {"rope.seed1", "rope", 1, {4.0, 4.5}, {}}, {"rope.seed2", "rope", 2, {4.1, 4.6}, {}},
      {"rope.seed3", "rope", 3, {4.2, 4.7}, {}}, {"yarn.seed1", "yarn", 1, {4.1, 4.3}, {}},
      {"yarn.seed2", "yarn", 2, {4.3, 4.3}, {}}, {"yarn.seed3", "yarn", 3, {4.5, 4.4}, {}},
      {"solo.seed1", "solo", 1, {4.0, NAN}, {}},
  };
  const std::string md = lab::sliding_seed_tables(rs, {64, 256}, "rope", 64);
  const auto section = [&](const std::string& title) {
    auto at = md.find(title);
    EXPECT_NE(at, std::string::npos) << title << " missing in\n" << md;
    return md.substr(at, md.find("###", at + 4) - at);
  };
  const std::string mean = section("### Means over seeds");
  EXPECT_NE(mean.find("| rope | 4.100 | 4.600 |"), std::string::npos) << mean;
  EXPECT_NE(mean.find("| yarn | 4.300 | **4.333** |"), std::string::npos) << mean;
  EXPECT_NE(mean.find("| solo | **4.000** | n/a |"), std::string::npos) << mean;
  const std::string base = section("### Paired tests against `rope`");
  EXPECT_NE(base.find("| rope | (reference) | (reference) |"), std::string::npos) << base;
  EXPECT_NE(base.find("| yarn | +0.200 (p 0.074) | -0.267 (p 0.015) * |"), std::string::npos)
      << base;
  EXPECT_NE(base.find("| solo | - | - |"), std::string::npos) << base;  // one seed: no test
  // The best row: solo at 64 (one seed, nothing pairs with it), yarn at 256.
  const std::string best = section("### Paired tests against the best row");
  EXPECT_NE(best.find("| rope | - | +0.267 (p 0.015) * |"), std::string::npos) << best;
  EXPECT_NE(best.find("| yarn | - | (reference) |"), std::string::npos) << best;
}

}  // namespace
}  // namespace ropelab
