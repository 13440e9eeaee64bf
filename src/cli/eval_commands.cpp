// The `ropelab` subcommands `eval`, `probe`, `compare` and `ablate`: a trained run measured, runs
// compared (eval/, lab/).
#include "cli/command.h"

#include <iostream>
#include <sstream>
#include <string>

#include "eval/evaluate.h"
#include "eval/ids.h"
#include "lab/compare.h"
#include "lab/probe.h"
#include "lab/tensorboard_export.h"
#include "util/error.h"
#include "util/signals.h"

namespace ropelab::cli {

namespace {

// This file's commands' options (the shared ones are cli::g's: command.h).
struct EvalOpts {
  std::vector<std::string> runs;
  std::string split = "test";
  std::string lengths, rope_scaling;
  std::string ids, logits;  // eval --ids, --logits
  int64_t max_tokens = 65536;
  double target_loss = 0;
  double smooth = 0.6;
  bool no_plots = false;
  int seeds = 0;
  std::string multipliers;
  int64_t probe_examples = 128;
  bool no_save = false;
} eval_opts;

int cmd_eval() {
  if (!eval_opts.logits.empty() && eval_opts.ids.empty())
    throw UserError("--logits writes the logits of the --ids sequences: give --ids FILE too");
  if (!eval_opts.ids.empty()) {
    if (!eval_opts.lengths.empty())
      throw UserError(
          "--ids evaluates the given sequences at their own lengths: leave out "
          "--lengths");
    std::cout << eval::format_ids(eval::eval_ids(g.file, eval_opts.ids, eval_opts.logits,
                                                 !g.use_latest, eval_opts.rope_scaling));
    return 0;
  }
  auto report = eval::evaluate_run(g.file, eval_opts.split, parse_lengths(eval_opts.lengths),
                                   eval_opts.max_tokens, !g.use_latest, eval_opts.rope_scaling,
                                   !eval_opts.no_save);
  std::cout << eval::format_eval(report);
  return 0;
}

int cmd_probe() {
  lab::ProbeOptions o;
  if (!eval_opts.multipliers.empty()) {
    o.multipliers.clear();
    std::stringstream ss(eval_opts.multipliers);
    for (std::string item; std::getline(ss, item, ',');) {
      size_t used = 0;
      long long v = 0;
      try {
        v = std::stoll(item, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != item.size() || v < 1 || v > 1024)
        throw UserError("--multipliers: '" + item +
                        "' is not a whole number in [1, 1024] (expected e.g. 1,2,4,8)");
      o.multipliers.push_back(v);
    }
  }
  o.examples = eval_opts.probe_examples;
  o.eval_tokens = eval_opts.max_tokens;
  o.plot = !eval_opts.no_plots;
  for (const auto& run : eval_opts.runs) {
    auto r = lab::probe_run(run, o);
    std::cout << lab::probe_markdown(r) << "wrote " << run << "/probe.md\n\n";
  }
  return 0;
}

int cmd_compare() {
  lab::CompareOptions o;
  o.out_dir = g.out.empty() ? "." : g.out;
  o.target_loss = eval_opts.target_loss;
  o.smoothing = eval_opts.smooth;
  o.plots = !eval_opts.no_plots;
  lab::compare_runs(eval_opts.runs, o);
  return 0;
}

int cmd_export_tensorboard() {
  for (const auto& run : eval_opts.runs) {
    auto s = lab::export_tensorboard(run);
    std::cout << "wrote " << s.dir << ": " << s.scalars << " scalars, " << s.results
              << " result file(s)" << (s.replaced ? " (the old event files replaced)" : "") << "\n";
  }
  std::cout << "view them with: tensorboard --logdir "
            << (eval_opts.runs.size() == 1 ? eval_opts.runs[0] : std::string("PARENT_DIR")) << "\n";
  return 0;
}

int cmd_ablate() {
  lab::ablate(g.file, !eval_opts.no_plots, eval_opts.seeds);
  return signals::stop_requested() ? 143 : 0;
}

}  // namespace

// `eval`, `probe`, `compare` and `ablate`.
void register_evaluation(CLI::App& app) {
  add(
      app, "eval",
      "Evaluate a trained run: loss and perplexity on a split, and with --lengths the same model\n"
      "at other context lengths (length extrapolation; 'n/a' beyond a learned table). Writes\n"
      "RUN/eval-SPLIT.json, holding the run's lock; --no-save only prints, and works while the\n"
      "run trains. With --ids FILE (a decoder run): the next-token NLL of given token ids, per\n"
      "sequence and overall, and with --logits OUT.h5 the logits: the way to compare ropelab\n"
      "with transformers on exactly the same input (docs/huggingface.md).",
      [](CLI::App& sub) {
        sub.add_option("run", g.file, "run directory")->required();
        sub.add_option("--split", eval_opts.split,
                       "valid or test (MNLI also valid_mismatched and test_mismatched)")
            ->capture_default_str();
        sub.add_option("--lengths", eval_opts.lengths,
                       "comma-separated context lengths, e.g. 128,256,512,1024");
        sub.add_option("--max-tokens", eval_opts.max_tokens, "tokens evaluated per length")
            ->capture_default_str();
        sub.add_flag("--latest", g.use_latest, "use the newest checkpoint instead of the best one");
        sub.add_option("--rope-scaling", eval_opts.rope_scaling,
                       "METHOD:FACTOR[@KIND,...] or base:BASE: evaluate a RoPE model with a "
                       "context-extension method it was not trained with (linear, ntk, dynamic, "
                       "yarn, llama3, longrope: per-pair factors seeded from YaRN; e.g. yarn:4) "
                       "or another base (base:500000); with a layout, only the kinds named "
                       "after @ (linear:8@global), else the global RoPE kinds, else every RoPE "
                       "kind; writes eval-SPLIT-rope-METHOD-FACTOR[-KIND].json");
        sub.add_flag("--no-save", eval_opts.no_save,
                     "print the report only: write nothing into the run (no lock needed)");
        sub.add_option("--ids", eval_opts.ids,
                       "token ids to evaluate instead of a split: JSON lines (a list of ids, or "
                       "{\"input_ids\": [...]}, per line) or an HDF5 file with a dataset "
                       "input_ids (1-D, or 2-D: one sequence per row); an imported run takes the "
                       "checkpoint's ids. Prints the mean next-token NLL per sequence and overall; "
                       "writes nothing into the run");
        sub.add_option("--logits", eval_opts.logits,
                       "with --ids: write the logits to this new HDF5 file (logits/I: [T, V] "
                       "float32 in the checkpoint's vocabulary order, input_ids/I, nll)");
      },
      cmd_eval);
  add(
      app, "probe",
      "The length-generalisation card of trained runs (train short, test long). A synthetic-*\n"
      "run (task answer): teacher-forced exact match of whole answers on fresh test examples\n"
      "at 1x, 2x, 4x, 8x its training size (column m: sizes in (m L/2, m L]; passkey: prompts\n"
      "of m L tokens, the key at depths 0, 0.25, 0.5, 0.75, 1). A clm or mlm run: validation\n"
      "perplexity at 1x-8x its training length, the same tokens at each. Writes RUN/probe.md,\n"
      "probe.json and probe.png; `ropelab compare` and experiments with `probe: true` set the\n"
      "cards of several runs side by side.",
      [](CLI::App& sub) {
        sub.add_option("runs", eval_opts.runs, "run directories")->required();
        sub.add_option("--multipliers", eval_opts.multipliers,
                       "comma-separated multiples of the training size (default 1,2,4,8)");
        sub.add_option("--examples", eval_opts.probe_examples,
                       "synthetic runs: examples per column (passkey: per column and depth)")
            ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
            ->capture_default_str();
        sub.add_option("--max-tokens", eval_opts.max_tokens,
                       "text runs: tokens evaluated per length")
            ->capture_default_str();
        sub.add_flag("--no-plots", eval_opts.no_plots, "no probe.png");
      },
      cmd_probe);
  add(
      app, "compare",
      "Compare runs side by side: a table (terminal and OUT/compare.md) of position module,\n"
      "parameters, final/best validation loss, every other validation metric the runs logged\n"
      "(perplexity, accuracy, bits per byte, ...), steps and tokens to a target loss, tokens/s;\n"
      "and PNG loss curves by step and by tokens (OUT/loss_by_*.png), and OUT/report.html: one\n"
      "self-contained page with the tables and interactive curves (toggles, seed means, "
      "smoothing,\n"
      "log scale, step or token axis) that opens in a browser with no network. Runs that were "
      "probed\n"
      "(`ropelab probe`) also get their length-generalisation cards side by side (OUT/card.md,\n"
      "card.png). Translation runs evaluated on their test split (`ropelab eval RUN --split\n"
      "test` keeps the translations) get sacreBLEU's paired bootstrap and approximate\n"
      "randomization tests against the first run.",
      [](CLI::App& sub) {
        sub.add_option("runs", eval_opts.runs, "run directories")->required();
        sub.add_option("--out", g.out, "output directory (default: current directory)");
        sub.add_option("--target-loss", eval_opts.target_loss,
                       "report steps/tokens to reach this validation loss");
        sub.add_option("--smooth", eval_opts.smooth, "EMA smoothing of the train curves (0 = none)")
            ->check(CLI::Range(0.0, 0.99))
            ->capture_default_str();
        sub.add_flag("--no-plots", eval_opts.no_plots, "tables only: no PNGs, no report.html");
      },
      cmd_compare);
  add(
      app, "export-tensorboard",
      "Write a run's TensorBoard event files (RUN/tensorboard) from its files: every train and\n"
      "valid series of metrics.h5 at its step, the config as text, its settings as hparams,\n"
      "and the numbers of eval-*.json and probe.json. Training writes these as it goes\n"
      "(run.tensorboard, on by default); this is for runs trained without them. Replaces the\n"
      "run's event files, holding its lock (not while it trains). Then: tensorboard --logdir\n"
      "RUNS_DIR (docs/tensorboard.md).",
      [](CLI::App& sub) { sub.add_option("runs", eval_opts.runs, "run directories")->required(); },
      cmd_export_tensorboard);
  add(
      app, "ablate",
      "Run an experiment: train every variant of a base config (same data order and seed;\n"
      "finished variants are skipped, interrupted ones resumed; one killed hard before its\n"
      "first checkpoint is started over, its old metrics kept as .restart-N), then compare\n"
      "them. With a sweep (`settings:` and/or `seeds:`), every variant x setting x seed is\n"
      "trained and sweep.md reports each variant's best setting as mean +- std over seeds; with\n"
      "`tasks:` (e.g. several GLUE tasks) all of that runs once per task and sweep.md has one\n"
      "table per variant with a row per task. With `probe: true`, every run is probed\n"
      "afterwards and card.md sets the cards side by side, mean +- std over seeds with paired\n"
      "tests. A translation experiment with `test: true` adds sacreBLEU's paired tests of each\n"
      "variant's test translations (seeds pooled) against the baseline. Every run's values\n"
      "(best validation metric, test metrics) also go to OUT_DIR/NAME/results.json for scripts\n"
      "(scripts/reproduce_summary.py), and OUT_DIR/NAME/report.html shows it all in a browser.",
      [](CLI::App& sub) {
        sub.add_option("experiment", g.file, "experiment YAML (see experiments/)")->required();
        sub.add_flag("--no-plots", eval_opts.no_plots, "tables only: no PNGs, no report.html");
        sub.add_option("--seeds", eval_opts.seeds,
                       "train every variant (x setting) with seeds 1..N, replacing the "
                       "experiment's `seeds:`; sweep.md then adds 95% intervals and paired "
                       "t-tests against `baseline:` (default: the first variant)")
            ->check(CLI::Range(1, 1000));
      },
      cmd_ablate);
}

}  // namespace ropelab::cli
