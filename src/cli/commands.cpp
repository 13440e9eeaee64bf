#include "cli/commands.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>

#include "cli/sysinfo.h"
#include "config/loader.h"
#include "data/prepare.h"
#include "dist/launch.h"
#include "dist/threads.h"
#include "dist/world.h"
#include "eval/evaluate.h"
#include "eval/export.h"
#include "eval/translate.h"
#include "hf/export.h"
#include "hf/import.h"
#include "lab/bench.h"
#include "lab/compare.h"
#include "lab/probe.h"
#include "run/run.h"
#include "scoring/metrics.h"
#include "text/lines.h"
#include "train/trainer.h"
#include "util/device.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/platform.h"
#include "util/signals.h"
#include "weights/weights.h"

namespace ropelab::cli {

namespace {

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
  std::string point, sections, bench_lengths, decode_lengths;
  int64_t length = 0;
  // launch
  dist::LaunchOptions launch;
};
Opts g;
std::map<CLI::App*, std::function<int()>> g_actions;

void add(CLI::App& app, const std::string& name, const std::string& help,
         const std::function<void(CLI::App&)>& options, std::function<int()> action) {
  CLI::App* sub = app.add_subcommand(name, help);
  options(*sub);
  g_actions[sub] = std::move(action);
}

int cmd_config() {
  if (g.schema) {
    std::cout << config::schema();
    return 0;
  }
  if (g.file.empty()) throw UserError("config: give a config file, or --schema");
  auto c = config::load_config(g.file, config::overrides_from_args(g.overrides));
  run::plan_of(c);  // what the data decides (the synthetic sources' bounds)
  std::cout << config::dump(c);
  return 0;
}

int cmd_prepare() {
  auto c = config::load_config(g.file, config::overrides_from_args(g.overrides));
  auto p = data::prepare(run::plan_of(c), dist::apply_thread_policy(c.run.threads));
  for (const auto& [split, path] : p.splits) std::printf("%s\t%s\n", split.c_str(), path.c_str());
  if (!p.plan.tokenizer_path.empty()) std::printf("tokenizer\t%s\n", p.plan.tokenizer_path.c_str());
  if (!p.plan.target_tokenizer_path.empty())
    std::printf("target tokenizer\t%s\n", p.plan.target_tokenizer_path.c_str());
  return 0;
}

int cmd_train() {
  auto c = config::load_config(g.file, config::overrides_from_args(g.overrides));
  auto env = dist::env_from_environment();  // set by torchrun, a SLURM wrapper or launch
  if (env.grouped()) {
    log::set_rank(env.rank);
    env.cuda = device::resolve(c.run.device).is_cuda();
    dist::init(env);
  }
  train::TrainOptions o;
  o.restart = g.restart;
  o.allow_config_change = g.allow_config_change;
  auto r = train::train(c, o);
  if (dist::world().is_main())
    std::printf("run: %s (%ld steps)\n", r.run_dir.c_str(), static_cast<long>(r.steps));
  return r.interrupted ? 143 : 0;
}

std::vector<int64_t> parse_lengths(const std::string& s, const std::string& what = "--lengths") {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      if (used != item.size() || v < 2) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw UserError(what + ": '" + item + "' is not a length >= 2 (expected e.g. 128,256,512)");
    }
  }
  return out;
}

int cmd_eval() {
  auto report = eval::evaluate_run(g.file, g.split, parse_lengths(g.lengths), g.max_tokens,
                                   !g.use_latest, g.rope_scaling, !g.no_save);
  std::cout << eval::format_eval(report);
  return 0;
}

int cmd_probe() {
  lab::ProbeOptions o;
  if (!g.multipliers.empty()) {
    o.multipliers.clear();
    std::stringstream ss(g.multipliers);
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
  o.examples = g.probe_examples;
  o.eval_tokens = g.max_tokens;
  o.plot = !g.no_plots;
  for (const auto& run : g.runs) {
    auto r = lab::probe_run(run, o);
    std::cout << lab::probe_markdown(r) << "wrote " << run << "/probe.md\n\n";
  }
  return 0;
}

int cmd_compare() {
  lab::CompareOptions o;
  o.out_dir = g.out.empty() ? "." : g.out;
  o.target_loss = g.target_loss;
  o.smoothing = g.smooth;
  o.plots = !g.no_plots;
  lab::compare_runs(g.runs, o);
  return 0;
}

int cmd_ablate() {
  lab::ablate(g.file, !g.no_plots, g.seeds);
  return signals::stop_requested() ? 143 : 0;
}

int cmd_export() {
  std::cout << (g.format == "hf"
                    ? hf::export_hf(g.file, g.out,
                                    g.hf_v4 ? hf::HfConfigForm::kV4 : hf::HfConfigForm::kV5)
                    : eval::export_weights(g.file, g.out))
            << "\n";
  return 0;
}

int cmd_translate() {
  std::string data;
  if (g.input.empty() || g.input == "-") {
    std::ostringstream os;
    os << std::cin.rdbuf();
    data = os.str();
  } else {
    data = fs::read_file(g.input);
  }
  const std::string name = g.input.empty() || g.input == "-" ? "stdin" : g.input;
  auto lines = text::split_lines(data, name);
  if (lines.empty()) throw UserError(name + ": no input lines to translate");
  eval::TranslateOptions o;
  o.beam = g.beam;
  o.lenpen = g.lenpen;
  o.batch_tokens = g.batch_tokens;
  o.use_best = !g.use_latest;
  o.use_cache = !g.no_cache;
  auto out = eval::translate_lines(g.file, lines, o);
  signals::throw_if_stopped("translate", "nothing written: the output would be partial");
  std::string text;
  for (const auto& l : out) text += l + "\n";
  if (g.out.empty())
    std::cout << text << std::flush;
  else
    fs::write_file_atomic(g.out, text);
  return 0;
}

int cmd_launch() {
  // A bad config is reported once, before any rank starts (each rank would report it).
  const auto& a = g.launch.args;
  if (a.size() >= 2 && a[0] == "train") {
    std::vector<std::string> overrides;
    for (size_t i = 2; i < a.size(); ++i)
      if (a[i].rfind("--", 0) != 0) overrides.push_back(a[i]);
    config::load_config(a[1], config::overrides_from_args(overrides));
  }
  return dist::launch(g.launch);
}

int cmd_average() {
  std::cout << eval::average_checkpoints(g.file, g.last, g.out) << "\n";
  return 0;
}

int cmd_import_hf() {
  std::cout << hf::import_hf(g.file, g.out, g.overrides, g.allow_unknown_keys) << "\n";
  return 0;
}

namespace {
// A paired-test seed: a non-negative integer (sacreBLEU's "none", a seed from the OS, would make
// the p-values unrepeatable, so it is not offered).
uint64_t parse_seed(const std::string& v, const std::string& what) {
  bool digits = !v.empty() && v.size() <= 19 &&
                std::all_of(v.begin(), v.end(), [](char c) { return c >= '0' && c <= '9'; });
  if (!digits)
    throw UserError(what + " '" + v +
                    "': a non-negative integer (e.g. 12345, sacreBLEU's default)");
  return std::stoull(v);
}
}  // namespace

int cmd_bleu() {
  g.score.metrics.clear();
  for (size_t at = 0; at <= g.metrics.size();) {
    auto comma = std::min(g.metrics.find(',', at), g.metrics.size());
    g.score.metrics.push_back(g.metrics.substr(at, comma - at));
    at = comma + 1;
  }
  if (const char* seed = std::getenv("SACREBLEU_SEED"); seed != nullptr && !g.seed_given)
    g.score.seed = parse_seed(seed, "$SACREBLEU_SEED");
  auto scored = scoring::score_files(g.hyps, g.refs, g.score);
  for (const auto& w : scored.warnings) spdlog::warn("{}", w);
  std::cout << scored.text;
  return 0;
}

int cmd_info() {
  std::cout << sysinfo::report();
  return 0;
}

int cmd_bench_blas() {
  platform::set_threads(g.threads);
  auto r = lab::measure_matmul(g.size, g.repeats);
  std::printf("matmul %dx%d, %d threads, BLAS core %s: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
              g.size, g.size, at::get_num_threads(), platform::blas_core().c_str(), r.fp32_gflops,
              r.bf16_gflops);
  std::fflush(stdout);
  if (g.compare_generic) {
    // The same measurement in a child forced onto OpenBLAS's generic kernel, for the ratio.
    std::string cmd = "OPENBLAS_CORETYPE=Prescott ROPELAB_KEEP_BLAS_CORE=1 '" +
                      platform::executable_dir() + "/ropelab' bench-blas --size " +
                      std::to_string(g.size) + " --repeats " + std::to_string(g.repeats) +
                      " --threads " + std::to_string(g.threads);
    if (std::system(cmd.c_str()) != 0) throw UserError("bench-blas: the comparison run failed");
  }
  return 0;
}

int cmd_bench() {
  if (!g.point.empty()) {  // one measurement, in a child of the parent below
    lab::BenchPoint point;
    try {
      point = config::enum_from<lab::BenchPoint>(g.point);
    } catch (const std::invalid_argument&) {
      throw UserError("bench: unknown --point " + g.point + " (matmul, train, decode, data)");
    }
    std::cout << lab::bench_point(point, g.file, g.overrides, g.bench.steps, g.length) << std::endl;
    return 0;
  }
  auto& o = g.bench;
  o.overrides = g.overrides;
  std::stringstream ss(g.sections);
  for (std::string s; std::getline(ss, s, ',');)
    if (!s.empty()) o.sections.push_back(s);
  if (!g.bench_lengths.empty()) o.lengths = parse_lengths(g.bench_lengths, "--lengths");
  if (!g.decode_lengths.empty())
    o.decode_lengths = parse_lengths(g.decode_lengths, "--decode-lengths");
  lab::run_bench(o);
  return 0;
}

int cmd_bench_data() {
  auto c = config::load_config(g.file, config::overrides_from_args(g.overrides));
  std::cout << lab::bench_data(c, g.batches, g.steps);
  return 0;
}

void add_config_and_overrides(CLI::App& sub) {
  sub.add_option("config", g.file, "YAML config file")->required();
  sub.add_option("overrides", g.overrides,
                 "key.path=value overrides, applied after the file (e.g. model.d_model=128)");
}

// `prepare`, `train` and `launch`.
void register_training(CLI::App& app) {
  add(app, "prepare",
      "Make the data a config needs: export the built-in corpus (or read yours), train the\n"
      "tokenizer, and write HDF5 token datasets per split under data.prepared_dir. Stages that\n"
      "are up to date are skipped; nothing half-written is ever left in place.",
      add_config_and_overrides, cmd_prepare);
  add(
      app, "train",
      "Train the run a config describes: prepares its data if needed, writes\n"
      "run.out_dir/run.name/{config.yaml, train.log, metrics.h5, metrics.jsonl, checkpoints/}.\n"
      "Running it again on a run with checkpoints resumes it (a finished one trains nothing\n"
      "and reports its final validation numbers from metrics.h5). On resume only more\n"
      "train.max_steps, train.eval_every/log_every/checkpoint_every/keep_last, run.threads and\n"
      "run.device may change (recorded in config_history.yaml); any other change is refused.\n"
      "A run with results but no usable checkpoint is refused unless --restart. One process\n"
      "writes a run at a time: a second one exits 2 naming the first (RUN/.lock).\n"
      "Ctrl-C, SIGTERM or SIGHUP saves a checkpoint and exits with code 143.",
      [](CLI::App& sub) {
        add_config_and_overrides(sub);
        sub.add_flag("--restart", g.restart,
                     "start over in a run directory whose checkpoints are all damaged (or that "
                     "has metrics but no checkpoint), keeping its metrics and checkpoints "
                     "renamed .restart-N");
        sub.add_flag("--allow-config-change", g.allow_config_change,
                     "resume under a config that differs in any key, recording each change in "
                     "RUN/config_history.yaml and train.log");
      },
      cmd_train);
  add(
      app, "launch",
      "Train data-parallel on this machine: starts N ranks of `ropelab train` (c10d: Gloo on the\n"
      "CPU, NCCL on GPUs where libtorch has it), as `torchrun --standalone --nproc_per_node N\n"
      "--no_python ropelab train ...` would. Each rank takes train.batch_size examples of every\n"
      "step (the global batch is N x batch_size x grad_accum); rank 0 prepares the data, logs and\n"
      "saves checkpoints. SIGINT/SIGTERM stop all ranks at the same step with one checkpoint; a\n"
      "rank that dies makes the others exit within --timeout, naming it. Several machines:\n"
      "torchrun or SLURM (docs/distributed.md).\n"
      "Example: ropelab launch --nproc 2 -- train configs/clm-small.yaml",
      [](CLI::App& sub) {
        sub.add_option("--nproc", g.launch.nproc, "ranks to start (default 2)")
            ->check(CLI::Range(1, 1024));
        sub.add_option("--port", g.launch.port, "MASTER_PORT (default: a free port)")
            ->check(CLI::Range(1, 65535));
        sub.add_option("--timeout", g.launch.timeout_s,
                       "seconds a rank waits for the others in a collective before it reports "
                       "the one that is gone or hung (default 300)")
            ->check(CLI::Range(1.0, 1e6));
        sub.add_option("command", g.launch.args,
                       "after --: the command each rank runs, e.g. -- "
                       "train CONFIG key=value ...")
            ->required();
      },
      cmd_launch);
}

// `eval`, `probe`, `compare` and `ablate`.
void register_evaluation(CLI::App& app) {
  add(
      app, "eval",
      "Evaluate a trained run: loss and perplexity on a split, and with --lengths the same model\n"
      "at other context lengths (length extrapolation; 'n/a' beyond a learned table). Writes\n"
      "RUN/eval-SPLIT.json, holding the run's lock; --no-save only prints, and works while the\n"
      "run trains.",
      [](CLI::App& sub) {
        sub.add_option("run", g.file, "run directory")->required();
        sub.add_option("--split", g.split,
                       "valid or test (MNLI also valid_mismatched and test_mismatched)")
            ->capture_default_str();
        sub.add_option("--lengths", g.lengths,
                       "comma-separated context lengths, e.g. 128,256,512,1024");
        sub.add_option("--max-tokens", g.max_tokens, "tokens evaluated per length")
            ->capture_default_str();
        sub.add_flag("--latest", g.use_latest, "use the newest checkpoint instead of the best one");
        sub.add_option("--rope-scaling", g.rope_scaling,
                       "METHOD:FACTOR: evaluate a RoPE model with a context-extension method it "
                       "was not trained with (linear, ntk, dynamic, yarn, llama3; e.g. yarn:4); "
                       "writes eval-SPLIT-rope-METHOD-FACTOR.json");
        sub.add_flag("--no-save", g.no_save,
                     "print the report only: write nothing into the run (no lock needed)");
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
        sub.add_option("runs", g.runs, "run directories")->required();
        sub.add_option("--multipliers", g.multipliers,
                       "comma-separated multiples of the training size (default 1,2,4,8)");
        sub.add_option("--examples", g.probe_examples,
                       "synthetic runs: examples per column (passkey: per column and depth)")
            ->check(CLI::Range(int64_t{1}, int64_t{1000000}))
            ->capture_default_str();
        sub.add_option("--max-tokens", g.max_tokens, "text runs: tokens evaluated per length")
            ->capture_default_str();
        sub.add_flag("--no-plots", g.no_plots, "no probe.png");
      },
      cmd_probe);
  add(
      app, "compare",
      "Compare runs side by side: a table (terminal and OUT/compare.md) of position module,\n"
      "parameters, final/best validation loss, every other validation metric the runs logged\n"
      "(perplexity, accuracy, bits per byte, ...), steps and tokens to a target loss, tokens/s;\n"
      "and PNG loss curves by step and by tokens (OUT/loss_by_*.png). Runs that were probed\n"
      "(`ropelab probe`) also get their length-generalisation cards side by side (OUT/card.md,\n"
      "card.png). Translation runs evaluated on their test split (`ropelab eval RUN --split\n"
      "test` keeps the translations) get sacreBLEU's paired bootstrap and approximate\n"
      "randomization tests against the first run.",
      [](CLI::App& sub) {
        sub.add_option("runs", g.runs, "run directories")->required();
        sub.add_option("--out", g.out, "output directory (default: current directory)");
        sub.add_option("--target-loss", g.target_loss,
                       "report steps/tokens to reach this validation loss");
        sub.add_option("--smooth", g.smooth, "EMA smoothing of the train curves (0 = none)")
            ->check(CLI::Range(0.0, 0.99))
            ->capture_default_str();
        sub.add_flag("--no-plots", g.no_plots, "tables only");
      },
      cmd_compare);
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
      "(scripts/reproduce_summary.py).",
      [](CLI::App& sub) {
        sub.add_option("experiment", g.file, "experiment YAML (see experiments/)")->required();
        sub.add_flag("--no-plots", g.no_plots, "tables only");
        sub.add_option("--seeds", g.seeds,
                       "train every variant (x setting) with seeds 1..N, replacing the "
                       "experiment's `seeds:`; sweep.md then adds 95% intervals and paired "
                       "t-tests against `baseline:` (default: the first variant)")
            ->check(CLI::Range(1, 1000));
      },
      cmd_ablate);
}

// `translate`, `average` and `bleu`.
void register_translation(CLI::App& app) {
  add(
      app, "translate",
      "Translate raw text with a trained translation run: reads lines from stdin (or --input),\n"
      "writes one detokenised translation per line, in input order, to stdout (or --out,\n"
      "written atomically). Beam search with the run's task.beam / task.lenpen unless given.\n"
      "Example: ropelab translate runs/mt --beam 4 --lenpen 0.6 < test.en > hyp.es",
      [](CLI::App& sub) {
        sub.add_option("run", g.file, "run directory, averaged run (ropelab average) or checkpoint")
            ->required();
        sub.add_option("--beam", g.beam, "beam size (1 = greedy; default: the run's task.beam)")
            ->check(CLI::Range(1, 64));
        sub.add_option("--lenpen", g.lenpen,
                       "length penalty: score / length^lenpen (default: the run's task.lenpen)")
            ->check(CLI::Range(0.0, 10.0));
        sub.add_option("--batch-tokens", g.batch_tokens, "source tokens per batch, beams included")
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 24))
            ->capture_default_str();
        sub.add_option("--input", g.input, "read this file instead of stdin");
        sub.add_option("--out", g.out, "write this file (atomically) instead of stdout");
        sub.add_flag("--latest", g.use_latest, "use the newest checkpoint instead of the best");
        sub.add_flag("--no-cache", g.no_cache,
                     "recompute every prefix instead of using the key/value cache (same output)");
      },
      cmd_translate);
  add(
      app, "average",
      "Average the weights of a run's last N checkpoints (the paper evaluates the average of the\n"
      "last 5) into a new run directory that translate, eval and export accept.",
      [](CLI::App& sub) {
        sub.add_option("run", g.file, "run directory")->required();
        sub.add_option("--last", g.last, "how many of the newest checkpoints")
            ->check(CLI::Range(int64_t{1}, int64_t{1000}))
            ->capture_default_str();
        sub.add_option("--out", g.out, "new directory (must not exist)")->required();
      },
      cmd_average);
  add(
      app, "bleu",
      "Score translations like sacreBLEU 2.x: corpus BLEU (13a tokenization, exp smoothing)\n"
      "and chrF2 by default, TER and chrF++ on request, printed with sacreBLEU's signatures;\n"
      "or one score per segment (--sentence-level). With several --hyp files, each system is\n"
      "compared with the first by sacreBLEU's paired bootstrap resampling and approximate\n"
      "randomization tests (same p-values for the same seed). One segment per line; every file\n"
      "must have the same number of lines.",
      [](CLI::App& sub) {
        sub.add_option("--ref", g.refs, "reference file (repeat for several references)")
            ->required();
        sub.add_option("--hyp", g.hyps,
                       "hypothesis file; repeat to compare systems: the first is the baseline, "
                       "and each other is tested against it")
            ->required();
        sub.add_option("--metrics,-m", g.metrics, "comma-separated: bleu, chrf, ter")
            ->capture_default_str();
        sub.add_option("--tokenize", g.score.bleu.tokenize,
                       "BLEU's tokenizer, as sacreBLEU's: 13a (the default), intl (Unicode "
                       "punctuation and symbols), zh (Chinese characters one by one, then 13a), "
                       "char (every character a token) or none (pre-tokenized input)")
            ->capture_default_str();
        sub.add_flag("--lowercase", g.score.bleu.lowercase, "case-insensitive BLEU (case:lc)");
        sub.add_flag("--force", g.score.force,
                     "no warning when many hypotheses end in a tokenized period");
        sub.add_flag("--chrf-lowercase", g.score.chrf.lowercase, "case-insensitive chrF (case:lc)");
        sub.add_option("--chrf-word-order", g.score.chrf.word_order,
                       "word n-gram order of chrF: 2 gives chrF++ (nw:2)")
            ->capture_default_str();
        sub.add_flag("--ter-case-sensitive", g.score.ter.case_sensitive,
                     "case-sensitive TER (TER is case-insensitive by default, as Tercom)");
        sub.add_flag("--ter-normalized", g.score.ter.normalized,
                     "TER: Tercom's normalisation (punctuation split as in mteval)");
        sub.add_flag("--ter-no-punct", g.score.ter.no_punct, "TER: remove punctuation");
        sub.add_flag("--ter-asian-support", g.score.ter.asian_support,
                     "TER: split CJK characters (with --ter-normalized) and remove CJK "
                     "punctuation (with --ter-no-punct)");
        sub.add_flag("--sentence-level,-s", g.score.sentence_level,
                     "one score per segment and metric (BLEU with effective order, eff:yes)");
        sub.add_option("--paired", g.score.paired,
                       "with several --hyp: bs (paired bootstrap resampling), ar (approximate "
                       "randomization) or both")
            ->capture_default_str();
        sub.add_option("--paired-bs-n", g.score.paired_bs_n, "bootstrap resamples")
            ->capture_default_str();
        sub.add_option("--paired-ar-n", g.score.paired_ar_n, "approximate randomization trials")
            ->capture_default_str();
        sub.add_option_function<std::string>(
            "--paired-seed",
            [](const std::string& v) {
              g.score.seed = parse_seed(v, "--paired-seed");
              g.seed_given = true;
            },
            "seed of the paired tests' NumPy generator (default 12345, or $SACREBLEU_SEED, as "
            "sacreBLEU)");
      },
      cmd_bleu);
}

// `export`, `import-hf`, `config` and `info`.
void register_models(CLI::App& app) {
  add(
      app, "export",
      "Export a trained model's weights to HDF5 (--format h5: every tensor under its module\n"
      "path, the config as attributes, for Python/h5py), or as a Hugging Face checkpoint\n"
      "directory (--format hf: config.json, model.safetensors, the tokenizer's files) for\n"
      "BertForMaskedLM / BertForSequenceClassification, the RoFormer ones, LlamaForCausalLM and\n"
      "Qwen2ForCausalLM. A model no such class computes exactly is refused, naming the difference.",
      [](CLI::App& sub) {
        sub.add_option("source", g.file,
                       "run directory (hf: its best checkpoint) or checkpoint "
                       "directory")
            ->required();
        sub.add_option("--out", g.out, "output .h5 file, or new directory for --format hf")
            ->required();
        sub.add_option("--format", g.format, "h5 or hf")
            ->check(CLI::IsMember({"h5", "hf"}))
            ->capture_default_str();
        sub.add_flag("--hf-v4", g.hf_v4,
                     "hf: write config.json's RoPE settings as transformers 4 did (rope_theta, "
                     "rope_scaling), which 4.x and 5 read; the default is transformers 5's "
                     "rope_parameters, which 4.x ignores");
      },
      cmd_export);
  add(
      app, "import-hf",
      "Import a Hugging Face checkpoint directory (config.json, model.safetensors or its shards,\n"
      "the tokenizer's files) as a new run directory (config.yaml, a model-only checkpoint,\n"
      "hf/). Classes: BertModel, BertForMaskedLM, RoFormerModel, RoFormerForMaskedLM (an MLM\n"
      "run; a bare model gets a new MLM head); Bert/RoFormerForSequenceClassification (a GLUE\n"
      "run: name its data with overrides, e.g. data.source=glue data.glue_task=SST-2\n"
      "data.train=DIR); LlamaForCausalLM, MistralForCausalLM, Qwen2ForCausalLM (a CLM run, with\n"
      "RoPE scaling, from transformers 4's rope_theta/rope_scaling or 5's rope_parameters). The "
      "run tokenizes with the checkpoint's tokenizer (vocab.txt: wordpiece;\n"
      "a byte-level tokenizer.json: bpe; tokenizer.model: spm), re-numbered so its specials sit\n"
      "at ropelab's special ids (RUN/hf/vocab_order.json). A class, config value or tensor\n"
      "ropelab cannot represent exactly is refused, naming it, and so is a config.json key it\n"
      "does not know (--allow-unknown-keys to import anyway). `export --format hf` goes back.",
      [](CLI::App& sub) {
        sub.add_option("dir", g.file, "checkpoint directory (what save_pretrained writes)")
            ->required();
        sub.add_option("--out", g.out, "new run directory (must not exist)")->required();
        sub.add_flag("--allow-unknown-keys", g.allow_unknown_keys,
                     "import even when config.json has keys ropelab does not know (refused by "
                     "default: they may change the model's function); the summary lists them");
        sub.add_option("overrides", g.overrides,
                       "key.path=value overrides of the run's config, applied after the "
                       "checkpoint's (e.g. data.source=bible-sst2)");
      },
      cmd_import_hf);
  add(
      app, "config",
      "Print the fully resolved config (inherit + overrides applied, every default shown), or\n"
      "with --schema every key with its default and meaning. Checks the file strictly: unknown\n"
      "or duplicate keys, wrong types, bad values and cross-field problems are all reported.",
      [](CLI::App& sub) {
        sub.add_option("config", g.file, "YAML config file");
        sub.add_option("overrides", g.overrides, "key.path=value overrides");
        sub.add_flag("--schema", g.schema, "print every config key with its default and help");
      },
      cmd_config);
  add(
      app, "info",
      "Show versions, the BLAS kernel in use, threads, CPU features and whether the\n"
      "SentencePiece module loads.",
      [](CLI::App&) {}, cmd_info);
}

// `bench-blas`, `bench-data` and `bench`.
void register_speed(CLI::App& app) {
  add(
      app, "bench-blas",
      "Measure fp32 and bf16 matmul throughput in this process (GFLOP/s). With\n"
      "--compare-generic, also in a child forced onto OpenBLAS's generic kernel, for the ratio.",
      [](CLI::App& sub) {
        sub.add_option("--size", g.size, "matrix size n (n x n)")->check(CLI::Range(16, 16384));
        sub.add_option("--repeats", g.repeats, "timed repetitions")->check(CLI::Range(1, 10000));
        sub.add_option("--threads", g.threads, "intra-op threads (0 = default)")
            ->check(CLI::Range(0, 1024));
        sub.add_flag("--compare-generic", g.compare_generic,
                     "also run OpenBLAS's generic kernel (what you get without ropelab's fix)");
      },
      cmd_bench_blas);
  add(
      app, "bench-data",
      "Measure the batch stream's throughput next to training throughput for a config\n"
      "(tokens/s, side by side in one process): data must never be the bottleneck.",
      [](CLI::App& sub) {
        add_config_and_overrides(sub);
        sub.add_option("--batches", g.batches, "batches drawn from the stream")
            ->capture_default_str();
        sub.add_option("--steps", g.steps, "training steps timed")->capture_default_str();
      },
      cmd_bench_data);
  add(
      app, "bench",
      "Benchmark training, position modules, attention kernels, decoding and the batch stream\n"
      "on the bench configs (configs/bench/: the LM, MLM and translation shapes), each figure\n"
      "measured in its own child process; prints a table and writes OUT/bench.md and\n"
      "OUT/bench.json. Sections: machine (matmul peak), train (tokens/s, model FLOP/s, MFU at\n"
      "fp32 and bf16; with --compare-pytorch the eager PyTorch reference of the same models,\n"
      "interleaved), positions (cost of each module vs none), attention (softmax vs linear\n"
      "across --lengths), decode (ms/token with and without the KV cache), data (batch stream).\n"
      "The whole run takes about 15 minutes on 2 cores (25 with --compare-pytorch, more with\n"
      "each --pytorch-root: torch.compile compiles for a minute or two per figure).\n"
      "On a GPU (run.device=cuda, or auto on a machine with one) the machine section measures\n"
      "the GPU's matmul peak, each training figure adds its step time and peak GPU memory, and\n"
      "the reference runs on the GPU too (--python names a python with a CUDA PyTorch).",
      [](CLI::App& sub) {
        sub.add_option("overrides", g.overrides,
                       "key.path=value overrides applied to every bench config");
        sub.add_option(
            "--sections", g.sections,
            "comma-separated: machine,train,positions,attention,decode,data (default all)");
        sub.add_flag("--compare-pytorch", g.bench.compare_pytorch,
                     "run the PyTorch reference (scripts/bench_pytorch.py) next to each training "
                     "measurement: /usr/bin/python3's PyTorch, and each --pytorch-root's, in every "
                     "variant it has; the ratio is against the best of them");
        sub.add_option("--pytorch-root", g.bench.pytorch_roots,
                       "a Debian root with another PyTorch, run with chroot (repeatable; "
                       "scripts/pytorch_root.sh builds Debian 13's PyTorch 2.6)");
        sub.add_option("--pytorch-variants", g.bench.pytorch_variants,
                       "the reference's variants: eager (any PyTorch), sdpa (SDPA + fused AdamW), "
                       "compile (torch.compile of the eager model) and compile-sdpa "
                       "(torch.compile of the sdpa one), the last three on PyTorch >= 2")
            ->delimiter(',')
            ->check(CLI::IsMember({"eager", "sdpa", "compile", "compile-sdpa"}))
            ->capture_default_str();
        sub.add_option("--steps", g.bench.steps, "timed steps per measurement (after one warm-up)")
            ->capture_default_str()
            ->check(CLI::Range(1, 1000));
        sub.add_option("--rounds", g.bench.rounds,
                       "interleaved rounds of the training section (the best is reported)")
            ->capture_default_str()
            ->check(CLI::Range(1, 100));
        sub.add_option("--threads", g.bench.threads, "threads per measurement (0 = all cores)")
            ->capture_default_str()
            ->check(CLI::Range(0, 1024));
        sub.add_option("--lengths", g.bench_lengths,
                       "attention section: sequence lengths (default 256,512,1024,2048,4096,8192)");
        sub.add_option("--attention-tokens", g.bench.attention_tokens,
                       "attention section: tokens per step (batch = tokens / length)")
            ->capture_default_str()
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
        sub.add_option("--decode-lengths", g.decode_lengths,
                       "decode section: output lengths (default 64,256,1024,2048)");
        sub.add_option("--models", g.bench.models,
                       "train section: which bench configs to train (lm, mlm, translation; "
                       "lm-large is the GPU shape: d=1024, 12 layers, seq 2048)")
            ->delimiter(',')
            ->check(CLI::IsMember({"lm", "mlm", "translation", "lm-large"}))
            ->capture_default_str();
        sub.add_option("--precisions", g.bench.precisions, "train section: fp32, bf16 or both")
            ->delimiter(',')
            ->check(CLI::IsMember({"fp32", "bf16"}))
            ->capture_default_str();
        sub.add_option("--python", g.bench.python,
                       "the python whose PyTorch is the --compare-pytorch reference (on a GPU "
                       "machine usually the venv's python3)")
            ->capture_default_str();
        sub.add_option("--configs", g.bench.configs_dir,
                       "directory of lm.yaml, mlm.yaml, translation.yaml, lm-large.yaml")
            ->capture_default_str();
        sub.add_option("--out", g.bench.out_dir, "output directory")->capture_default_str();
        // The child side of one measurement (not for users).
        sub.add_option("--point", g.point)->group("");
        sub.add_option("--config", g.file)->group("");
        sub.add_option("--length", g.length)->group("");
      },
      cmd_bench);
}

}  // namespace

void register_all(CLI::App& app) {
  register_training(app);
  register_evaluation(app);
  register_translation(app);
  register_models(app);
  register_speed(app);
}

int run_selected(CLI::App& app) {
  for (auto& [sub, action] : g_actions) {
    if (!sub->parsed()) continue;
    if (sub->get_name() != "train" && dist::env_from_environment().size > 1)
      throw UserError("WORLD_SIZE > 1: only `ropelab train` runs data-parallel, not `" +
                      sub->get_name() +
                      "` (run it once, outside torchrun / launch; train prepares the data on "
                      "rank 0 itself)");
    return action();
  }
  std::cerr << app.help();
  return 2;
}

}  // namespace ropelab::cli
