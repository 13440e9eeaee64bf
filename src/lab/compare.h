// `ropelab compare` and `ropelab ablate`: side-by-side tables (terminal + Markdown) and PNG
// loss curves of several runs.
#pragma once
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ropelab::lab {

struct RunSummary {
  std::string name, dir, position, attention, task;
  double params = 0;
  int64_t steps = 0;
  double tokens = 0;
  double final_valid = NAN, best_valid = NAN;  // validation loss
  // The task's other validation metrics at the last evaluation (ppl, acc, bpb, bleu, ...):
  // whatever the run logged.
  std::map<std::string, double> final_metrics;
  // Metrics of `ropelab eval --split test` (eval-test.json), when it was run.
  std::map<std::string, double> test_metrics;
  double steps_to_target = NAN, tokens_to_target = NAN;  // NaN: never reached
  double tokens_per_s = NAN;                             // median over the train log
  // Being trained now: by whom (the table then shows the rows logged so far).
  std::string live;
  // Config changes recorded on resume (config_history.yaml): "step 400: train.max_steps 400 ->
  // 800", one per change.
  std::vector<std::string> config_changes;
};

RunSummary summarize_run(const std::string& run_dir, double target_loss);
std::string format_table(const std::vector<RunSummary>& runs, double target_loss, bool md);

struct CompareOptions {
  std::string out_dir;     // where compare.md and the PNGs go
  std::string extra_md;    // appended to compare.md (e.g. the length-generalisation table)
  double target_loss = 0;  // 0: no "to target" columns
  double smoothing = 0.0;  // EMA factor for the train curves (0..0.99)
  bool plots = true;       // the PNGs and report.html (scripts/report_html.py)
  bool probe_card = true;  // runs with a probe.json: their cards side by side (lab/probe.h)
  // Translation runs with test-split translations: paired tests against the first run
  // (lab/translation_tests.h).
  bool paired_translation = true;
};
// Prints the table and writes compare.md + loss_by_step.png + loss_by_tokens.png + report.html
// (and, for runs that were probed, the length-generalisation card, card.md + card.png).
void compare_runs(const std::vector<std::string>& run_dirs, const CompareOptions& o);

// A sweep's result tables (Markdown). Per variant (and task), the setting with the best mean of
// the task's selection metric over seeds (highest if `higher`), reported as mean +- sample std
// (n seeds); then every variant x setting. Each result is one run's best validation value.
// With tasks, there is one table per variant with a row per task (the paper's Table 2 layout).
// A result with a not_applicable reason is a run the model cannot do (a learned position
// table shorter than the task's length): its cells read n/a and a footnote gives the reason.
struct SweepResult {
  std::string task, variant, setting;  // task: "" without a task axis
  double value = 0;
  std::string metric = "loss";
  bool higher = false;
  std::string not_applicable;  // non-empty: n/a, and why
  int64_t seed = 0;            // pairs results of different variants in the paired test
};
// With several seeds a last section gives 95% intervals and paired t-tests against `baseline`
// (a variant name; empty = the first variant).
std::string sweep_summary(const std::vector<SweepResult>& results,
                          const std::string& baseline = "");

// Length generalisation: one row per run (and per evaluation-time RoPE scaling), validation
// loss at each evaluation length; NaN = n/a (beyond a learned table). Markdown, with each
// column's lowest loss in bold and the training length marked.
struct LengthResult {
  std::string label;
  std::vector<double> loss;  // one per length
};
std::string length_table(const std::vector<LengthResult>& rows, const std::vector<int64_t>& lengths,
                         int64_t train_len);

// Trains every run of an experiment (each variant, or with a sweep each variant x setting x
// seed; same data order), then compares them and, for a sweep, writes sweep.md. With `probe:
// true`, every run is probed and the card (mean +- std over seeds) goes to card.md.
// seeds > 0 replaces the experiment's seeds with 1..seeds.
void ablate(const std::string& experiment_path, bool plots, int seeds = 0);

}  // namespace ropelab::lab
