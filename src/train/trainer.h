// The trainer: how any task is optimised. It owns optimisation (AdamW with decay / no-decay
// groups decided by parameter role, or Adam; schedules; global-norm clipping; gradient
// accumulation; fp32 or bf16 autocast on the run's device). The task (tasks/task.h) owns data,
// heads, losses and metrics; three named collaborators own the rest of a run:
//   Checkpointer  (train/checkpointer.h)  the run directory: resume, crash-safe saves, refusals;
//   Evaluator     (train/evaluator.h)   the validation split, and the best value so far;
//   MetricsLogger (train/metrics.h)     the train/valid rows of metrics.h5 and the progress bar.
//
// The loop, in Trainer::run():  resume;  while not done: train_step, log, evaluate, save.
//   train_step: forward/backward over the micro-batches, loss normalised by the step's number of
//               targets over all ranks, gradients summed over ranks (dist/world.h), clip, step;
//               its sums stay on the device (tasks/sums.h), read once per logged row.
// A Trainer without collaborators only steps: bench times train_step() of this very class.
// run.share_cpus: between steps, fewer threads while other processes hold this one's CPUs
// (dist/cpu_share.h). Non-finite steps are skipped (and counted) without advancing the
// schedule; SIGINT/SIGTERM finish the current step, save a checkpoint and return
// `interrupted`. Data-parallel (docs/distributed.md): rank 0 prepares data, logs and saves; every
// rank agrees on stops.
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <string>

#include "config/schema.h"
#include "data/batches.h"
#include "model/model.h"
#include "tasks/sums.h"
#include "train/checkpointer.h"
#include "train/optim.h"

namespace ropelab::dist {
class World;
class CpuShare;
}  // namespace ropelab::dist
namespace ropelab::tasks {
class Task;
}

namespace ropelab::train {

class Evaluator;
class MetricsLogger;
class Checkpointer;

struct TrainResult {
  std::string run_dir;
  int64_t steps = 0;
  bool interrupted = false;
  std::map<std::string, double> final_valid;  // metrics of the last evaluation
  // The metric that picks the best checkpoint, and its best validation value (NaN: never
  // evaluated).
  std::string selection_metric = "loss";
  bool higher_is_better = false;
  double best_selected = std::nan("");
};

struct TrainOptions {
  // Start over in a run directory whose checkpoints are all damaged (or that has metrics but
  // no checkpoint): its metrics files and checkpoints/ are kept, renamed with .restart-N.
  bool restart = false;
  // Resume under a config that differs in any key, recording each change
  // (train/config_history.h); without it only the keys that may change on resume can.
  bool allow_config_change = false;
};
// Trains the run a config describes (preparing its data first if needed), holding the run
// directory's lock (util/dir_lock.h). An existing run directory with a checkpoint is resumed;
// one whose config differs is refused or the change recorded (train/config_history.h); one
// with results but no usable checkpoint is refused unless o.restart (nothing is changed then).
TrainResult train(const config::Config& c, const TrainOptions& o = {});

// One optimizer step's outcome.
struct StepResult {
  bool applied = false;  // false: non-finite loss or gradient, update skipped
  bool stop = false;     // a rank was asked to stop (signal): nothing was done
  double grad_norm = 0;
  double loss = 0;       // mean nll per target of the step (all ranks)
  tasks::StepSums sums;  // on the device, all ranks'
};

// The config sections the trainer itself reads.
struct TrainerConfig {
  config::TrainConfig train;
  int64_t seed = 0;         // run.seed: ranks > 0 derive their generators from it
  int64_t d_model = 0;      // the noam schedule's scale
  bool share_cpus = false;  // run.share_cpus: fewer threads while other processes hold CPUs
  static TrainerConfig of(const config::Config& c) {
    return {c.train, c.run.seed, c.model.d_model, c.run.share_cpus};
  }
};

class Trainer {
 public:
  // Optimises `model` (already on `device`) for `task` on the batches of `train`. Collaborators
  // are attached with with_run() before run(); without them the trainer only steps.
  Trainer(TrainerConfig cfg, const tasks::Task& task, model::Model model,
          std::unique_ptr<data::BatchStream> train, torch::Device device);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // The collaborators of a run: the run directory, the validation split (may be null) and the
  // metrics log.
  void with_run(std::unique_ptr<Checkpointer> checkpointer, std::unique_ptr<Evaluator> evaluator,
                std::unique_ptr<MetricsLogger> logger);

  // One optimizer step: the next grad_accum micro-batches of every rank. Reads two numbers back
  // to the host (the gradient norm and the loss, for the skip decision), nothing inside a
  // micro-batch.
  StepResult train_step();
  // The whole run (needs with_run()).
  TrainResult run();

  const TrainState& state() const { return st_; }
  TrainState& state() { return st_; }

 private:
  void evaluate(bool final_eval);
  void save();
  bool due(int64_t every) const { return every > 0 && st_.step % every == 0; }
  double lr_at(int64_t step) const;
  // run.share_cpus, between steps: the thread count dist::CpuShare calls for, when it changes.
  void follow_cpu_share(dist::CpuShare& share);
  // Sums every rank's gradients (the ones defined on any rank), so each holds the gradient of
  // the global batch: the loss was divided by the global number of targets.
  void sum_gradients();

  const TrainerConfig cfg_;
  const tasks::Task& task_;
  const dist::World& world_;
  torch::Device dev_;
  model::Model model_;
  std::unique_ptr<FusedAdamW> opt_;
  std::unique_ptr<data::BatchStream> train_stream_;
  TrainState st_;
  std::unique_ptr<Checkpointer> ckpt_;
  std::unique_ptr<Evaluator> evaluator_;
  std::unique_ptr<MetricsLogger> logger_;
  std::map<std::string, double> final_valid_;  // of the last evaluation
  int64_t consecutive_bad_ = 0;
  bool stop_ = false;  // every rank agreed to stop on a signal
};

}  // namespace ropelab::train
