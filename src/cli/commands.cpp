#include "cli/commands.h"

#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <thread>

#include "config/loader.h"
#include "data/prepare.h"
#include "util/platform.h"
#include "util/sysinfo.h"

namespace ropelab::cli {

namespace {

struct Opts {
  std::string file;
  std::vector<std::string> overrides;
  bool schema = false;
  int size = 1024;
  int repeats = 10;
  int threads = 0;
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
  std::cout << config::dump(c);
  return 0;
}

int hw_threads(int64_t configured) {
  if (configured > 0) return static_cast<int>(configured);
  return std::max(1u, std::thread::hardware_concurrency());
}

int cmd_prepare() {
  auto c = config::load_config(g.file, config::overrides_from_args(g.overrides));
  auto p = data::prepare(c.data, hw_threads(c.run.threads));
  for (const auto& [split, path] : p.splits) std::printf("%s\t%s\n", split.c_str(), path.c_str());
  if (!p.tokenizer_path.empty()) std::printf("tokenizer\t%s\n", p.tokenizer_path.c_str());
  return 0;
}

int cmd_info() {
  std::cout << sysinfo::report();
  return 0;
}

int cmd_bench_blas() {
  platform::set_threads(g.threads);
  auto r = sysinfo::measure_matmul(g.size, g.repeats);
  std::printf("matmul %dx%d, %d threads, BLAS core %s: fp32 %.1f GFLOP/s, bf16 %.1f GFLOP/s\n",
              g.size, g.size, at::get_num_threads(), platform::blas_core().c_str(), r.fp32_gflops,
              r.bf16_gflops);
  return 0;
}

void add_config_and_overrides(CLI::App& sub) {
  sub.add_option("config", g.file, "YAML config file")->required();
  sub.add_option("overrides", g.overrides,
                 "key.path=value overrides, applied after the file (e.g. model.d_model=128)");
}

}  // namespace

void register_all(CLI::App& app) {
  add(app, "prepare",
      "Make the data a config needs: export the built-in corpus (or read yours), train the\n"
      "tokenizer, and write HDF5 token datasets per split under data.prepared_dir. Stages that\n"
      "are up to date are skipped; nothing half-written is ever left in place.",
      add_config_and_overrides, cmd_prepare);
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
  add(
      app, "bench-blas",
      "Measure fp32 and bf16 matmul throughput in this process (GFLOP/s). Run it with\n"
      "ROPELAB_KEEP_BLAS_CORE=1 to see OpenBLAS's slow default kernel for comparison.",
      [](CLI::App& sub) {
        sub.add_option("--size", g.size, "matrix size n (n x n)")->check(CLI::Range(16, 16384));
        sub.add_option("--repeats", g.repeats, "timed repetitions")->check(CLI::Range(1, 10000));
        sub.add_option("--threads", g.threads, "intra-op threads (0 = default)")
            ->check(CLI::Range(0, 1024));
      },
      cmd_bench_blas);
}

int run_selected(CLI::App& app) {
  for (auto& [sub, action] : g_actions)
    if (sub->parsed()) return action();
  std::cerr << app.help();
  return 2;
}

}  // namespace ropelab::cli
