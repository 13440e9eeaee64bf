// Crash-safe checkpoints: the file format (save, list, verify, load). When to save and what to
// keep is the trainer's (train/checkpointer.h).
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

namespace ropelab::weights {

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

}  // namespace ropelab::weights
