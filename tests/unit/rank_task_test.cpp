// The ranking task (the paper's §4.5): the stream gives the rows (a, b) and (a, c) of each
// example side by side; a tiny encoder overfits one batch (the task's overfit test); whole-split
// accuracy and predictions agree with scoring each pair alone; a closer text only helps when the
// maximum length lets the model see where b and c differ.
#include "helpers.h"
#include "model_helpers.h"
#include "tasks/rank.h"
#include "util/error.h"

namespace ropelab::tasks {
namespace {

config::Config rank_config() {
  config::Config c;
  config::select_variant(c.task.opts, "rank");
  c.data.source = config::DataSource::kGlue;
  c.data.tsv.name = "scm";
  c.data.tsv.a = "A", c.data.tsv.b = "B", c.data.tsv.c = "C", c.data.tsv.label = "label";
  c.data.tsv.labels = {"B", "C"};
  c.model = test::tiny_model("encoder", "rope");
  c.model.d_model = 32;
  c.model.d_ff = 64;
  return c;
}

// a = (x, k), the closer text repeats k, the other has another key; which of b/c is closer
// alternates.
data::TokenDataset triplets(int64_t n) {
  auto ds = data::empty_dataset(data::DataKind::kGlue);
  ds.split = "valid";
  ds.vocab_size = 30;
  ds.num_labels = 2;
  for (int64_t i = 0; i < n; ++i) {
    auto key = static_cast<int32_t>(10 + i % 6), other = static_cast<int32_t>(16 + i % 5);
    auto x = static_cast<int32_t>(21 + i % 4);
    std::vector<int32_t> a = {x, key}, near = {key, x}, far = {other, x};
    bool c_closer = i % 2 == 1;
    ds.glue().a.push(a);
    ds.glue().b.push(c_closer ? far : near);
    ds.glue().c.push(c_closer ? near : far);
    ds.glue().labels.push_back(c_closer ? 1.0f : 0.0f);
  }
  return ds;
}

TEST(RankTask, StreamPairsEachExampleWithBothCandidates) {
  RankTask task(task_setup(rank_config(), 30));
  auto ds = triplets(5);
  auto b = task.stream(ds, false, 16, 4)->batch(0, 0);
  ASSERT_EQ(b.input_BT.size(0), 8);  // two rows per example
  ASSERT_EQ(b.label_B.size(0), 4);
  ASSERT_EQ(b.index_B.size(0), 4);
  // Row 2i is [CLS] a [SEP] b [SEP], row 2i+1 is [CLS] a [SEP] c [SEP] of example i.
  const auto& A = ds.glue().a;
  const auto& B = ds.glue().b;
  const auto& C = ds.glue().c;
  for (int64_t r = 0; r < 4; ++r) {
    int64_t i = b.index_B[r].item<int64_t>();
    EXPECT_EQ(b.input_BT[2 * r][1].item<int64_t>(), A.begin(i)[0]);
    EXPECT_EQ(b.input_BT[2 * r][4].item<int64_t>(), B.begin(i)[0]);
    EXPECT_EQ(b.input_BT[2 * r + 1][4].item<int64_t>(), C.begin(i)[0]);
    EXPECT_EQ(b.segment_BT[2 * r + 1][4].item<int64_t>(), 1);
  }
  // Data without c is refused with a clear message.
  auto pairs = ds;
  pairs.glue().c = data::Ragged();
  EXPECT_THROW(task.stream(pairs, false, 16, 4), ropelab::UserError);
}

TEST(RankTask, OverfitsOneBatch) {
  torch::manual_seed(0);
  RankTask task(task_setup(rank_config(), 30));
  auto m = task.build_model();
  auto ds = triplets(8);
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
      test::expect_no_host_sync("rank", forward_backward);
    else
      forward_backward();
    opt.step();
    loss = l.item<double>();
  }
  EXPECT_LT(loss, 0.02);
  auto metrics = task.metrics(task.forward(*m, batch).sums.read());
  EXPECT_DOUBLE_EQ(metrics.at("acc"), 1.0);
}

TEST(RankTask, WholeSplitAccuracyAndPredictionsMatchScoringEachExampleAlone) {
  torch::manual_seed(2);
  RankTask task(task_setup(rank_config(), 30));
  auto m = task.build_model();
  auto ds = triplets(11);  // 3 batches of 4, the last one short
  auto s = task.stream(ds, false, 16, 4);
  EvalOptions o;
  o.full = true;
  auto r = task.evaluate(*m, ds, *s, o);
  ASSERT_EQ(r.predictions.size(), 11u);
  EXPECT_EQ(r.predictions_file, "scm.tsv");
  m->eval();
  torch::NoGradGuard ng;
  int correct = 0;
  for (int64_t i = 0; i < 11; ++i) {
    data::TokenDataset one = ds;
    one.glue() = data::GlueSplit{};
    one.glue().labels = {ds.labels()[static_cast<size_t>(i)]};
    for (auto [from, to] : {std::pair{&ds.glue().a, &one.glue().a},
                            {&ds.glue().b, &one.glue().b},
                            {&ds.glue().c, &one.glue().c}})
      to->push(std::vector<int32_t>(from->begin(i), from->begin(i) + from->length(i)));
    auto b = task.stream(one, false, 16, 1)->batch(0, 0);
    auto s_R = m->logits(m->backbone->encode(b.input_BT, b.pad_BT, b.segment_BT));
    int64_t p = s_R[1][0].item<double>() > s_R[0][0].item<double>() ? 1 : 0;
    EXPECT_EQ(r.predictions[static_cast<size_t>(i)], p == 0 ? "B" : "C") << "row " << i;
    correct += p == static_cast<int64_t>(ds.labels()[static_cast<size_t>(i)]);
  }
  EXPECT_NEAR(r.metrics.at("acc"), correct / 11.0, 1e-12);
  EXPECT_EQ(task.selection().metric, "acc");
}

}  // namespace
}  // namespace ropelab::tasks
