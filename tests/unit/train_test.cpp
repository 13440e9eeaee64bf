// Trainer pieces: schedules, checkpoints (damage detection, pruning, generator states),
// bit-exact resume, and loading weights by name.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "eval/export.h"
#include "helpers.h"
#include "lab/compare.h"
#include "model/heads.h"
#include "model/model.h"
#include "tasks/task.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "train_helpers.h"
#include "util/error.h"
#include "util/fs.h"
#include "weights/checkpoint.h"
#include "weights/weights.h"

namespace ropelab::train {
namespace {

using lab::sweep_summary;
using lab::SweepResult;

namespace stdfs = std::filesystem;

TEST(Schedule, ShapesArePureFunctionsOfTheStep) {
  config::TrainConfig t;
  t.lr = 1.0;
  t.max_steps = 100;
  t.schedule.warmup = 10;
  t.schedule.min_lr_ratio = 0.1;
  t.schedule.type = config::ScheduleType::kConstant;
  EXPECT_DOUBLE_EQ(learning_rate(t, 512, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(t, 512, 50), 1.0);
  t.schedule.type = config::ScheduleType::kLinear;
  EXPECT_DOUBLE_EQ(learning_rate(t, 512, 10), 1.0);
  EXPECT_NEAR(learning_rate(t, 512, 55), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(t, 512, 100), 0.1, 1e-12);
  t.schedule.type = config::ScheduleType::kCosine;
  EXPECT_NEAR(learning_rate(t, 512, 55), 0.55, 1e-12);  // halfway: mean of peak and floor
  EXPECT_NEAR(learning_rate(t, 512, 100), 0.1, 1e-12);
  t.schedule.type = config::ScheduleType::kInverseSqrt;  // fairseq
  t.schedule.init_lr = 0.0;
  EXPECT_NEAR(learning_rate(t, 512, 5), 0.5, 1e-12);
  EXPECT_NEAR(learning_rate(t, 512, 40), std::sqrt(10.0 / 40.0), 1e-12);
  t.schedule.type = config::ScheduleType::kNoam;  // Vaswani Eq. 3 with lr = 1
  t.schedule.warmup = 4000;
  EXPECT_NEAR(learning_rate(t, 512, 4000), std::pow(512, -0.5) * std::pow(4000, -0.5), 1e-12);
  EXPECT_NEAR(learning_rate(t, 512, 100), std::pow(512, -0.5) * 100 * std::pow(4000, -1.5), 1e-12);
}

config::Config tiny_run(const test::TempDir& d, const std::string& name) {
  return test::tiny_clm_run(d, 5, name,
                            "max_steps: 10, batch_size: 2, log_every: 1, eval_every: 5, "
                            "eval_batches: 2, checkpoint_every: 5, keep_last: 5, "
                            "schedule: {warmup: 2}",
                            ", dropout: 0.1");
}

TEST(Resume, FivePlusFiveEqualsTenBitForBit) {
  test::TempDir d;
  test::expect_resume_is_bit_exact(
      d, [&](const std::string& name) { return tiny_run(d, name); }, 5, 10);
}

// Step sums stay on the device: the host reads them once per logged training row, once per
// evaluation and once per checkpoint inside a log window, not once per micro-batch
// (tasks/sums.h).
TEST(Trainer, ReadsStepSumsOncePerLoggedRow) {
  test::TempDir d;
  tiny_run(d, "reads");  // writes c.yaml
  auto c = config::load_config(
      d.file("c.yaml"),
      config::overrides_from_args({"run.name=reads", "train.log_every=4", "train.eval_every=0",
                                   "train.grad_accum=3", "train.max_steps=8"}));
  int64_t before = tasks::host_reads();
  auto r = train::train(c);
  EXPECT_EQ(r.steps, 8);
  // Rows at steps 4 and 8, the final evaluation, and the checkpoint at step 5, which falls
  // inside a log window and carries its sums (a checkpoint after a logged row reads nothing).
  EXPECT_EQ(tasks::host_reads() - before, 2 + 1 + 1);
}

// The public Trainer without a run (what bench times): it only steps, on any batch stream, and
// its step is the one run() takes.
TEST(Trainer, StepsWithoutARunOnARepeatedBatch) {
  test::TempDir d;
  auto c = tiny_run(d, "steps");
  c.train.schedule.warmup = 0;
  c.train.lr = 1e-2;
  c.model.dropout = 0.0;
  auto task = tasks::make_task(c, 263);
  torch::manual_seed(0);
  auto model = task->build_model();
  data::Batch b;
  b.input_BT = torch::randint(4, 263, {2, 16}, torch::kInt64);
  b.target_BT = torch::randint(4, 263, {2, 16}, torch::kInt64);
  b.num_tokens = b.num_targets = 32;
  Trainer t(TrainerConfig::of(c), *task, model, data::make_repeat_stream(b), torch::kCPU);
  model->train();
  double first = 0, last = 0;
  for (int s = 0; s < 40; ++s) {
    auto r = t.train_step();
    ASSERT_TRUE(r.applied);
    EXPECT_GT(r.grad_norm, 0);
    (s == 0 ? first : last) = r.loss;
  }
  EXPECT_EQ(t.state().step, 40);
  EXPECT_EQ(t.state().micro, 40);
  EXPECT_DOUBLE_EQ(t.state().tokens, 40.0 * 32);
  EXPECT_NEAR(first, std::log(263.0), 0.5);  // a fresh model is about uniform
  EXPECT_LT(last, first - 1.0);              // and learns the one batch
  EXPECT_THROW(t.run(), std::logic_error);   // a run needs its collaborators
}

TEST(Checkpoint, DamagedCheckpointIsSkippedAndPruningKeepsBest) {
  test::TempDir d;
  auto c = tiny_run(d, "r");
  train::train(c);
  std::string run = d.file("runs/r");
  ASSERT_TRUE(weights::checkpoint_for_step(run, 10));
  // Flip two bytes in the newest model file: it must be detected, the step-5 one used.
  std::string model_pt = run + "/checkpoints/step-000000010/model.pt";
  std::string bytes = fs::read_file(model_pt);
  bytes[bytes.size() / 2] ^= 0x5A;
  bytes[bytes.size() / 3] ^= 0x11;
  test::write(model_pt, bytes);
  auto latest = weights::latest_checkpoint(run);
  ASSERT_TRUE(latest);
  EXPECT_NE(latest->find("step-000000005"), std::string::npos);
  auto m = tasks::make_task(c, 263)->build_model();
  EXPECT_THROW(weights::load_checkpoint(run + "/checkpoints/step-000000010", *m, nullptr),
               UserError);
  // An incomplete checkpoint (no manifest: killed mid-write) is ignored too.
  stdfs::create_directories(run + "/checkpoints/step-000000020");
  EXPECT_NE(weights::latest_checkpoint(run)->find("step-000000005"), std::string::npos);
  // has_checkpoints counts every checkpoint directory, damaged or incomplete ones too.
  EXPECT_TRUE(weights::has_checkpoints(run));
  std::string other = d.file("runs/incomplete");
  EXPECT_FALSE(weights::has_checkpoints(other));
  stdfs::create_directories(other + "/checkpoints/step-000000003");
  EXPECT_TRUE(weights::has_checkpoints(other));
  EXPECT_FALSE(weights::latest_checkpoint(other));
}

// Fine-tuning starts here: an MLM run's encoder goes into a model with a fresh classification
// head, by name. The key report names exactly the two heads: the new one's tensors are missing,
// the MLM head's are unexpected; every backbone tensor is loaded with its trained value.
TEST(Weights, MlmEncoderLoadsIntoAClassifierAndTheReportNamesTheHeads) {
  test::TempDir d;
  test::write(d.file("mlm.yaml"),
              test::tiny_text_run_yaml(d, 3) +
                  "task: {type: mlm, seq_len: 16}\n"
                  "model: {arch: encoder, d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32}\n"
                  "train: {max_steps: 3, batch_size: 2, eval_every: 0, checkpoint_every: 0, "
                  "schedule: {warmup: 1}}\n");
  auto c = config::load_config(d.file("mlm.yaml"), config::overrides_from_args({"run.name=mlm"}));
  train::train(c);
  std::string run = d.file("runs/mlm");

  auto fresh = [&](const config::ModelConfig& mc) {
    model::Transformer backbone(mc, 263);
    return model::Model(backbone, std::make_shared<model::ClassificationHeadImpl>(mc, 2), 0.02);
  };
  const std::vector<std::string> new_head = {"head.classifier.bias", "head.classifier.weight",
                                             "head.pooler.bias", "head.pooler.weight"};
  const std::vector<std::string> mlm_head = {"head.bias", "head.dense.bias", "head.dense.weight",
                                             "head.norm.bias", "head.norm.weight"};
  auto trained = weights::load_run_model(run);
  auto want = weights::state_dict(*trained.model);
  std::string h5 = d.file("weights.h5");
  eval::export_weights(run, h5);
  for (const std::string& source : {run, h5}) {
    auto target = fresh(c.model);
    auto report = weights::load_backbone(*target, weights::read_weights(source), source);
    EXPECT_EQ(report.missing, new_head) << source;
    EXPECT_EQ(report.unexpected, mlm_head) << source;
    EXPECT_EQ(report.loaded.size(), want.size() - mlm_head.size()) << source;
    auto got = weights::state_dict(*target);
    for (const auto& name : report.loaded)
      EXPECT_TRUE(torch::equal(got[name], want[name])) << name << " from " << source;
    EXPECT_NE(report.str().find("head.pooler.weight"), std::string::npos);
  }
  // Another width is refused, naming a tensor and both shapes.
  auto wide_cfg = c.model;
  wide_cfg.d_model = 32;
  auto wide = fresh(wide_cfg);
  try {
    weights::load_backbone(*wide, weights::read_weights(run), run);
    FAIL() << "a backbone of another width was loaded";
  } catch (const UserError& e) {
    std::string msg = e.what();
    EXPECT_NE(msg.find("backbone.encoder.emb_norm.bias has shape [16] but the model expects [32]"),
              std::string::npos)
        << msg;
  }
}

TEST(Checkpoint, SavesTheStateOfEveryGeneratorInUse) {
  test::TempDir d;
  auto c = tiny_run(d, "r");
  train::train(c);
  torch::serialize::InputArchive a;
  a.load_from(*weights::checkpoint_for_step(d.file("runs/r"), 10) + "/rng.pt");
  auto keys = a.keys();
  EXPECT_EQ(keys, std::vector<std::string>{"rng/cpu"});  // a CPU run: the CPU generator
}

TEST(Sweep, BestSettingByMeanOverSeedsWithSampleStd) {
  auto res = [](std::vector<std::tuple<const char*, const char*, double>> rows, const char* metric,
                bool higher, const char* task = "") {
    std::vector<SweepResult> out;
    for (auto& [v, s, x] : rows) out.push_back({task, v, s, x, metric, higher, ""});
    return out;
  };
  std::vector<std::tuple<const char*, const char*, double>> rows = {
      {"rope", "lr1", 0.50}, {"rope", "lr1", 0.70},                        // mean 0.6, sd 0.1414
      {"rope", "lr2", 0.62}, {"rope", "lr2", 0.64},                        // mean 0.63, sd 0.0141
      {"t5", "lr1", 0.40},   {"t5", "lr1", 0.40},   {"t5", "lr2", 0.30}};  // t5: lr1 (sd 0)
  auto md = sweep_summary(res(rows, "mcc", /*higher=*/true));
  EXPECT_NE(md.find("| rope | lr2 | 0.6300 ± 0.0141 | 2 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| t5 | lr1 | 0.4000 ± 0.0000 | 2 |"), std::string::npos) << md;
  EXPECT_NE(md.find("| rope | 0.6000 ± 0.1414 | 0.6300 ± 0.0141 |"), std::string::npos) << md;
  // Lower is better for a loss.
  auto low = sweep_summary(res(rows, "loss", /*higher=*/false));
  EXPECT_NE(low.find("| rope | lr1 | 0.6000 ± 0.1414 | 2 |"), std::string::npos) << low;
  EXPECT_NE(low.find("| t5 | lr2 | 0.3000 ± 0.0000 | 1 |"), std::string::npos) << low;
  // With tasks: one table per variant, a row per task, each task with its own metric and
  // direction.
  auto both = res(rows, "mcc", true, "cola");
  for (auto& r : res(rows, "loss", false, "sts")) both.push_back(r);
  auto by_task = sweep_summary(both);
  auto rope = by_task.find("## rope"), t5 = by_task.find("## t5");
  ASSERT_NE(rope, std::string::npos) << by_task;
  ASSERT_NE(t5, std::string::npos) << by_task;
  auto in_rope = by_task.substr(rope, t5 - rope);
  EXPECT_NE(in_rope.find("| cola | mcc (higher) | lr2 | 0.6300 ± 0.0141 | 2 |"), std::string::npos)
      << by_task;
  EXPECT_NE(in_rope.find("| sts | loss (lower) | lr1 | 0.6000 ± 0.1414 | 2 |"), std::string::npos)
      << by_task;
  EXPECT_NE(by_task.find("| sts | t5 | 0.4000 ± 0.0000 | 0.3000 ± 0.0000 |"), std::string::npos)
      << by_task;
  // A run the model cannot do is n/a in both tables, with its reason in a footnote, and does
  // not change the other cells.
  auto with_na = res(rows, "acc", true, "len64");
  for (const char* s : {"lr1", "lr2"})
    with_na.push_back({"len1024", "t5", s, NAN, "", false, "task.seq_len: too long"});
  with_na.push_back({"len1024", "rope", "lr1", 0.9, "acc", true, ""});
  auto na = sweep_summary(with_na);
  auto t5_table = na.substr(na.find("## t5"));
  EXPECT_NE(t5_table.find("| len64 | acc (higher) | lr1 | 0.4000 ± 0.0000 | 2 |"),
            std::string::npos)
      << na;
  EXPECT_NE(t5_table.find("| len1024 | acc (higher) | - | n/a | 0 |"), std::string::npos) << na;
  EXPECT_NE(na.find("| len1024 | t5 | n/a | n/a |"), std::string::npos) << na;
  // rope has no lr2 run at len1024: that cell is missing ("-"), not n/a.
  EXPECT_NE(na.find("| len1024 | rope | 0.9000 ± 0.0000 | - |"), std::string::npos) << na;
  EXPECT_NE(na.find("- len1024.t5: task.seq_len: too long"), std::string::npos) << na;
}

TEST(Sweep, SeedsGiveIntervalsAndPairedTestsAgainstTheBaseline) {
  // Validation loss per seed; the paired differences of t5 against rope are the stats_test
  // example (scipy: mean -0.1067, 95% interval [-0.3090, +0.0957], p 0.151).
  std::vector<SweepResult> r;
  auto add = [&](const char* v, std::vector<double> xs) {
    for (size_t i = 0; i < xs.size(); ++i)
      r.push_back({"", v, "", xs[i], "loss", false, "", static_cast<int64_t>(i + 1)});
  };
  add("rope", {4.30, 4.12, 4.25});
  add("t5", {4.10, 4.05, 4.20});
  add("alibi", {4.20, 4.02, 4.16});  // 0.10, 0.10, 0.09 better than rope on every seed
  auto md = sweep_summary(r, "rope");
  auto at = md.find("## Seeds: 95% intervals and paired tests");
  ASSERT_NE(at, std::string::npos) << md;
  auto sec = md.substr(at);
  EXPECT_NE(sec.find("| rope | 4.2233 ± 0.0929 | [3.9925, 4.4541] | 3 | (baseline) | | |"),
            std::string::npos)
      << sec;
  EXPECT_NE(sec.find("| t5 | 4.1167 ± 0.0764 | [3.9269, 4.3064] | 3 | -0.1067 | [-0.3090, +0.0957] "
                     "| 0.151 |"),
            std::string::npos)
      << sec;
  EXPECT_NE(sec.find("| alibi | 4.1267 ± 0.0945 | [3.8919, 4.3615] | 3 | -0.0967 | "),
            std::string::npos)
      << sec;
  EXPECT_NE(sec.find(" * |"), std::string::npos) << "alibi's consistent gain is significant\n"
                                                 << sec;
  // One seed per variant: no such section.
  std::vector<SweepResult> single = {{"", "rope", "", 4.3, "loss", false, "", 1},
                                     {"", "t5", "", 4.1, "loss", false, "", 1}};
  EXPECT_EQ(sweep_summary(single).find("## Seeds"), std::string::npos);
}

}  // namespace
}  // namespace ropelab::train
