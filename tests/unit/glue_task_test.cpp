// The GLUE task: a tiny encoder overfits one batch of a classification task and of a regression
// task (the task's overfit test), and whole-split evaluation puts every prediction at its
// example's row and computes GLUE's metrics from them.
#include <algorithm>

#include "corpora/builtin.h"
#include "helpers.h"
#include "model_helpers.h"
#include "tasks/glue.h"
#include "tasks/glue_metrics.h"
#include "tokenizers/tokenizer.h"
#include "util/random.h"

namespace ropelab::tasks {
namespace {

config::Config glue_config(const std::string& task) {
  config::Config c;
  config::select_variant(c.task.opts, "glue");
  c.data.source = config::DataSource::kGlue;
  c.data.glue_task = task;
  c.task.seq_len = 16;
  c.model = test::tiny_model("encoder", "rope");
  c.model.d_model = 32;
  c.model.d_ff = 64;
  c.train.batch_size = 8;
  return c;
}

// Examples whose label is decided by one token of text a (a pair task when `pair`).
data::TokenDataset synthetic(int64_t n, bool regression, bool pair) {
  auto ds = data::empty_dataset(data::DataKind::kGlue);
  ds.split = "valid";
  ds.vocab_size = 30;
  ds.num_labels = regression ? 0 : 2;
  for (int64_t i = 0; i < n; ++i) {
    int32_t key = static_cast<int32_t>(7 + i % 2);
    std::vector<int32_t> a = {static_cast<int32_t>(10 + i % 5), key,
                              static_cast<int32_t>(15 + (i * 3) % 7)};
    ds.glue().a.push(a);
    ds.glue().b.push(pair ? std::vector<int32_t>{static_cast<int32_t>(20 + i % 4)}
                          : std::vector<int32_t>{});
    ds.glue().labels.push_back(regression ? static_cast<float>(i % 2) * 3.0f + 1.0f
                                          : static_cast<float>(i % 2));
  }
  return ds;
}

double overfit(GlueTask& task, const data::TokenDataset& ds) {
  torch::manual_seed(0);
  auto m = task.build_model();
  auto batch = task.stream(ds, true, 16, 8)->batch(0, 0);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.0));
  double loss = 0;
  const auto targets = static_cast<double>(batch.num_targets);
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    torch::Tensor l;
    auto forward_backward = [&] {
      l = task.forward(*m, batch).loss_sum / targets;
      l.backward();
    };
    if (step == 1)  // a steady step (the first puts RoPE's frequencies on the device)
      test::expect_no_host_sync(task.glue().name, forward_backward);
    else
      forward_backward();
    opt.step();
    loss = l.item<double>();
  }
  return loss;
}

TEST(GlueTask, OverfitsOneBatchOfClassificationAndOfRegression) {
  auto c = glue_config("MRPC");
  GlueTask cls(task_setup(c, 30));
  EXPECT_LT(overfit(cls, synthetic(8, false, true)), 0.02);
  auto r = glue_config("STS-B");
  GlueTask reg(task_setup(r, 30));
  EXPECT_LT(overfit(reg, synthetic(8, true, true)), 0.02);
}

TEST(GlueTask, WholeSplitPredictionsSitAtTheirRowsAndGiveGluesMetrics) {
  torch::manual_seed(1);
  auto c = glue_config("MRPC");
  GlueTask task(task_setup(c, 30));
  auto m = task.build_model();
  auto ds = synthetic(21, false, true);  // 3 batches of 8, the last one short
  auto s = task.stream(ds, false, 16, 8);
  {  // a few steps, so that the predictions differ between rows
    torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3));
    for (int step = 0; step < 20; ++step) {
      opt.zero_grad();
      auto f = task.forward(*m, s->batch(0, step % 2));
      (f.loss_sum / f.sums.read().targets).backward();
      opt.step();
    }
  }
  EvalOptions o;
  o.full = true;
  auto r = task.evaluate(*m, ds, *s, o);
  ASSERT_EQ(r.predictions.size(), 21u);
  EXPECT_EQ(r.predictions_file, "MRPC.tsv");
  // Each example alone gives the prediction found at its row.
  m->eval();
  torch::NoGradGuard ng;
  std::vector<int64_t> pred, gold;
  for (int64_t i = 0; i < 21; ++i) {
    data::TokenDataset one = synthetic(21, false, true);
    one.glue() = data::GlueSplit{};
    const auto& a = ds.glue().a;
    const auto& b = ds.glue().b;
    one.glue().a.push(std::vector<int32_t>(a.begin(i), a.begin(i) + a.length(i)));
    one.glue().b.push(std::vector<int32_t>(b.begin(i), b.begin(i) + b.length(i)));
    one.glue().labels.push_back(ds.labels()[static_cast<size_t>(i)]);
    auto batch = task.stream(one, false, 16, 1)->batch(0, 0);
    auto out = m->logits(m->backbone->encode(batch.input_BT, batch.pad_BT, batch.segment_BT));
    pred.push_back(out.argmax(-1).item<int64_t>());
    gold.push_back(static_cast<int64_t>(ds.labels()[static_cast<size_t>(i)]));
    EXPECT_EQ(r.predictions[static_cast<size_t>(i)], std::to_string(pred.back())) << "row " << i;
  }
  EXPECT_NE(std::count(pred.begin(), pred.end(), 1), 0);  // both classes predicted
  EXPECT_NE(std::count(pred.begin(), pred.end(), 0), 0);
  EXPECT_DOUBLE_EQ(r.metrics.at("acc"), accuracy(pred, gold));
  EXPECT_DOUBLE_EQ(r.metrics.at("f1"), f1_positive(pred, gold));
  EXPECT_EQ(task.selection().metric, "f1");
  EXPECT_TRUE(task.selection().higher_is_better);
}

TEST(GlueTask, UnlabeledSplitGivesPredictionsOnly) {
  auto c = glue_config("SST-2");
  GlueTask task(task_setup(c, 30));
  auto m = task.build_model();
  auto ds = synthetic(5, false, false);
  ds.split = "test";
  for (auto& l : ds.glue().labels) l = -1;
  EvalOptions o;
  o.full = true;
  auto r = task.evaluate(*m, ds, *task.stream(ds, false, 16, 8), o);
  EXPECT_TRUE(r.metrics.empty());
  EXPECT_EQ(r.predictions.size(), 5u);
  EXPECT_EQ(leaderboard_file(corpora::glue_task("MNLI"), "valid_mismatched"), "MNLI-mm.tsv");
  EXPECT_EQ(leaderboard_file(corpora::glue_task("MNLI"), "test"), "MNLI-m.tsv");
}

// Word order reaches the [CLS] head: with RoPE a tiny encoder learns "does 7 come before 8?"
// on held-out examples, without positions it cannot (the two orders hold the same tokens).
double order_accuracy(const std::string& pos, uint64_t seed) {
  torch::manual_seed(seed);
  auto c = glue_config("SST-2");
  c.model = test::tiny_model("encoder", pos);
  c.model.d_model = 32;
  c.model.d_ff = 64;
  GlueTask task(task_setup(c, 30));
  auto make = [](int64_t n, uint64_t salt) {
    auto ds = data::empty_dataset(data::DataKind::kGlue);
    ds.split = "valid";
    ds.vocab_size = 30;
    ds.num_labels = 2;
    for (int64_t i = 0; i < n; ++i) {
      uint64_t h = util::mix64(static_cast<uint64_t>(i) * 2 + salt);
      std::vector<int32_t> a;
      for (int t = 0; t < 6; ++t) a.push_back(static_cast<int32_t>(10 + (h >> (4 * t)) % 15));
      size_t p = (h >> 30) % 5, q = p + 1 + (h >> 40) % (5 - p);  // two places, p < q
      bool before = ((h >> 50) & 1) != 0;
      a[p] = before ? 7 : 8;
      a[q] = before ? 8 : 7;
      ds.glue().a.push(a);
      ds.glue().b.push(std::vector<int32_t>{});
      ds.glue().labels.push_back(before ? 1.0f : 0.0f);
    }
    return ds;
  };
  auto train = make(256, 0), held_out = make(128, 1);
  auto m = task.build_model();
  auto s = task.stream(train, true, 16, 32);
  torch::optim::AdamW opt(m->parameters(), torch::optim::AdamWOptions(3e-3).weight_decay(0.0));
  for (int step = 0; step < 250; ++step) {
    opt.zero_grad();
    auto f =
        task.forward(*m, s->batch(step / s->batches_per_epoch(), step % s->batches_per_epoch()));
    (f.loss_sum / f.sums.read().targets).backward();
    opt.step();
  }
  return task.evaluate(*m, held_out, *task.stream(held_out, false, 16, 64), {}).metrics.at("acc");
}

// The median of three seeds: one short run can land in a poor basin (seed 5 alone gave 0.80
// after the fused kernels changed the last bits of the step; seeds 1-3, 6 and 7 gave 0.92-1.0).
TEST(GlueTask, WordOrderReachesTheHead) {
  auto median = [](const std::string& pos) {
    std::vector<double> a{order_accuracy(pos, 5), order_accuracy(pos, 6), order_accuracy(pos, 7)};
    std::sort(a.begin(), a.end());
    return a[1];
  };
  double rope = median("rope"), none = median("none");
  EXPECT_GT(rope, 0.9);
  EXPECT_LT(none, 0.65);
  std::printf("held-out order accuracy, median of 3 seeds: rope %.3f, none %.3f\n", rope, none);
}

// bible-cola's negatives: the same words, changed only inside a window of at most 6 words.
TEST(BibleCola, LocalReorderPermutesWordsInASmallWindow) {
  std::vector<std::string> w;
  for (int i = 0; i < 12; ++i) w.push_back("w" + std::to_string(i));
  int changed = 0;
  for (uint64_t h = 0; h < 500; ++h) {
    auto r = corpora::local_reorder(w, util::mix64(h));
    EXPECT_EQ(r, corpora::local_reorder(w, util::mix64(h)));  // deterministic
    auto a = r, b = w;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    ASSERT_EQ(a, b) << "not a permutation, h=" << h;
    size_t first = 0, last = w.size();
    while (first < w.size() && r[first] == w[first]) ++first;
    while (last > first && r[last - 1] == w[last - 1]) --last;
    if (first == w.size()) continue;
    ++changed;
    EXPECT_LE(last - first, 6u) << "h=" << h;
  }
  EXPECT_EQ(changed, 500);  // distinct words: every choice changes the order
}

}  // namespace
}  // namespace ropelab::tasks
