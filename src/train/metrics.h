// Run metrics: metrics.h5 (documented in README, readable with h5py) plus a line-buffered
// metrics.jsonl copy that survives any crash.
//
//   metrics.h5
//     /            attrs: format="ropelab.metrics", format_version=1, config (resolved YAML),
//                  position, task, arch, attention, params, ropelab_version
//     /train/<series>   float64 [n]  step, tokens, loss, ppl, acc, (bpb), lr, grad_norm,
//     tokens_per_s /valid/<series>   float64 [n]  step, tokens, loss, ppl, acc, (bpb), lr,
//     tokens_per_s
// With run.tensorboard, every row goes to RUN/tensorboard too (run/tensorboard.h): an event file
// per process that logs a row, starting with a session start at the step it continues from.
// Every series of a group has the same length. The file is flushed every 20 appends and on
// close, so a killed run leaves a readable file; before each checkpoint commits, sync() makes
// every row up to it durable, so a resumed run never has holes. On resume, rows past the
// checkpoint's step are dropped (they would be logged again).
#pragma once
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tasks/sums.h"
#include "util/dir_lock.h"
#include "util/h5.h"
#include "util/progress.h"
#include "util/tfevents.h"

namespace ropelab::train {

class MetricsLog {
 public:
  // `tensorboard`: also write the rows as TensorBoard scalars (attrs["config"] becomes the
  // event files' config text and hparams).
  MetricsLog(const std::string& run_dir, const std::map<std::string, std::string>& attrs,
             int64_t resume_step, bool tensorboard = false);
  ~MetricsLog();
  MetricsLog(const MetricsLog&) = delete;
  MetricsLog& operator=(const MetricsLog&) = delete;
  // One row of a group ("train" or "valid"). Keys must stay the same within a group.
  void log(const std::string& group, const std::map<std::string, double>& row);
  void flush();
  // flush() + fsync of metrics.h5 and metrics.jsonl (UserError naming the file on failure).
  void sync();
  // The run has finished: TensorBoard's hparams view marks it done (when events were written).
  void finished();

 private:
  void log_tensorboard(const std::string& group, const std::map<std::string, double>& row);
  std::string path_, jpath_, run_dir_, config_;
  int64_t resume_step_ = 0;
  bool tensorboard_ = false;
  std::unique_ptr<tb::EventWriter> tb_;  // opened with the first row
  h5::Handle file_;
  std::map<std::string, h5::Handle> groups_;
  std::map<std::string, std::map<std::string, std::unique_ptr<h5::Series>>> series_;
  FILE* jsonl_ = nullptr;
  int64_t since_flush_ = 0;
};

// Reads a group of metrics.h5 back: series name -> values.
std::map<std::string, std::vector<double>> read_metrics(const std::string& path,
                                                        const std::string& group);
std::map<std::string, std::string> read_metric_attrs(const std::string& path);

// A run's metrics as a reader sees them, safely while it trains: with no writer holding the
// run's lock, from metrics.h5 (holding the lock shared, so no writer starts meanwhile); while a
// writer trains it, from metrics.jsonl (complete lines only), with the run's attributes from
// config.yaml. Either way, one row per (split, step).
struct RunMetrics {
  std::map<std::string, std::string> attrs;  // position, task, arch, attention, name, params
  std::map<std::string, std::vector<double>> train, valid;
  std::optional<fs::LockHolder> writer;  // set: the run is being written (read from the jsonl)
};
RunMetrics read_run_metrics(const std::string& run_dir);
// The rows of one split of a metrics.jsonl file, one per step (the last one logged), by step.
std::map<std::string, std::vector<double>> read_metrics_jsonl(const std::string& path,
                                                              const std::string& split);

// The trainer's metrics logger (rank 0's): train.log, metrics.h5 / metrics.jsonl rows and the
// progress bar. Training rows cover a window of applied steps whose sums stay on the device
// until the row is written: one host read per logged row. tokens/s counts training time only.
class MetricsLogger {
 public:
  using RowOf = std::function<std::map<std::string, double>(const tasks::HostSums&)>;
  // A line for train.log once it is open: the run's description, or a warning about its setup.
  struct Note {
    bool warning = false;
    std::string text;
  };
  // `attrs`: metrics.h5's root attributes; `row_of`: the task's metrics of a window's sums.
  // `tensorboard`: the rows go to RUN/tensorboard too (run.tensorboard).
  MetricsLogger(std::string run_dir, std::map<std::string, std::string> attrs, RowOf row_of,
                int64_t log_every, int64_t max_steps, std::vector<Note> notes = {},
                bool tensorboard = false);
  ~MetricsLogger();  // closes train.log
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;

  // After resuming at `step` (rows past it are dropped), with `tokens` seen: opens train.log and
  // the metrics files, and describes the run. `window`: the log window's sums saved with the
  // checkpoint (window()), so the next train row covers the same steps as without the resume.
  void open(int64_t step, double tokens, const std::vector<double>& window = {});
  // The sums of the steps since the last train row, on the host (empty: none).
  std::vector<double> window() const;
  // A finished run's final validation row, when metrics.h5 has one at `step` (ablate reruns
  // finished runs to collect their results); empty otherwise.
  std::map<std::string, double> final_valid(int64_t step) const;
  // Starts the progress bar and the tokens/s clock.
  void start(int64_t step, double tokens);
  // An applied step: its sums join the window; at a logged step (every log_every, and the
  // last) the window becomes a train row.
  void train_step(const tasks::StepSums& sums, int64_t step, double tokens, double lr,
                  double grad_norm);
  // A validation row.
  void valid(const std::map<std::string, double>& metrics, int64_t step, double tokens, double lr,
             double tokens_per_s);
  // Evaluation and saving do not count as training time: pause() before, resume() after.
  void pause() { paused_at_ = clock::now(); }
  void resume() { t_log_ += clock::now() - paused_at_; }
  // Every row so far durable (before a checkpoint commits).
  void sync();
  // The end of the loop; `completed`: the run reached max_steps (not stopped by a signal).
  void finish(bool completed);

 private:
  using clock = std::chrono::steady_clock;
  std::string run_dir_;
  std::map<std::string, std::string> attrs_;
  RowOf row_of_;
  int64_t log_every_, max_steps_;
  std::vector<Note> notes_;
  bool tensorboard_;
  std::unique_ptr<MetricsLog> log_;
  std::unique_ptr<Progress> bar_;
  tasks::StepSums window_;
  std::vector<double> restored_;  // a checkpoint's window, joined to the first step's sums
  clock::time_point t_log_, paused_at_;
  double tokens_at_log_ = 0;
};

}  // namespace ropelab::train
