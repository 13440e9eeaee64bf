// The pieces every subcommand file of cli/ shares: the options the parser fills (one struct:
// CLI11 binds each option to a field), `add` (a subcommand, its options and its action), and
// the parsers of list options. Each *_commands.cpp registers its group of subcommands; the
// actions are thin: they parse and call one library function.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/schema.h"
#include "dist/launch.h"
#include "lab/bench.h"
#include "scoring/metrics.h"
#include "util/error.h"

namespace ropelab::cli {

struct Opts {
  std::string file;
  std::vector<std::string> overrides;
  bool schema = false;
  int size = 1024;
  int repeats = 10;
  int threads = 0;
  std::vector<std::string> runs;
  std::string out;
  std::string split = "test";
  std::string lengths, rope_scaling;
  std::string ids, logits;  // eval --ids, --logits
  std::string format = "h5";
  int64_t max_tokens = 65536;
  bool use_latest = false;
  bool restart = false;
  double target_loss = 0;
  double smooth = 0.6;
  bool no_plots = false;
  int seeds = 0;
  std::string multipliers;
  int64_t probe_examples = 128;
  bool compare_generic = false;
  int64_t batches = 500;
  int64_t steps = 5;
  // translate, average, bleu
  int64_t beam = 0;
  double lenpen = -1;
  int64_t batch_tokens = 4096;
  std::string input;
  bool no_cache = false;
  bool no_save = false;
  bool allow_config_change = false;
  bool allow_unknown_keys = false;  // import-hf
  bool hf_v4 = false;               // export --format hf
  int64_t last = 5;
  std::vector<std::string> refs, hyps;
  scoring::ScoreOptions score;
  std::string metrics = "bleu,chrf";
  bool seed_given = false;
  // bench
  lab::BenchOptions bench;
  std::string point, sections, bench_lengths, decode_lengths, long_lengths, layout_lengths;
  std::vector<std::string> bench_models{"lm", "mlm", "translation"};
  std::vector<std::string> bench_precisions{"fp32", "bf16"};
  int64_t length = 0;
  int64_t window = 0;  // bench --point kernel: the sliding window
  // launch
  dist::LaunchOptions launch;
};
extern Opts g;  // filled by the parser of the subcommand the user chose

// Registers subcommand `name`: `options` declares its options on it, `action` runs it.
void add(CLI::App& app, const std::string& name, const std::string& help,
         const std::function<void(CLI::App&)>& options, std::function<int()> action);
// The positional config file and key.path=value overrides of most subcommands.
void add_config_and_overrides(CLI::App& sub);
// A comma-separated list of sequence lengths (each >= 2); UserError naming `what` otherwise.
std::vector<int64_t> parse_lengths(const std::string& s, const std::string& what = "--lengths");

// The groups of subcommands, one file each.
void register_training(CLI::App& app);     // train_commands.cpp
void register_evaluation(CLI::App& app);   // eval_commands.cpp
void register_translation(CLI::App& app);  // translation_commands.cpp
void register_models(CLI::App& app);       // model_commands.cpp
void register_speed(CLI::App& app);        // speed_commands.cpp

}  // namespace ropelab::cli
