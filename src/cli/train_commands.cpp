// The `ropelab` subcommands `prepare`, `train` and `launch`: a config to prepared data and a
// trained run (train/, dist/launch.h).
#include "cli/command.h"

#include <spdlog/spdlog.h>

#include <cstdio>
#include <string>
#include <vector>

#include "config/loader.h"
#include "data/prepare.h"
#include "dist/launch.h"
#include "dist/world.h"
#include "run/run.h"
#include "train/trainer.h"
#include "util/device.h"
#include "util/log.h"

namespace ropelab::cli {

namespace {

// This file's commands' options (the shared ones are cli::g's: command.h).
struct TrainOpts {
  bool restart = false;
  bool allow_config_change = false;
  dist::LaunchOptions launch;
} train_opts;

int cmd_prepare() {
  auto c = config::load_config(g.file, config::overrides_from_args(g.overrides));
  auto p = run::prepare(c);
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
  o.restart = train_opts.restart;
  o.allow_config_change = train_opts.allow_config_change;
  auto r = train::train(c, o);
  if (dist::world().is_main())
    std::printf("run: %s (%ld steps)\n", r.run_dir.c_str(), static_cast<long>(r.steps));
  return r.interrupted ? 143 : 0;
}

int cmd_launch() {
  // A bad config is reported once, before any rank starts (each rank would report it).
  const auto& a = train_opts.launch.args;
  if (a.size() >= 2 && a[0] == "train") {
    std::vector<std::string> overrides;
    for (size_t i = 2; i < a.size(); ++i)
      if (a[i].rfind("--", 0) != 0) overrides.push_back(a[i]);
    try {
      config::load_config(a[1], config::overrides_from_args(overrides));
    } catch (const UserError& e) {
      // The other machines' ranks would wait for this one's until the timeout: tell them.
      const auto& l = train_opts.launch;
      if (l.nnodes > 1 && l.port > 0 && !l.master_addr.empty()) {
        spdlog::info(
            "launch: the command is refused; telling the other nodes through the store "
            "at {}:{} (waiting up to {} s for it)",
            l.master_addr, l.port, l.timeout_s);
        dist::report_failure(
            l.master_addr, l.port,
            fmt::format("node {} (ranks {}..{}): its launcher refused the command ({})",
                        l.node_rank, l.node_rank * l.nproc, (l.node_rank + 1) * l.nproc - 1,
                        std::string(e.what()).substr(0, 200)),
            l.timeout_s);
      }
      throw;
    }
  }
  return dist::launch(train_opts.launch);
}

}  // namespace

// `prepare`, `train` and `launch`.
void register_training(CLI::App& app) {
  add(app, "prepare",
      "Make the data a config needs: export the built-in corpus (or read yours), train the\n"
      "tokenizer, and write HDF5 token datasets per split under data.prepared_dir. Stages that\n"
      "are up to date are skipped; nothing half-written is ever left in place.\n"
      "Your text may be plain lines or JSON lines (data.format, data.text_field), gzip- or\n"
      "zstd-compressed, in one file, a directory of shards or a glob. A language-model split\n"
      "is streamed in bounded memory, and a stopped or killed prepare resumes where it was.",
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
        sub.add_flag("--restart", train_opts.restart,
                     "start over in a run directory whose checkpoints are all damaged (or that "
                     "has metrics but no checkpoint), keeping its metrics and checkpoints "
                     "renamed .restart-N");
        sub.add_flag("--allow-config-change", train_opts.allow_config_change,
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
      "rank that dies makes the others exit within --timeout, naming it. Several machines: run\n"
      "it on each with --nnodes, --node-rank, --master-addr and --master-port (torchrun's static\n"
      "rendezvous), or under SLURM's srun (docs/distributed.md).\n"
      "With train.context_parallel=K, groups of K consecutive ranks share each sequence (ring\n"
      "attention, for sequences one process cannot hold); the groups are the data-parallel ranks.\n"
      "Example: ropelab launch --nproc 2 -- train configs/clm-small.yaml\n"
      "One sequence over 2 ranks: ropelab launch --nproc 2 -- train configs/clm-small.yaml\n"
      "  task.seq_len=65536 train.context_parallel=2\n"
      "Two machines: ropelab launch --nproc 2 --nnodes 2 --node-rank R --master-addr 10.0.0.1\n"
      "  --master-port 29500 -- train configs/clm-small.yaml   (R = 0 on 10.0.0.1, 1 on the other)",
      [](CLI::App& sub) {
        sub.add_option("--nproc", train_opts.launch.nproc, "ranks to start (default 2)")
            ->check(CLI::Range(1, 1024));
        sub.add_option("--port,--master-port", train_opts.launch.port,
                       "MASTER_PORT, the store's port on the master (default on one machine: a "
                       "free port; required with --nnodes > 1)")
            ->check(CLI::Range(1, 65535));
        sub.add_option("--nnodes", train_opts.launch.nnodes,
                       "machines, each running this command with its --node-rank (default 1)")
            ->check(CLI::Range(1, 65536));
        sub.add_option("--node-rank", train_opts.launch.node_rank,
                       "this machine's number, 0 to nnodes-1; its ranks are node_rank*nproc + "
                       "0..nproc-1 (default 0)")
            ->check(CLI::Range(0, 65535));
        sub.add_option("--master-addr", train_opts.launch.master_addr,
                       "the address of node 0, where rank 0 serves the store (default 127.0.0.1; "
                       "required with --nnodes > 1)");
        sub.add_option("--timeout", train_opts.launch.timeout_s,
                       "seconds a rank waits for the others in a collective before it reports "
                       "the one that is gone or hung (default 300)")
            ->check(CLI::Range(1.0, 1e6));
        sub.add_option("command", train_opts.launch.args,
                       "after --: the command each rank runs, e.g. -- "
                       "train CONFIG key=value ...")
            ->required();
      },
      cmd_launch);
}

}  // namespace ropelab::cli
