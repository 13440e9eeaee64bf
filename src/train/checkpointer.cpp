#include "train/checkpointer.h"

#include <spdlog/spdlog.h>

#include <filesystem>

#include "config/loader.h"
#include "dist/world.h"
#include "train/config_history.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::train {

namespace stdfs = std::filesystem;

// ---- the trainer's checkpointer

namespace {
// The config sections a checkpoint depends on: changing them makes resuming meaningless.
std::map<std::string, std::string> architecture_keys(const config::Config& c) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : config::flat_keys(c))
    if (k.rfind("model.", 0) == 0 || k.rfind("task.", 0) == 0 || k.rfind("data.", 0) == 0)
      out[k] = v;
  out["run.seed"] = std::to_string(c.run.seed);
  return out;
}

std::string hash_of(const std::map<std::string, std::string>& keys) {
  std::string s;
  for (const auto& [k, v] : keys) s += k + "=" + v + "\n";
  return fs::hex64(fs::hash_bytes(s));
}
}  // namespace

Checkpointer::Checkpointer(std::string run_dir, const config::Config& config, int64_t keep_last,
                           bool restart, bool allow_config_change)
    : run_dir_(std::move(run_dir)),
      config_yaml_(config::dump(config)),
      flat_(config::flat_keys(config)),
      arch_(architecture_keys(config)),
      keep_last_(keep_last),
      max_steps_(config.train.max_steps),
      restart_(restart),
      allow_config_change_(allow_config_change) {}

bool Checkpointer::resume(torch::nn::Module& model, torch::optim::Optimizer* opt, TrainState& st) {
  const auto& world = dist::world();
  const bool main = world.is_main();
  const std::string cfg_path = (stdfs::path(run_dir_) / "config.yaml").string();
  st.config_hash = hash_of(arch_);
  // Rank 0 checks the run directory (and with --restart sets results aside); then the other
  // ranks load the checkpoint it resumes from.
  if (!main) world.wait_for_main("resume", "waiting for rank 0 to open the run directory");
  auto ck = weights::latest_checkpoint(run_dir_);
  if (ck) {
    std::vector<ConfigChange> changes;
    if (main) {
      changes = train::config_changes(config::flat_keys(config::load_config(cfg_path)), flat_);
      std::string refused;
      for (const auto& c : changes)
        if (!c.may_change && !allow_config_change_)
          refused += (refused.empty() ? "" : "; ") + c.str();
      if (!refused.empty())
        throw UserError(run_dir_ + ": holds a run with a different configuration (" + refused +
                        "); nothing was changed. HINT: on resume only " + train::mutable_keys() +
                        " may change; --allow-config-change accepts any change and records it in "
                        "config_history.yaml; or choose another run.name");
    }
    const TrainState here = st;  // what describes this process
    st = weights::load_checkpoint(*ck, model, opt);
    if (st.world != here.world)
      throw UserError(fmt::format(
          "{}: was trained by {} data-parallel rank(s), this run has {}: the global batch and "
          "the data order would change. HINT: resume with the same number of ranks (ropelab "
          "launch --nproc {}), or train a new run",
          run_dir_, st.world, here.world, st.world));
    st.config_hash = here.config_hash;
    st.vocab = here.vocab;
    st.source_vocab = here.source_vocab;
    st.device = here.device;
    if (st.threads != here.threads)
      spdlog::warn(
          "resuming with {} threads (the run used {}): results may differ in the last bits",
          here.threads, st.threads);
    st.threads = here.threads;
    if (!st.eval_pending && st.step >= max_steps_)
      spdlog::info("{} already finished at step {}: nothing to train", run_dir_, st.step);
    else
      spdlog::info("resuming {} from step {}", run_dir_, st.step);
    // The checkpoint loads under the new config: record what changed, with the step it applies
    // from (train.log gets the same lines once it is open: Trainer::run).
    std::vector<ConfigChange> may, forced;
    for (const auto& c : changes) (c.may_change ? may : forced).push_back(c);
    record_config_changes(run_dir_, st.step, may, "may change on resume");
    record_config_changes(run_dir_, st.step, forced, "--allow-config-change");
    for (const auto& c : changes)
      changes_.push_back(
          fmt::format("config change from step {}: {} ({})", st.step, c.str(),
                      c.may_change ? "may change on resume" : "--allow-config-change"));
  } else if (main) {
    refuse_or_set_aside();
  }
  if (main) {
    fs::write_file_atomic(cfg_path, config_yaml_);
    world.mark_done("resume");
  }
  auto at = world.sum({static_cast<double>(st.step), main ? static_cast<double>(st.step) : 0},
                      "agreeing on the checkpoint to resume");
  if (at[0] != at[1] * world.size())
    throw UserError(fmt::format(
        "{}: rank {} resumes from step {}, but not every rank does (rank 0: step {:.0f}); every "
        "rank must see the same run directory. HINT: put run.out_dir on a filesystem all "
        "machines share",
        run_dir_, world.rank(), st.step, at[1]));
  return ck.has_value();
}

void Checkpointer::refuse_or_set_aside() {
  const stdfs::path dir(run_dir_);
  auto damaged = weights::damaged_checkpoints(run_dir_);
  std::vector<std::string> results;
  for (const char* f : {"metrics.h5", "metrics.jsonl"})
    if (stdfs::exists(dir / f)) results.push_back(f);
  if (damaged.empty() && results.empty()) return;  // a new run
  if (!restart_) {
    std::string why;
    for (const auto& [name, problem] : damaged)
      why += (why.empty() ? "" : "; ") + name + ": " + problem;
    throw UserError(
        run_dir_ + ": " +
        (damaged.empty() ? "has results (" + results[0] + ") but no checkpoint"
                         : "no checkpoint can be resumed (" + why + ")") +
        "; nothing was changed. HINT: `ropelab train ... --restart` starts over and keeps the "
        "old files renamed .restart-N, or choose another run.name");
  }
  int n = 1;
  auto aside = [&](const std::string& f) {
    auto p = stdfs::path(f);
    return dir / (p.stem().string() + ".restart-" + std::to_string(n) + p.extension().string());
  };
  auto taken = [&] {
    for (const char* f : {"metrics.h5", "metrics.jsonl", "checkpoints"})
      if (stdfs::exists(aside(f))) return true;
    return false;
  };
  while (taken()) ++n;
  for (const char* f : {"metrics.h5", "metrics.jsonl", "checkpoints"})
    if (stdfs::exists(dir / f)) {
      stdfs::rename(dir / f, aside(f));
      spdlog::warn("--restart: kept {} as {}", (dir / f).string(), aside(f).string());
    }
}

void Checkpointer::save(torch::nn::Module& model, torch::optim::Optimizer* opt,
                        const TrainState& st) {
  const auto& world = dist::world();
  if (world.is_main()) weights::save_checkpoint(run_dir_, model, opt, st, keep_last_);
  // Every rank leaves only once the checkpoint is committed (if rank 0 fails to write it, it
  // exits with the error, and the others report it gone).
  world.barrier("committing a checkpoint");
}

}  // namespace ropelab::train
