#include "train/trainer.h"

#include "config/layout.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/loader.h"
#include "data/prepare.h"
#include "dist/cpu_share.h"
#include "dist/threads.h"
#include "dist/world.h"
#include "model/init.h"
#include "run/run.h"
#include "tasks/loss.h"
#include "tasks/task.h"
#include "train/evaluator.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "util/device.h"
#include "util/dir_lock.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/gemm.h"
#include "util/log.h"
#include "util/platform.h"
#include "util/progress.h"
#include "util/random.h"
#include "util/signals.h"
#include "weights/checkpoint.h"
#include "weights/weights.h"

namespace ropelab::train {

namespace stdfs = std::filesystem;
using clock = std::chrono::steady_clock;

namespace {

double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

}  // namespace

// ---- setup: the optimizer

Trainer::Trainer(TrainerConfig cfg, const tasks::Task& task, model::Model model,
                 std::unique_ptr<data::BatchStream> train, torch::Device device)
    : cfg_(cfg),
      task_(task),
      world_(dist::world()),
      dev_(device),
      model_(std::move(model)),
      opt_(make_optimizer(*model_, cfg_.train)),
      train_stream_(std::move(train)) {
  if (train_stream_->batches_per_epoch() <= 0)
    throw UserError("the training split is smaller than one batch");
  st_.world = world_.size();
  st_.device = dev_;
}

Trainer::~Trainer() = default;

void Trainer::with_run(std::unique_ptr<Checkpointer> checkpointer,
                       std::unique_ptr<Evaluator> evaluator,
                       std::unique_ptr<MetricsLogger> logger) {
  ckpt_ = std::move(checkpointer);
  evaluator_ = std::move(evaluator);
  logger_ = std::move(logger);
}

double Trainer::lr_at(int64_t step) const { return learning_rate(cfg_.train, cfg_.d_model, step); }

// ---- one optimizer step

StepResult Trainer::train_step() {
  StepResult r;
  if (!world_.is_main())  // rank 0's generator state is in the checkpoint; the others' follow
    torch::manual_seed(util::mix64(
        util::mix64(static_cast<uint64_t>(cfg_.seed)) ^
        util::mix64(static_cast<uint64_t>(world_.rank()) << 32 ^ static_cast<uint64_t>(st_.step))));
  zero_grad_to_none(*opt_);
  const int64_t accum = cfg_.train.grad_accum;
  int64_t per_epoch = train_stream_->batches_per_epoch();
  std::vector<data::Batch> micro;
  double targets = 0, tokens = 0;  // of the whole step: every target weighs the same
  for (int64_t a = 0; a < accum; ++a) {
    int64_t m = st_.micro + a;
    micro.push_back(train_stream_->batch(m / per_epoch, m % per_epoch));
    targets += static_cast<double>(micro.back().num_targets);
    tokens += static_cast<double>(micro.back().num_tokens);
  }
  // The step's one agreement up front (host counts the batches carry): the targets and tokens
  // of all ranks, and whether one must stop.
  auto agreed =
      world_.sum({targets, tokens, signals::stop_requested() ? 1.0 : 0.0}, "starting a step");
  if (agreed[2] > 0) {
    r.stop = true;
    return r;
  }
  targets = agreed[0];
  st_.micro += accum;
  // The micro-batches: forward and backward only, nothing read back to the host.
  const bool bf16 = cfg_.train.precision == config::Precision::kBf16;
  r.sums = tasks::StepSums(dev_);
  try {
    for (const auto& b : micro) {
      tasks::Forward f;
      {
        device::Autocast ac(dev_, bf16);
        tasks::ExpectedGradScale scale(targets > 0 ? 1.0 / targets : 0.0);
        f = task_.forward(*model_, b.to(dev_));
      }
      if (targets > 0) (f.loss_sum / targets).backward();
      r.sums.add(f.sums);
    }
  } catch (const c10::OutOfMemoryError& e) {
    // The allocator's own message is a paragraph: its first sentence says how much was asked.
    std::string what = e.what_without_backtrace();
    what = what.substr(0, what.find('\n'));
    if (auto dot = what.find(". GPU"); dot != std::string::npos) what.resize(dot);
    throw UserError(fmt::format(
        "{}: out of {} memory in a training step at train.batch_size={} (micro-batches of {} "
        "tokens, train.grad_accum={}): lower train.batch_size and raise train.grad_accum, or "
        "shorten task.seq_len ({})",
        ckpt_ ? ckpt_->run_dir() : std::string("training"), dev_.is_cuda() ? "GPU" : "host",
        cfg_.train.batch_size, micro.empty() ? 0 : micro.front().num_tokens, accum, what));
  }
  sum_gradients();
  tasks::over_ranks(r.sums, dev_, "summing the step's losses");
  // Every rank now holds the same gradients and sums: the skip decision below is the same on
  // all of them. It is the step's one host read: the gradient norm and the loss sum.
  // The clipping's factor is applied by the optimizer as it reads the gradients (one pass fewer).
  auto clip = clip_factor(model_->parameters(), cfg_.train.clip);
  auto check = torch::stack({clip.norm.to(torch::kFloat64),
                             r.sums.tensor().select(0, static_cast<int64_t>(tasks::Sum::kNll))})
                   .to(torch::kCPU);
  r.grad_norm = check.data_ptr<double>()[0];
  const double nll = check.data_ptr<double>()[1];
  r.loss = nll / std::max(1.0, targets);
  if (!std::isfinite(nll) || !std::isfinite(r.grad_norm)) {
    ++st_.skipped;
    if (++consecutive_bad_ >= cfg_.train.max_bad_steps)
      throw UserError(fmt::format(
          "{}: {} consecutive steps with a non-finite loss or gradient (last at step {}); "
          "stopped, the last good checkpoint is kept. HINT: lower train.lr or raise "
          "train.schedule.warmup",
          ckpt_ ? ckpt_->run_dir() : std::string("training"), consecutive_bad_, st_.step + 1));
    spdlog::warn("step {}: non-finite loss/gradient, update skipped ({} so far)", st_.step + 1,
                 st_.skipped);
    return r;
  }
  consecutive_bad_ = 0;
  ++st_.step;
  const double lr = lr_at(st_.step);
  for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  opt_->step_scaled(clip.factor);
  st_.tokens += agreed[1];
  r.applied = true;
  return r;
}

void Trainer::sum_gradients() {
  if (!world_.distributed()) return;
  auto params = model_->parameters();
  std::vector<double> defined(params.size());
  for (size_t i = 0; i < params.size(); ++i) defined[i] = params[i].grad().defined() ? 1 : 0;
  defined = world_.sum(std::move(defined), "agreeing on the gradients");
  std::vector<torch::Tensor> grads;
  for (size_t i = 0; i < params.size(); ++i) {
    if (defined[i] == 0) continue;  // unused on every rank: stays undefined, as in one process
    if (!params[i].grad().defined()) params[i].mutable_grad() = torch::zeros_like(params[i]);
    grads.push_back(params[i].grad());
  }
  world_.sum_in_place(grads, "summing the gradients");
}

// ---- evaluation and checkpoints

void Trainer::evaluate(bool final_eval) {
  if (!evaluator_) return;
  auto t0 = clock::now();
  auto out = evaluator_->evaluate(*model_);
  if (!out) {
    stop_ = true;
    // A partial evaluation is not logged (it would be a wrong number, and could become the
    // "best"): the checkpoint saved on the way out marks it pending, and resume runs it.
    st_.eval_pending = true;
    spdlog::warn("step {}: evaluation stopped by a signal; it runs again on resume", st_.step);
    return;
  }
  st_.eval_pending = false;
  double secs = seconds_since(t0);
  if (logger_)
    logger_->valid(out->metrics, st_.step, st_.tokens, lr_at(std::max<int64_t>(1, st_.step)),
                   secs > 0 ? out->tokens / secs : 0.0);
  final_valid_ = out->metrics;
  spdlog::info("step {} valid {}{}", st_.step, tasks::format_metrics(out->metrics),
               final_eval ? " (final)" : "");
  evaluator_->track_best(out->metrics, st_);
}

void Trainer::save() {
  if (logger_) {
    logger_->sync();  // every metrics row up to this step is durable first
    // The log window's sums since the last train row: a resumed run's next row averages the
    // same steps as an uninterrupted run's.
    st_.log_window = logger_->window();
  }
  ckpt_->save(*model_, opt_.get(), st_);
}

// ---- the loop

void Trainer::follow_cpu_share(dist::CpuShare& share) {
  const auto change = share.poll();
  if (!change) return;
  platform::set_threads(change->threads);
  if (change->threads < st_.threads)
    spdlog::info(
        "step {}: other processes keep {:.1f} of this process's CPUs busy: {} thread{} "
        "(of {}) until they are free (run.share_cpus)",
        st_.step, change->others, change->threads, change->threads == 1 ? "" : "s", st_.threads);
  else if (change->threads == st_.threads)
    spdlog::info("step {}: the CPUs are free again: {} threads", st_.step, change->threads);
  else  // fewer busy than before, not none (a large machine)
    spdlog::info(
        "step {}: other processes keep {:.1f} of this process's CPUs busy: {} threads "
        "(of {})",
        st_.step, change->others, change->threads, st_.threads);
}

TrainResult Trainer::run() {
  if (!ckpt_) throw std::logic_error("Trainer::run needs a checkpointer (with_run)");
  TrainResult res;
  res.run_dir = ckpt_->run_dir();
  ckpt_->resume(*model_, opt_.get(), st_);
  const int64_t max_steps = cfg_.train.max_steps;
  // A finished run run again (ablate does that to collect results): its final validation row
  // is in metrics.h5 already; report it instead of evaluating and logging it twice. Rank 0's
  // decision.
  bool final_from_log = false;
  if (logger_) {
    logger_->open(st_.step, st_.tokens, st_.log_window);
    for (const auto& line : ckpt_->config_changes()) spdlog::warn("{}", line);
    if (st_.step >= max_steps && !st_.eval_pending) {
      final_valid_ = logger_->final_valid(st_.step);
      final_from_log = !final_valid_.empty();
    }
  }
  final_from_log = world_.sum({final_from_log ? 1.0 : 0.0}, "agreeing on the final row")[0] > 0;
  {  // every rank starts from rank 0's parameters and buffers
    std::vector<torch::Tensor> state = model_->parameters();
    for (const auto& b : model_->buffers()) state.push_back(b);
    world_.broadcast(state, "broadcasting rank 0's parameters");
  }
  model_->train();
  if (st_.eval_pending || (st_.step == 0 && cfg_.train.eval_every > 0))
    evaluate(st_.step >= max_steps);  // a stopped one, or the untrained baseline
  // tokens/s counts training time only; a finished run has no steps left and draws no bar
  if (logger_ && st_.step < max_steps) logger_->start(st_.step, st_.tokens);
  const bool share = cfg_.share_cpus && dev_.is_cpu();
  dist::CpuShare cpus = share ? dist::CpuShare::for_this_process(static_cast<int>(st_.threads))
                              : dist::CpuShare(1, 0, nullptr, nullptr);
  while (st_.step < max_steps && !stop_) {
    follow_cpu_share(cpus);
    auto s = train_step();
    if (s.stop) stop_ = true;
    if (!s.applied) continue;
    if (logger_) logger_->train_step(s.sums, st_.step, st_.tokens, lr_at(st_.step), s.grad_norm);
    bool last = st_.step == max_steps;
    if (logger_) logger_->pause();
    if (last || due(cfg_.train.eval_every)) evaluate(last);
    if (last || due(cfg_.train.checkpoint_every)) save();
    if (logger_) logger_->resume();
  }
  if (logger_) logger_->finish(st_.step >= max_steps);
  if (stop_) {
    spdlog::warn("stopping on signal at step {}: {}", st_.step,
                 world_.is_main() ? "saving a checkpoint" : "rank 0 saves the checkpoint");
    save();
    res.interrupted = true;
  } else if (final_from_log) {
    spdlog::info("step {} valid {} (final, from metrics.h5)", st_.step,
                 tasks::format_metrics(final_valid_));
  } else if (st_.step >= max_steps && final_valid_.empty() && evaluator_) {
    evaluate(true);  // resumed a finished run whose log lacks its final evaluation
  }
  res.final_valid = final_valid_;
  res.steps = st_.step;
  auto sel = task_.selection();
  res.selection_metric = sel.metric;
  res.higher_is_better = sel.higher_is_better;
  if (st_.best_step >= 0) res.best_selected = st_.best_valid;
  return res;
}

// ---- `ropelab train`

namespace {
// A run that starts from task.init_from: init_from.json in the run (the source, its checkpoint
// and step, each position change) and the line that logs and tables show ("yarn x4 from
// runs/ref (step 400)"); "" without init_from.
std::string record_origin(const std::string& run_dir, const config::Config& c, const run::Run& r) {
  if (c.task.init_from.empty()) return "";
  nlohmann::json changes = nlohmann::json::array();
  for (const auto& ch : r.position_changes)
    changes.push_back({{"key", ch.key}, {"before", ch.before}, {"after", ch.after}});
  const std::string what = weights::describe_changes(r.position_changes);
  const std::string step =
      r.pretrained_step >= 0 ? fmt::format(" (step {})", r.pretrained_step) : std::string();
  std::string line = (what.empty() ? "from " : what + " from ") + c.task.init_from + step;
  nlohmann::json j = {{"source", c.task.init_from},
                      {"checkpoint", r.pretrained_checkpoint},
                      {"step", r.pretrained_step},
                      {"position_changes", changes},
                      {"summary", line}};
  if (dist::world().is_main())
    fs::write_file_atomic((stdfs::path(run_dir) / "init_from.json").string(), j.dump(2) + "\n");
  return line;
}
}  // namespace

TrainResult train(const config::Config& config, const TrainOptions& o) {
  const auto& world = dist::world();
  const std::string run_dir = (stdfs::path(config.run.out_dir) / config.run.name).string();
  // One writer per run, before any data is read or written: a second `train` of this run (or
  // an `eval` writing into it) exits at once naming this process.
  fs::DirLock lock;
  run::Run r = run::open_new(config, run::DataUse::kPrepare, [&] {
    if (!world.is_main()) return;
    fs::make_dirs(run_dir);
    lock = fs::DirLock::acquire(run_dir, "train");
  });
  if (!r.pretrained.empty())
    spdlog::info("backbone from {}: {}", config.task.init_from, r.pretrained);
  const std::string origin = record_origin(run_dir, config, r);
  if (!r.position_changes.empty()) spdlog::info("positions changed: {}", origin);
  if (config.train.context_parallel > 1 && world.is_main())
    spdlog::info(
        "context parallel: {} ranks a sequence ({} tokens each), {} data-parallel "
        "group(s); attention runs around each group's ring",
        config.train.context_parallel, config.task.seq_len / config.train.context_parallel,
        world.size() / config.train.context_parallel);
  const config::Config& c = r.config;
  const int threads = r.threads;
  const torch::Device dev = r.device;
  auto& task = r.task;
  auto& model = r.model;
  data::Data& data = *r.data;
  int64_t n_params = 0;
  for (const auto& p : model->parameters()) n_params += p.numel();

  Trainer t(TrainerConfig::of(c), *task, model,
            task->stream(data.split("train"), true, c.task.seq_len, c.train.batch_size), dev);
  t.state().threads = threads;
  t.state().vocab = data.vocab_size();
  t.state().source_vocab = data.source_vocab_size();

  std::unique_ptr<Evaluator> evaluator;
  if (data.has_split("valid")) {
    auto valid = data.split("valid");
    auto stream = task->stream(valid, false, c.task.seq_len, c.train.batch_size);
    evaluator = std::make_unique<Evaluator>(
        *task, std::move(valid), std::move(stream),
        tasks::EvalOptions{c.train.eval_batches, dev,
                           c.train.precision == config::Precision::kBf16});
  }
  std::unique_ptr<MetricsLogger> logger;
  if (world.is_main()) {
    const std::string position = config::position_summary(c.model);
    const char* arch = config::to_string(c.model.arch);
    const char* kernel = config::to_string(c.model.attention.kernel);
    std::vector<MetricsLogger::Note> notes = {
        {false, platform::blas_summary()},
        {false,
         fmt::format("run {}: {} {} / {} positions / {} attention, {:.2f}M parameters, {} thread{} "
                     "({}), {}",
                     run_dir, task->name(), arch, position, kernel,
                     static_cast<double>(n_params) / 1e6, threads, threads == 1 ? "" : "s",
                     dist::choose_threads(c.run.threads).why, dev.str())}};
    if (std::holds_alternative<config::SinusoidalConfig>(c.model.position.opts) &&
        !c.model.scale_embeddings && c.model.init_std < 0.1)
      notes.push_back(
          {true, fmt::format("sinusoidal positions (amplitude 1) are added to token embeddings "
                             "initialised at std {}: the tokens are drowned and training may "
                             "stall; consider model.scale_embeddings=true",
                             c.model.init_std)});
    if (c.train.precision == config::Precision::kBf16 && dev.is_cpu() &&
        !util::bf16_gemm_native() && util::bf16_gemm_available())  // an AVX2 CPU: util/gemm.h
      notes.push_back({false,
                       "bf16 on a CPU without bf16 arithmetic (no AVX-512): its products run on "
                       "oneDNN's float32 sgemm, widened; a little faster than "
                       "train.precision=fp32 here (1.15x on the LM bench model) in about half its "
                       "memory"});
    if (c.train.precision == config::Precision::kBf16 && dev.is_cpu() && util::bf16_products_slow())
      notes.push_back({true,
                       "bf16 on a CPU without AVX-512 and without oneDNN's sgemm in this process "
                       "(ROPELAB_FP32_GEMM=blas, or a libtorch that hides oneDNN's symbols): the "
                       "matmuls run on libtorch's own bf16 mm, which has no fast kernel here "
                       "(libtorch 1.13: 27x slower than float32 on the LM bench model); consider "
                       "train.precision=fp32"});
    const tasks::Task& task_ref = *task;
    logger = std::make_unique<MetricsLogger>(
        run_dir,
        std::map<std::string, std::string>{{"config", config::dump(c)},
                                           {"position", position},
                                           {"task", task->name()},
                                           {"arch", arch},
                                           {"attention", kernel},
                                           {"name", c.run.name},
                                           {"params", std::to_string(n_params)},
                                           {"origin", r.position_changes.empty() ? "" : origin}},
        [&task_ref](const tasks::HostSums& s) { return task_ref.metrics(s); }, c.train.log_every,
        c.train.max_steps, std::move(notes), c.run.tensorboard);
  }
  t.with_run(std::make_unique<Checkpointer>(run_dir, c, c.train.keep_last, o.restart,
                                            o.allow_config_change),
             std::move(evaluator), std::move(logger));
  return t.run();
}

}  // namespace ropelab::train
