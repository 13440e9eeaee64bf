// The training loop (task-agnostic): restore, then while not done: step, log, evaluate,
// checkpoint. AdamW with decay / no-decay groups (no decay on biases, norms and position
// tables), or Adam; schedules from schedule.h; global-norm clipping; gradient accumulation;
// fp32 or bf16 autocast; non-finite steps skipped (and counted) without advancing the
// schedule; SIGINT/SIGTERM finish the current step, save a checkpoint and exit with 143.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "config/schema.h"

namespace ropelab::train {

struct TrainResult {
  std::string run_dir;
  int64_t steps = 0;
  bool interrupted = false;
  std::map<std::string, double> final_valid;  // metrics of the last evaluation
};

// Trains the run a config describes (preparing its data first if needed). An existing run
// directory with a checkpoint is resumed; one whose architecture differs is refused.
TrainResult train(const config::Config& c);

// `ropelab eval`: loss/perplexity of a trained run on a split, and optionally at other
// context lengths (length extrapolation).
struct LengthRow {
  int64_t length = 0;
  bool applicable = true;  // false: beyond a learned table
  std::map<std::string, double> metrics;
  int64_t tokens = 0;
};
struct EvalReport {
  std::string run_dir, checkpoint, split;
  int64_t train_seq_len = 0;
  std::map<std::string, double> metrics;
  std::vector<LengthRow> lengths;
};
EvalReport evaluate_run(const std::string& run_dir, const std::string& split,
                        const std::vector<int64_t>& lengths, int64_t max_tokens, bool use_best);
std::string format_eval(const EvalReport& r);

// True after SIGINT/SIGTERM (polled by every long loop).
bool stop_requested();
void install_signal_handlers();

}  // namespace ropelab::train
