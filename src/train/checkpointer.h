// The trainer's checkpoint policy: one run directory, its config.yaml, when to save and what to
// keep, resuming (the file format is weights/checkpoint.h).
#pragma once
#include <map>
#include <string>
#include <vector>

#include "weights/checkpoint.h"

namespace ropelab::config {
struct Config;
}

namespace ropelab::train {

using weights::TrainState;

// The trainer's checkpointer: one run directory, its config.yaml and its checkpoints. It pins
// the run's config (train/config_history.h): resuming with a changed key is refused, naming
// each change, unless the key may change on resume or `allow_config_change`; accepted changes
// are recorded in config_history.yaml.
class Checkpointer {
 public:
  // `config`: the run's whole resolved config; `restart`: a directory with results but no usable
  // checkpoint is set aside (renamed .restart-N) instead of refused.
  Checkpointer(std::string run_dir, const config::Config& config, int64_t keep_last, bool restart,
               bool allow_config_change = false);
  const std::string& run_dir() const { return run_dir_; }
  // After resume(): a line per config change it accepted (for train.log).
  const std::vector<std::string>& config_changes() const { return changes_; }

  // Every rank: loads the newest verified checkpoint into `model` and `opt` and returns true, or
  // starts a new run (false). `st` keeps what describes this process (threads, world, vocab,
  // device) and gets the rest from the checkpoint. Rank 0 checks the directory (refusing a
  // changed config, or recording a change that may be made; refusing results without a
  // checkpoint) and writes config.yaml; every rank must resume from the same step (UserError
  // otherwise).
  bool resume(torch::nn::Module& model, torch::optim::Optimizer* opt, TrainState& st);
  // Rank 0 writes the checkpoint; every rank returns once it is committed.
  void save(torch::nn::Module& model, torch::optim::Optimizer* opt, const TrainState& st);

 private:
  void refuse_or_set_aside();
  std::string run_dir_;
  std::string config_yaml_;
  std::map<std::string, std::string> flat_;  // every key
  std::map<std::string, std::string> arch_;  // the architecture-defining keys (config_hash)
  int64_t keep_last_;
  int64_t max_steps_;  // this process's train.max_steps (it may have been raised on resume)
  bool restart_;
  bool allow_config_change_;
  std::vector<std::string> changes_;
};

}  // namespace ropelab::train
