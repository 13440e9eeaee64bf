// Regression guard: a tiny reference loss curve per position module (20 steps, 1 thread,
// fixed seed, through the real `train::train`), checked in as tests/data/reference_curves.json.
// A refactor must keep every curve within tolerance. After an intended change of the
// numbers, regenerate with ROPELAB_UPDATE_REFERENCE=1 and say why in the commit.
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "config/loader.h"
#include "helpers.h"
#include "train/trainer.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/platform.h"

namespace ropelab {
namespace {

std::vector<double> train_curve(const std::string& variant, const test::TempDir& d) {
  test::write(d.file("base.yaml"),
              test::tiny_text_run_yaml(d, 7) +
                  "task: {type: clm, seq_len: 32}\n"
                  "model: {d_model: 32, n_layers: 2, n_heads: 2, d_ff: 64, dropout: 0.0, "
                  "scale_embeddings: true}\n"
                  "train: {max_steps: 20, batch_size: 4, lr: 0.003, log_every: 1, eval_every: 0, "
                  "eval_batches: 2, checkpoint_every: 0, schedule: {type: cosine, warmup: 4}}\n");
  std::vector<std::string> ov = {"run.name=" + variant};
  if (variant == "rope-linear")
    ov.insert(ov.end(), {"model.position.type=rope", "model.attention.kernel=linear"});
  else
    ov.push_back("model.position.type=" + variant);
  auto c = config::load_config(d.file("base.yaml"), config::overrides_from_args(ov));
  train::train(c);
  platform::set_threads(1);
  std::vector<double> losses;
  std::ifstream in(d.file("runs/" + variant + "/metrics.jsonl"));
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j["split"] == "train") losses.push_back(j["loss"].get<double>());
  }
  return losses;
}

TEST(ReferenceCurves, EveryPositionModuleMatchesItsCheckedInCurve) {
  std::string ref_path = test::source_dir() + "/tests/data/reference_curves.json";
  bool update = std::getenv("ROPELAB_UPDATE_REFERENCE") != nullptr;
  nlohmann::json ref = update || !std::filesystem::exists(ref_path)
                           ? nlohmann::json::object()
                           : nlohmann::json::parse(fs::read_file(ref_path));
  ASSERT_TRUE(update || !ref.empty())
      << "no reference curves: run once with ROPELAB_UPDATE_REFERENCE=1";
  test::TempDir d;
  for (const char* v :
       {"none", "sinusoidal", "learned", "t5", "rope", "alibi", "xpos", "rope-linear"}) {
    auto curve = train_curve(v, d);
    ASSERT_EQ(curve.size(), 20u) << v;
    EXPECT_LT(curve.back(), curve.front()) << v << " did not learn";
    if (update) {
      ref[v] = curve;
      continue;
    }
    ASSERT_TRUE(ref.contains(v)) << "no reference curve for " << v;
    std::vector<double> want = ref[v];
    for (size_t i = 0; i < curve.size(); ++i)
      EXPECT_NEAR(curve[i], want[i], 1e-3 * std::max(1.0, std::abs(want[i])))
          << v << " step " << i + 1;
  }
  if (update) fs::write_file_atomic(ref_path, ref.dump(1) + "\n");
}

}  // namespace
}  // namespace ropelab
