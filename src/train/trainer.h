// The trainer: how any task is optimised. It owns optimisation (AdamW with decay / no-decay
// groups decided by parameter role, or Adam; schedules; global-norm clipping; gradient
// accumulation; fp32 or bf16 autocast on the run's device), checkpoints and logging. The task
// (tasks/task.h) owns data, heads, losses and metrics.
//
// The loop, in Trainer::run():  resume;  while not done: train_step, log, evaluate, save.
//   train_step: forward/backward over the micro-batches, loss normalised by the step's number of
//               targets over all ranks, gradients summed over ranks (dist/world.h), clip, step;
//   evaluate:   the task's whole-split evaluation, logged as a "valid" row;
//   save/resume: crash-safe checkpoints (train/checkpoint.h); a changed architecture, task or
//               data config is refused on resume.
// Non-finite steps are skipped (and counted) without advancing the schedule; SIGINT/SIGTERM
// finish the current step, save a checkpoint and return `interrupted`. Data-parallel
// (docs/distributed.md): rank 0 prepares data, logs and saves; every rank agrees on stops.
#pragma once
#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/schema.h"

namespace ropelab::train {

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
};
// Trains the run a config describes (preparing its data first if needed). An existing run
// directory with a checkpoint is resumed; one whose architecture differs is refused; one with
// results but no usable checkpoint is refused unless o.restart (nothing is changed then).
TrainResult train(const config::Config& c, const TrainOptions& o = {});

// Threads for a run (run.threads, 0 = all cores), applied to torch and OpenBLAS.
int apply_thread_policy(const config::RunConfig& r);

// `ropelab eval`: the task's metrics of a trained run on a split, and optionally at other
// context lengths with the same token budget (length extrapolation).
struct LengthRow {
  int64_t length = 0;
  bool applicable = true;  // false: beyond a learned table, or the split is too short
  std::map<std::string, double> metrics;
  int64_t tokens = 0;
};
struct EvalReport {
  std::string run_dir, checkpoint, split;
  std::string rope_scaling;  // METHOD:FACTOR applied at evaluation time, or empty
  int64_t train_seq_len = 0;
  std::map<std::string, double> metrics;
  std::vector<LengthRow> lengths;
  std::string predictions_path;  // GLUE: the leaderboard file written for this split
};
// `rope_scaling` ("yarn:4", "ntk:2", ...: METHOD:FACTOR with METHOD linear, ntk, dynamic, yarn or
// llama3) switches a RoPE context-extension method on for a model trained without it (its
// original length is the run's task.seq_len); the report goes to
// eval-SPLIT-rope-METHOD-FACTOR.json.
EvalReport evaluate_run(const std::string& run_dir, const std::string& split,
                        const std::vector<int64_t>& lengths, int64_t max_tokens, bool use_best,
                        const std::string& rope_scaling = "");
// The config overrides of a --rope-scaling spec (UserError naming the spec if malformed).
std::vector<std::string> rope_scaling_overrides(const std::string& spec);
// The file name part of a spec: "yarn:4" -> "rope-yarn-4".
std::string rope_scaling_tag(const std::string& spec);
std::string format_eval(const EvalReport& r);

}  // namespace ropelab::train
