// Crash-safe checkpoints.
//
//   <run>/checkpoints/step-000000100/
//       model.pt  optim.pt  rng.pt  state.json  MANIFEST.json   (written last: the commit mark)
// rng.pt holds the state of every random generator the run uses (util/device.h), as
// "rng/cpu" and, on a GPU, "rng/cuda:N".
// Each checkpoint is written into a hidden temp directory, every file fsync'ed, then the
// directory is renamed into place and its parent fsync'ed. Files are serialised in memory
// first, so a full disk gives a clean error instead of libtorch's std::terminate. The
// manifest holds an xxh64 of every file: a damaged checkpoint (even two flipped bytes, which
// torch::load accepts silently) is detected and skipped. Old checkpoints are deleted only
// after a new one is committed; the best one is never deleted.
#pragma once
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

namespace ropelab::config {
struct Config;
}

namespace ropelab::train {

struct TrainState {
  int64_t step = 0;       // optimizer steps done
  int64_t micro = 0;      // micro-batches consumed (the data cursor)
  double tokens = 0;      // training tokens seen
  double best_valid = 0;  // best validation loss so far (valid only if best_step >= 0)
  int64_t best_step = -1;
  int64_t skipped = 0;  // non-finite steps skipped
  // The evaluation due at `step` was stopped by a signal before it finished: resume runs it
  // first, so the metrics have a validation row at every step where one was due.
  bool eval_pending = false;
  int64_t threads = 0;
  int64_t world = 1;         // data-parallel ranks (a step is world x grad_accum micro-batches)
  int64_t vocab = 0;         // the model's vocabulary size (to rebuild it without the data)
  int64_t source_vocab = 0;  // separate source vocabulary's size (0: shared with `vocab`)
  std::string config_hash;   // of the architecture-defining config sections
  // The metrics log window's sums since the last train row (tasks::Sum order; empty: none), so
  // a resumed run logs the same rows as an uninterrupted one.
  std::vector<double> log_window;
  torch::Device device = torch::kCPU;  // whose generators rng.pt holds (not saved in state.json)
};

// `opt` may be null: a model-only checkpoint (averaged weights), which resumes nothing but
// loads for translate, eval and export.
void save_checkpoint(const std::string& run_dir, torch::nn::Module& model,
                     torch::optim::Optimizer* opt, const TrainState& st, int64_t keep_last);
// Whether run_dir has any checkpoint directory, complete or not (nothing is read or hashed).
bool has_checkpoints(const std::string& run_dir);
// Every checkpoint directory whose manifest and checksums verify, oldest first.
std::vector<std::string> verified_checkpoints(const std::string& run_dir);
// Each checkpoint directory that does not verify (its name) and why.
std::vector<std::pair<std::string, std::string>> damaged_checkpoints(const std::string& run_dir);
// The newest checkpoint directory whose manifest and checksums verify; nullopt if none.
std::optional<std::string> latest_checkpoint(const std::string& run_dir);
std::optional<std::string> checkpoint_for_step(const std::string& run_dir, int64_t step);
// Loads into model (and optimizer, if given and the checkpoint has its state: a model-only one
// leaves it fresh) and returns the state.
TrainState load_checkpoint(const std::string& dir, torch::nn::Module& model,
                           torch::optim::Optimizer* opt);

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
