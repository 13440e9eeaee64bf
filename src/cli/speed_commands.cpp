// The `ropelab` subcommands `bench-blas`, `bench` and `bench-data`: the benchmarks (lab/bench.h;
// docs in BENCHMARKS.md).
#include "cli/command.h"

#include <ATen/Parallel.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "config/loader.h"
#include "dist/world.h"
#include "lab/bench.h"
#include "util/error.h"
#include "util/log.h"
#include "util/platform.h"

namespace ropelab::cli {

namespace {

// This file's commands' options (the shared ones are cli::g's: command.h).
struct SpeedOpts {
  int size = 1024;
  int repeats = 10;
  int threads = 0;
  bool compare_generic = false;
  int64_t batches = 500;
  int64_t steps = 5;
  lab::BenchOptions bench;
  std::string point, sections, bench_lengths, decode_lengths, long_lengths, layout_lengths,
      context_lengths;
  std::vector<std::string> bench_models{"lm", "mlm", "translation"};
  std::vector<std::string> bench_precisions{"fp32", "bf16"};
  int64_t length = 0;
  int64_t window = 0;  // bench --point kernel: the sliding window
} speed_opts;

// The enumerators a list option names; an unknown name is a UserError listing the choices.
template <class E>
std::vector<E> enums_of(const std::vector<std::string>& names, const std::string& what) {
  std::vector<E> out;
  for (const auto& n : names) {
    try {
      out.push_back(config::enum_from<E>(n));
    } catch (const std::invalid_argument&) {
      std::string choices;
      for (const auto& c : config::enum_names<E>()) choices += (choices.empty() ? "" : ", ") + c;
      throw UserError("bench: unknown " + what + " '" + n + "' (" + choices + ")");
    }
  }
  return out;
}

int cmd_bench_blas() {
  platform::set_threads(speed_opts.threads);
  auto r = lab::measure_matmul(speed_opts.size, speed_opts.repeats);
  std::printf("matmul %dx%d, %d threads, BLAS core %s: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
              speed_opts.size, speed_opts.size, at::get_num_threads(),
              platform::blas_core().c_str(), r.fp32_gflops, r.bf16_gflops);
  std::fflush(stdout);
  if (speed_opts.compare_generic) {
    // The same measurement in a child forced onto OpenBLAS's generic kernel, for the ratio.
    std::string cmd = "OPENBLAS_CORETYPE=Prescott ROPELAB_KEEP_BLAS_CORE=1 " +
                      platform::shell_quote(platform::executable_path()) + " bench-blas --size " +
                      std::to_string(speed_opts.size) + " --repeats " +
                      std::to_string(speed_opts.repeats) + " --threads " +
                      std::to_string(speed_opts.threads);
    if (std::system(cmd.c_str()) != 0) throw UserError("bench-blas: the comparison run failed");
  }
  return 0;
}

int cmd_bench() {
  if (!speed_opts.point.empty()) {  // one measurement, in a child of the parent below
    lab::BenchPoint point;
    try {
      point = config::enum_from<lab::BenchPoint>(speed_opts.point);
    } catch (const std::invalid_argument&) {
      throw UserError("bench: unknown --point " + speed_opts.point +
                      " (matmul, train, decode, data, kernel)");
    }
    auto env = dist::env_from_environment();  // a point run as ranks (`launch -- bench --point`)
    if (env.grouped()) {
      log::set_rank(env.rank);
      dist::init(env);
    }
    auto out = lab::bench_point(point, g.file, g.overrides, speed_opts.bench.steps,
                                speed_opts.length, speed_opts.window);
    if (dist::world().is_main()) std::cout << out << std::endl;
    return 0;
  }
  auto& o = speed_opts.bench;
  o.overrides = g.overrides;
  std::vector<std::string> sections;
  std::stringstream ss(speed_opts.sections);
  for (std::string s; std::getline(ss, s, ',');)
    if (!s.empty()) sections.push_back(s);
  o.sections = enums_of<lab::BenchSection>(sections, "section");
  o.models = enums_of<lab::BenchModel>(speed_opts.bench_models, "--models entry");
  o.precisions = enums_of<config::Precision>(speed_opts.bench_precisions, "--precisions entry");
  if (!speed_opts.bench_lengths.empty())
    o.lengths = parse_lengths(speed_opts.bench_lengths, "--lengths");
  if (!speed_opts.decode_lengths.empty())
    o.decode_lengths = parse_lengths(speed_opts.decode_lengths, "--decode-lengths");
  if (!speed_opts.long_lengths.empty())
    o.long_lengths = parse_lengths(speed_opts.long_lengths, "--long-lengths");
  if (!speed_opts.context_lengths.empty())
    o.context_lengths = parse_lengths(speed_opts.context_lengths, "--context-lengths");
  if (!speed_opts.layout_lengths.empty())
    o.layout_lengths = parse_lengths(speed_opts.layout_lengths, "--layout-lengths");
  lab::run_bench(o);
  return 0;
}

int cmd_bench_data() {
  auto c = config::load_config(g.file, config::overrides_from_args(g.overrides));
  std::cout << lab::bench_data(c, speed_opts.batches, speed_opts.steps);
  return 0;
}

}  // namespace

// `bench-blas`, `bench-data` and `bench`.
void register_speed(CLI::App& app) {
  add(
      app, "bench-blas",
      "Measure fp32 and bf16 matmul throughput in this process (GFLOP/s). With\n"
      "--compare-generic, also in a child forced onto OpenBLAS's generic kernel, for the ratio.",
      [](CLI::App& sub) {
        sub.add_option("--size", speed_opts.size, "matrix size n (n x n)")
            ->check(CLI::Range(16, 16384));
        sub.add_option("--repeats", speed_opts.repeats, "timed repetitions")
            ->check(CLI::Range(1, 10000));
        sub.add_option("--threads", speed_opts.threads, "intra-op threads (0 = default)")
            ->check(CLI::Range(0, 1024));
        sub.add_flag("--compare-generic", speed_opts.compare_generic,
                     "also run OpenBLAS's generic kernel (what you get without ropelab's fix)");
      },
      cmd_bench_blas);
  add(
      app, "bench-data",
      "Measure the batch stream's throughput next to training throughput for a config\n"
      "(tokens/s, side by side in one process): data must never be the bottleneck.",
      [](CLI::App& sub) {
        add_config_and_overrides(sub);
        sub.add_option("--batches", speed_opts.batches, "batches drawn from the stream")
            ->capture_default_str();
        sub.add_option("--steps", speed_opts.steps, "training steps timed")->capture_default_str();
      },
      cmd_bench_data);
  add(
      app, "bench",
      "Benchmark training, position modules, attention kernels, decoding and the batch stream\n"
      "on the bench configs (configs/bench/: the LM, MLM and translation shapes), each figure\n"
      "measured in its own child process; prints a table and writes OUT/bench.md and\n"
      "OUT/bench.json. Sections: machine (matmul peak: in each dtype the faster of libtorch's\n"
      "matmul and the dense layers' gemm), train (tokens/s, model FLOP/s, MFU against that peak\n"
      "at fp32 and bf16; with --compare-pytorch the eager PyTorch reference of the same models,\n"
      "interleaved), positions (cost of each module vs none), attention (softmax vs linear\n"
      "across --lengths), long (batch-1 training from 2k to 32k tokens, RoPE/T5/ALiBi, with\n"
      "--compare-pytorch next to PyTorch's SDPA; a sliding-window layer against a global one),\n"
      "layouts (batch-1 training, every layer a sliding window of 256 against global, 512 to\n"
      "8192 tokens), decode (ms/token with and without the KV cache), data (batch stream).\n"
      "The default sections take about 17 minutes on 2 cores (25 with --compare-pytorch, more\n"
      "with each --pytorch-root: torch.compile compiles for a minute or two per figure); long is\n"
      "not among them (about 25 minutes on 2 cores, 10 GiB at 32k): name it in --sections.\n"
      "On a GPU (run.device=cuda, or auto on a machine with one) the machine section measures\n"
      "the GPU's matmul peak, each training figure adds its step time and peak GPU memory, and\n"
      "the reference runs on the GPU too (--python names a python with a CUDA PyTorch).",
      [](CLI::App& sub) {
        sub.add_option("overrides", g.overrides,
                       "key.path=value overrides applied to every bench config");
        sub.add_option(
            "--sections", speed_opts.sections,
            "comma-separated: machine,train,positions,attention,long,layouts,decode,data "
            "(default all but long)");
        sub.add_flag("--compare-pytorch", speed_opts.bench.compare_pytorch,
                     "run the PyTorch reference (scripts/bench_pytorch.py) next to each training "
                     "measurement: /usr/bin/python3's PyTorch, and each --pytorch-root's, in every "
                     "variant it has; the ratio is against the best of them");
        sub.add_option("--pytorch-root", speed_opts.bench.pytorch_roots,
                       "a Debian root with another PyTorch, run with chroot (repeatable; "
                       "scripts/pytorch_root.sh builds Debian 13's PyTorch 2.6)");
        sub.add_option("--pytorch-variants", speed_opts.bench.pytorch_variants,
                       "the reference's variants: eager (any PyTorch), sdpa (SDPA + fused AdamW), "
                       "compile (torch.compile of the eager model) and compile-sdpa "
                       "(torch.compile of the sdpa one), the last three on PyTorch >= 2")
            ->delimiter(',')
            ->check(CLI::IsMember({"eager", "sdpa", "compile", "compile-sdpa"}))
            ->capture_default_str();
        sub.add_option("--steps", speed_opts.bench.steps,
                       "timed steps per measurement (after one warm-up)")
            ->capture_default_str()
            ->check(CLI::Range(1, 1000));
        sub.add_option("--rounds", speed_opts.bench.rounds,
                       "interleaved rounds of the training section (the best is reported)")
            ->capture_default_str()
            ->check(CLI::Range(1, 100));
        sub.add_option("--threads", speed_opts.bench.threads,
                       "threads per measurement (0 = all cores)")
            ->capture_default_str()
            ->check(CLI::Range(0, 1024));
        sub.add_option("--lengths", speed_opts.bench_lengths,
                       "attention section: sequence lengths (default 256,512,1024,2048,4096,8192)");
        sub.add_option("--attention-tokens", speed_opts.bench.attention_tokens,
                       "attention section: tokens per step (batch = tokens / length)")
            ->capture_default_str()
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
        sub.add_option("--long-lengths", speed_opts.long_lengths,
                       "long section: sequence lengths (default 2048,4096,8192,16384,32768)");
        sub.add_option("--context-lengths", speed_opts.context_lengths,
                       "long section: lengths of the context-parallel comparison, RoPE on one "
                       "rank against 2 ranks a sequence with half the threads each (default "
                       "32768,65536; none: 0)");
        sub.add_option("--long-steps", speed_opts.bench.long_steps,
                       "long section: timed steps per point (after one warm-up)")
            ->capture_default_str()
            ->check(CLI::Range(1, 1000));
        sub.add_option("--long-window", speed_opts.bench.long_window,
                       "long section: the sliding window of the kernel comparison")
            ->capture_default_str()
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
        sub.add_option("--layout-lengths", speed_opts.layout_lengths,
                       "layouts section: sequence lengths (default 512,1024,2048,4096,8192)");
        sub.add_option("--layout-window", speed_opts.bench.layout_window,
                       "layouts section: the local layers' sliding window")
            ->capture_default_str()
            ->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
        sub.add_option("--decode-lengths", speed_opts.decode_lengths,
                       "decode section: output lengths (default 64,256,1024,2048)");
        sub.add_option("--models", speed_opts.bench_models,
                       "train section: which bench configs to train (lm, mlm, translation; "
                       "lm-large is the GPU shape: d=1024, 12 layers, seq 2048)")
            ->delimiter(',')
            ->check(CLI::IsMember(config::enum_names<lab::BenchModel>()))
            ->capture_default_str();
        sub.add_option("--precisions", speed_opts.bench_precisions,
                       "train section: fp32, bf16 or both")
            ->delimiter(',')
            ->check(CLI::IsMember(config::enum_names<config::Precision>()))
            ->capture_default_str();
        sub.add_option("--python", speed_opts.bench.python,
                       "the python whose PyTorch is the --compare-pytorch reference (on a GPU "
                       "machine usually the venv's python3)")
            ->capture_default_str();
        sub.add_option("--configs", speed_opts.bench.configs_dir,
                       "directory of lm.yaml, mlm.yaml, translation.yaml, lm-large.yaml")
            ->capture_default_str();
        sub.add_option("--out", speed_opts.bench.out_dir, "output directory")
            ->capture_default_str();
        // The child side of one measurement (not for users).
        sub.add_option("--point", speed_opts.point)->group("");
        sub.add_option("--config", g.file)->group("");
        sub.add_option("--length", speed_opts.length)->group("");
        sub.add_option("--window", speed_opts.window)->group("");
      },
      cmd_bench);
}

}  // namespace ropelab::cli
