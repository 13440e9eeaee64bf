// Trainer pieces: schedules, checkpoints (damage detection, pruning) and bit-exact resume.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "helpers.h"
#include "model/transformer.h"
#include "train/checkpoint.h"
#include "train/schedule.h"
#include "train/trainer.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::train {
namespace {

namespace stdfs = std::filesystem;

TEST(Schedule, ShapesArePureFunctionsOfTheStep) {
  config::TrainConfig t;
  t.lr = 1.0;
  t.max_steps = 100;
  t.schedule.warmup = 10;
  t.schedule.min_lr_ratio = 0.1;
  t.schedule.type = "constant";
  EXPECT_DOUBLE_EQ(learning_rate(t, 512, 5), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate(t, 512, 50), 1.0);
  t.schedule.type = "linear";
  EXPECT_DOUBLE_EQ(learning_rate(t, 512, 10), 1.0);
  EXPECT_NEAR(learning_rate(t, 512, 55), 0.55, 1e-12);
  EXPECT_NEAR(learning_rate(t, 512, 100), 0.1, 1e-12);
  t.schedule.type = "cosine";
  EXPECT_NEAR(learning_rate(t, 512, 55), 0.55, 1e-12);  // halfway: mean of peak and floor
  EXPECT_NEAR(learning_rate(t, 512, 100), 0.1, 1e-12);
  t.schedule.type = "inverse_sqrt";  // fairseq
  t.schedule.init_lr = 0.0;
  EXPECT_NEAR(learning_rate(t, 512, 5), 0.5, 1e-12);
  EXPECT_NEAR(learning_rate(t, 512, 40), std::sqrt(10.0 / 40.0), 1e-12);
  t.schedule.type = "noam";  // Vaswani Eq. 3 with lr = 1
  t.schedule.warmup = 4000;
  EXPECT_NEAR(learning_rate(t, 512, 4000), std::pow(512, -0.5) * std::pow(4000, -0.5), 1e-12);
  EXPECT_NEAR(learning_rate(t, 512, 100), std::pow(512, -0.5) * 100 * std::pow(4000, -1.5), 1e-12);
}

config::Config tiny_run(const test::TempDir& d, const std::string& name) {
  test::write(d.file("c.yaml"),
              test::tiny_text_run_yaml(d, 5) +
                  "task: {type: clm, seq_len: 16}\n"
                  "model: {d_model: 16, n_layers: 1, n_heads: 2, d_ff: 32, dropout: 0.1}\n"
                  "train: {max_steps: 10, batch_size: 2, log_every: 1, eval_every: 5, "
                  "eval_batches: 2, checkpoint_every: 5, keep_last: 5, schedule: {warmup: 2}}\n");
  return config::load_config(d.file("c.yaml"), config::overrides_from_args({"run.name=" + name}));
}

TEST(Resume, FivePlusFiveEqualsTenBitForBit) {
  test::TempDir d;
  auto a = tiny_run(d, "straight");
  train::train(a);
  // Run "resumed": only the step-5 checkpoint of the straight run, then train on.
  std::string ra = d.file("runs/straight"), rb = d.file("runs/resumed");
  stdfs::create_directories(rb + "/checkpoints");
  stdfs::copy(ra + "/config.yaml", rb + "/config.yaml");
  stdfs::copy(ra + "/checkpoints/step-000000005", rb + "/checkpoints/step-000000005",
              stdfs::copy_options::recursive);
  train::train(tiny_run(d, "resumed"));
  auto ca = checkpoint_for_step(ra, 10), cb = checkpoint_for_step(rb, 10);
  ASSERT_TRUE(ca && cb);
  auto c = config::load_config(ra + "/config.yaml");
  model::Transformer ma(c.model, 263), mb(c.model, 263);
  load_checkpoint(*ca, *ma, nullptr);
  load_checkpoint(*cb, *mb, nullptr);
  auto pa = ma->named_parameters(), pb = mb->named_parameters();
  for (const auto& p : pa)
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key() << " differs after resume";
}

TEST(Checkpoint, DamagedCheckpointIsSkippedAndPruningKeepsBest) {
  test::TempDir d;
  auto c = tiny_run(d, "r");
  train::train(c);
  std::string run = d.file("runs/r");
  ASSERT_TRUE(checkpoint_for_step(run, 10));
  // Flip two bytes in the newest model file: it must be detected, the step-5 one used.
  std::string model_pt = run + "/checkpoints/step-000000010/model.pt";
  std::string bytes = fs::read_file(model_pt);
  bytes[bytes.size() / 2] ^= 0x5A;
  bytes[bytes.size() / 3] ^= 0x11;
  test::write(model_pt, bytes);
  auto latest = latest_checkpoint(run);
  ASSERT_TRUE(latest);
  EXPECT_NE(latest->find("step-000000005"), std::string::npos);
  model::Transformer m(c.model, 263);
  EXPECT_THROW(load_checkpoint(run + "/checkpoints/step-000000010", *m, nullptr), UserError);
  // An incomplete checkpoint (no manifest: killed mid-write) is ignored too.
  stdfs::create_directories(run + "/checkpoints/step-000000020");
  EXPECT_NE(latest_checkpoint(run)->find("step-000000005"), std::string::npos);
}

}  // namespace
}  // namespace ropelab::train
