// The answer task (tasks/lm.h): its exact match equals scoring the argmax outputs with
// data::synthetic::score (its overfit test is in overfit_test.cpp); the card's statistics
// (lab/probe.h) against hand-computed values.
#include <cmath>

#include "data/synthetic.h"
#include "helpers.h"
#include "lab/probe.h"
#include "model_helpers.h"
#include "tasks/task.h"

namespace ropelab {
namespace {

using config::DataSource;
using data::synthetic::Split;
namespace syn = data::synthetic;

syn::SyntheticTokenizer tok;

config::Config answer_config(const std::string& pos) {
  config::Config c;
  config::select_variant(c.task.opts, "answer");
  c.task.seq_len = 32;
  c.model = test::tiny_model("decoder", pos);
  c.model.d_model = 32;
  c.model.d_ff = 64;
  c.data.source = DataSource::kSyntheticCopy;
  c.data.tokenizer.type = config::TokenizerType::kSynthetic;
  c.train.batch_size = 4;
  return c;
}

TEST(AnswerTask, ExactMatchEqualsScoringTheArgmaxOutputs) {
  torch::manual_seed(0);
  auto c = answer_config("rope");
  auto task = tasks::make_task(c, tok.vocab_size());
  auto model = task->build_model();
  model->eval();
  auto ex = syn::make_examples(DataSource::kSyntheticCopy, Split::kTest, 6, 1, 3, 1);
  auto ds = syn::to_dataset(ex, "test");
  auto b = task->stream(ds, false, 32, 6)->batch(0, 0);
  torch::NoGradGuard ng;
  auto f = task->forward(*model, b);
  // The same model's argmax at every position, scored by synthetic::score.
  auto pred = model->logits(model->backbone->decode(b.input_BT)).argmax(-1);
  std::vector<std::vector<int32_t>> guesses;
  for (size_t i = 0; i < ex.size(); ++i) {
    std::vector<int32_t> g(ex[i].tokens.size(), -1);
    for (size_t t = 1; t < g.size(); ++t)
      g[t] = static_cast<int32_t>(
          pred[static_cast<int64_t>(i)][static_cast<int64_t>(t - 1)].item<int64_t>());
    guesses.push_back(g);
  }
  auto s = syn::score(ex, guesses);
  EXPECT_EQ(f.sums.read().examples, 6);
  EXPECT_EQ(f.sums.read().exact, static_cast<double>(s.exact));
  EXPECT_EQ(f.sums.read().targets, static_cast<double>(s.tokens));
  EXPECT_EQ(f.sums.read().correct, static_cast<double>(s.correct));
}

lab::ProbeReport report(const std::string& task, std::vector<double> v) {
  lab::ProbeReport r;
  r.task = task;
  r.metric = "exact";
  r.train_size = 8;
  r.size_unit = "symbols";
  r.multipliers = {1, 2};
  r.sizes = {8, 16};
  r.value = std::move(v);
  return r;
}

TEST(ProbeCard, MeanStdAndPairedTestPerCell) {
  // Baseline: 10, 20, 30% at 1x; the other variant 50, 61, 69%: differences 40, 41, 39 points
  // (mean 40, sd 1, t = 69.3 with 2 df, p = 0.0002). At 2x: no difference. Hand-computed.
  std::vector<lab::CardEntry> e;
  const double base[] = {0.1, 0.2, 0.3}, other[] = {0.5, 0.61, 0.69};
  for (int s = 0; s < 3; ++s) {
    e.push_back({"sinusoidal", s + 1, report("synthetic-copy", {base[s], 0.0})});
    e.push_back({"rope", s + 1, report("synthetic-copy", {other[s], 0.0})});
  }
  e.push_back({"learned", 1, report("synthetic-copy", {0.4, NAN})});
  auto md = lab::card_markdown(e, "sinusoidal");
  EXPECT_NE(md.find("### synthetic-copy (exact match, trained up to 8 symbols)"), std::string::npos)
      << md;
  EXPECT_NE(md.find("| variant | 1x (8) | 2x (16) | effective |"), std::string::npos) << md;
  EXPECT_NE(md.find("| sinusoidal | 20.0 ± 10.0 | 0.0 ± 0.0 | 1x |"), std::string::npos) << md;
  // sd of 50, 61, 69 = sqrt((100 + 1 + 81) / 2) = 9.54
  EXPECT_NE(md.find("| rope | 60.0 ± 9.5 * | 0.0 ± 0.0 | 1x |"), std::string::npos) << md;
  // One seed: no interval, the count in brackets, and n/a beyond its table.
  EXPECT_NE(md.find("| learned | 40.0 (1) | n/a | 1x |"), std::string::npos) << md;
}

TEST(ProbeCard, EffectiveLengthIsNoLiMas) {
  const std::vector<int64_t> m{1, 2, 4, 8};
  // Exact match: 85% of the 1x score, and every multiplier up to it.
  EXPECT_EQ(lab::effective_multiplier({0.9, 0.8, 0.77, 0.2}, m, true), 4);  // 0.765 is the bar
  EXPECT_EQ(lab::effective_multiplier({0.9, 0.7, 0.8, 0.8}, m, true), 1);   // a dip ends it
  EXPECT_EQ(lab::effective_multiplier({0.9, 0.9, 0.9, 0.9}, m, true), 8);
  EXPECT_EQ(lab::effective_multiplier({0.05, 0.05, 0.05, 0.05}, m, true), 0);  // not learned
  EXPECT_EQ(lab::effective_multiplier({NAN, 0.5, 0.5, 0.5}, m, true), 0);
  EXPECT_EQ(lab::effective_multiplier({0.9, 0.9, NAN, 0.9}, m, true), 2);  // n/a ends it
  // Perplexity, lower is better: 1x / score >= 0.85, i.e. score <= 1x / 0.85 (10 -> 11.76).
  EXPECT_EQ(lab::effective_multiplier({10, 11, 11.7, 12}, m, false), 4);
  EXPECT_EQ(lab::effective_multiplier({10, 9, 30, 9}, m, false), 2);
}

}  // namespace
}  // namespace ropelab
