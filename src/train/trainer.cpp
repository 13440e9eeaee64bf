#include "train/trainer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/loader.h"
#include "data/prepare.h"
#include "dist/world.h"
#include "model/init.h"
#include "tasks/task.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/optim.h"
#include "train/schedule.h"
#include "train/weights.h"
#include "util/device.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/platform.h"
#include "util/progress.h"
#include "util/random.h"
#include "util/signals.h"

namespace ropelab::train {

namespace stdfs = std::filesystem;
using clock = std::chrono::steady_clock;

int apply_thread_policy(const config::RunConfig& r) {
  // 0 = the machine's cores, shared by the ranks of a data-parallel run on this machine.
  int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  int n =
      r.threads > 0 ? static_cast<int>(r.threads) : std::max(1, cores / dist::world().local_size());
  platform::set_threads(n);
  return n;
}

namespace {

double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

// The config sections a checkpoint depends on: changing them makes resuming meaningless.
std::map<std::string, std::string> architecture_keys(const config::Config& c) {
  std::map<std::string, std::string> out;
  for (const auto& [k, v] : config::flat_keys(c))
    if (k.rfind("model.", 0) == 0 || k.rfind("task.", 0) == 0 || k.rfind("data.", 0) == 0 ||
        k == "run.seed")
      out[k] = v;
  return out;
}

std::string hash_of(const std::map<std::string, std::string>& keys) {
  std::string s;
  for (const auto& [k, v] : keys) s += k + "=" + v + "\n";
  return fs::hex64(fs::hash_bytes(s));
}

// Rank 0 prepares the data (the others wait: preparing twice would race on the same files);
// then every rank opens it.
data::Data shared_data(const config::DataConfig& d, int threads) {
  const auto& w = dist::world();
  if (w.is_main()) {
    data::Data out(d, threads, /*prepare=*/true);
    w.mark_done("data");
    return out;
  }
  w.wait_for_main("data", "waiting for rank 0 to prepare the data");
  return data::Data(d, threads, /*prepare=*/false);
}

std::string fmt_metrics(const std::map<std::string, double>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += fmt::format("{}{} {:.4g}", s.empty() ? "" : " ", k, v);
  return s;
}

class Trainer {
 public:
  // `pretrained`: the backbone of task.init_from (nullptr: from scratch).
  Trainer(const config::Config& c, const Pretrained* pretrained, const TrainOptions& o);
  TrainResult run();

 private:
  struct StepResult {
    bool applied = false;  // false: non-finite loss or gradient, update skipped
    bool stop = false;     // a rank was asked to stop (signal): nothing was done
    double grad_norm = 0;
    tasks::StepSums sums;  // on the device, all ranks'
  };
  void resume();
  // No usable checkpoint in a run directory with results: refuse, or with --restart keep them
  // under new names.
  void refuse_or_set_aside();
  StepResult train_step();
  void evaluate(bool final_eval);
  void save();
  void log_train(const StepResult& s, double lr);
  bool due(int64_t every) const { return every > 0 && st_.step % every == 0; }
  // Sums every rank's gradients (the ones defined on any rank), so each holds the gradient of
  // the global batch: the loss was divided by the global number of targets.
  void sum_gradients();

  const config::Config c_;
  const TrainOptions opts_;
  const dist::World& world_;
  TrainResult res_;
  int threads_;
  torch::Device dev_;
  data::Data data_;
  std::unique_ptr<tasks::Task> task_;
  model::Model model_{nullptr};
  std::unique_ptr<torch::optim::AdamW> opt_;
  std::optional<data::TokenDataset> valid_ds_;
  std::unique_ptr<data::BatchStream> train_stream_, valid_stream_;
  int64_t n_params_ = 0;
  TrainState st_;
  std::unique_ptr<MetricsLog> metrics_;
  std::unique_ptr<Progress> bar_;
  // Training-log window: the applied steps' sums, on the device until the row is logged.
  tasks::StepSums window_;
  clock::time_point t_log_;
  double tokens_at_log_ = 0;
  int64_t consecutive_bad_ = 0;
  bool final_from_log_ = false;  // a finished run run again: final_valid read from its log
  bool stop_ = false;            // every rank agreed to stop on a signal
};

// ---- setup: data, task, model, optimizer

Trainer::Trainer(const config::Config& c, const Pretrained* pretrained, const TrainOptions& o)
    : c_(c),
      opts_(o),
      world_(dist::world()),
      threads_(apply_thread_policy(c.run)),
      dev_(device::resolve(c.run.device)),
      data_(shared_data(c.data, threads_)) {
  res_.run_dir = (stdfs::path(c.run.out_dir) / c.run.name).string();
  if (world_.is_main()) fs::make_dirs(res_.run_dir);
  task_ =
      tasks::make_task(c, data_.vocab_size(), &data_.target_tokenizer(), data_.source_vocab_size());
  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  model_ = task_->build_model();
  if (pretrained != nullptr) {
    auto keys = init_from_pretrained(*model_, c, data_.vocab_size(), *pretrained);
    spdlog::info("backbone from {}: {}", c.task.init_from, keys.str());
  }
  model_->to(dev_);
  opt_ = std::make_unique<torch::optim::AdamW>(make_optimizer(*model_, c.train));
  for (const auto& p : model_->parameters()) n_params_ += p.numel();
  train_stream_ = task_->stream(data_.split("train"), true, c.task.seq_len, c.train.batch_size);
  if (data_.has_split("valid")) {
    valid_ds_ = data_.split("valid");
    valid_stream_ = task_->stream(*valid_ds_, false, c.task.seq_len, c.train.batch_size);
  }
  if (train_stream_->batches_per_epoch() <= 0)
    throw UserError("the training split is smaller than one batch");
  st_.threads = threads_;
  st_.world = world_.size();
  st_.vocab = data_.vocab_size();
  st_.source_vocab = data_.source_vocab_size();
  st_.device = dev_;
}

// ---- resume (or start): checkpoint, config check, logs

void Trainer::resume() {
  auto arch = architecture_keys(c_);
  st_.config_hash = hash_of(arch);
  std::string cfg_path = (stdfs::path(res_.run_dir) / "config.yaml").string();
  const bool main = world_.is_main();
  // Rank 0 checks the run directory (and with --restart sets results aside); then the other
  // ranks load the checkpoint it resumes from.
  if (!main) world_.wait_for_main("resume", "waiting for rank 0 to open the run directory");
  if (auto ck = latest_checkpoint(res_.run_dir)) {
    if (main) {
      auto before = architecture_keys(config::load_config(cfg_path));
      std::string diffs;
      for (const auto& [k, v] : arch)
        if (before[k] != v)
          diffs += fmt::format("{}{}: {} -> {}", diffs.empty() ? "" : "; ", k, before[k], v);
      if (!diffs.empty())
        throw UserError(res_.run_dir + ": holds a run with a different configuration (" + diffs +
                        "); HINT: choose another run.name, or delete the run directory");
    }
    int64_t threads = st_.threads;
    st_ = load_checkpoint(*ck, *model_, opt_.get());
    if (st_.world != world_.size())
      throw UserError(fmt::format(
          "{}: was trained by {} data-parallel rank(s), this run has {}: the global batch and "
          "the data order would change. HINT: resume with the same number of ranks (ropelab "
          "launch --nproc {}), or train a new run",
          res_.run_dir, st_.world, world_.size(), st_.world));
    st_.config_hash = hash_of(arch);
    st_.vocab = data_.vocab_size();
    st_.source_vocab = data_.source_vocab_size();
    st_.device = dev_;
    if (st_.threads != threads)
      spdlog::warn(
          "resuming with {} threads (the run used {}): results may differ in the last bits",
          threads, st_.threads);
    st_.threads = threads;
    spdlog::info("resuming {} from step {}", res_.run_dir, st_.step);
  } else if (main) {
    refuse_or_set_aside();
  }
  if (main) {
    fs::write_file_atomic(cfg_path, config::dump(c_));
    world_.mark_done("resume");
  }
  auto at = world_.sum({static_cast<double>(st_.step), main ? static_cast<double>(st_.step) : 0},
                       "agreeing on the checkpoint to resume");
  if (at[0] != at[1] * world_.size())
    throw UserError(fmt::format(
        "{}: rank {} resumes from step {}, but not every rank does (rank 0: step {:.0f}); every "
        "rank must see the same run directory. HINT: put run.out_dir on a filesystem all "
        "machines share",
        res_.run_dir, world_.rank(), st_.step, at[1]));
  if (!main) return;  // logs and metrics are rank 0's
  log::add_log_file((stdfs::path(res_.run_dir) / "train.log").string());

  const char* position = c_.model.position.type();
  const char* arch_name = config::to_string(c_.model.arch);
  const char* kernel = config::to_string(c_.model.attention.kernel);
  if (st_.step >= c_.train.max_steps && !st_.eval_pending) {
    // A finished run run again (ablate does that to collect results): its final validation
    // row is in metrics.h5 already. Report that row instead of evaluating and logging it twice.
    std::string path = (stdfs::path(res_.run_dir) / "metrics.h5").string();
    try {
      auto valid = fs::exists(path) ? read_metrics(path, "valid")
                                    : std::map<std::string, std::vector<double>>{};
      const auto& steps = valid["step"];
      for (size_t i = steps.size(); i-- > 0;) {
        if (static_cast<int64_t>(steps[i]) != st_.step) continue;
        for (const auto& [k, v] : valid)
          if (k != "step" && k != "tokens" && k != "lr" && k != "tokens_per_s" && i < v.size())
            res_.final_valid[k] = v[i];
        final_from_log_ = !res_.final_valid.empty();
        break;
      }
    } catch (const UserError&) {
      res_.final_valid.clear(), final_from_log_ = false;  // unreadable: evaluate again
    }
  }
  metrics_ = std::make_unique<MetricsLog>(
      res_.run_dir,
      std::map<std::string, std::string>{{"config", config::dump(c_)},
                                         {"position", position},
                                         {"task", task_->name()},
                                         {"arch", arch_name},
                                         {"attention", kernel},
                                         {"name", c_.run.name},
                                         {"params", std::to_string(n_params_)}},
      st_.step);
  spdlog::info("{}", platform::blas_summary());
  spdlog::info("run {}: {} {} / {} positions / {} attention, {:.2f}M parameters, {} threads, {}",
               res_.run_dir, task_->name(), arch_name, position, kernel,
               static_cast<double>(n_params_) / 1e6, threads_, dev_.str());
  if (std::holds_alternative<config::SinusoidalConfig>(c_.model.position.opts) &&
      !c_.model.scale_embeddings && c_.model.init_std < 0.1)
    spdlog::warn(
        "sinusoidal positions (amplitude 1) are added to token embeddings initialised at "
        "std {}: the tokens are drowned and training may stall; consider "
        "model.scale_embeddings=true",
        c_.model.init_std);
}

void Trainer::refuse_or_set_aside() {
  const stdfs::path dir(res_.run_dir);
  auto damaged = damaged_checkpoints(res_.run_dir);
  std::vector<std::string> results;
  for (const char* f : {"metrics.h5", "metrics.jsonl"})
    if (stdfs::exists(dir / f)) results.push_back(f);
  if (damaged.empty() && results.empty()) return;  // a new run
  if (!opts_.restart) {
    std::string why;
    for (const auto& [name, problem] : damaged)
      why += (why.empty() ? "" : "; ") + name + ": " + problem;
    throw UserError(
        res_.run_dir + ": " +
        (damaged.empty() ? "has results (" + results[0] + ") but no checkpoint"
                         : "no checkpoint can be resumed (" + why + ")") +
        "; nothing was changed. HINT: `ropelab train ... --restart` starts over and keeps the "
        "old files renamed .restart-N, or choose another run.name");
  }
  int n = 1;
  auto aside = [&](const std::string& f) {
    auto p = stdfs::path(f);
    return dir / (p.stem().string() + ".restart-" + std::to_string(n) + p.extension().string());
  };
  auto taken = [&] {
    for (const char* f : {"metrics.h5", "metrics.jsonl", "checkpoints"})
      if (stdfs::exists(aside(f))) return true;
    return false;
  };
  while (taken()) ++n;
  for (const char* f : {"metrics.h5", "metrics.jsonl", "checkpoints"})
    if (stdfs::exists(dir / f)) {
      stdfs::rename(dir / f, aside(f));
      spdlog::warn("--restart: kept {} as {}", (dir / f).string(), aside(f).string());
    }
}

// ---- one optimizer step

Trainer::StepResult Trainer::train_step() {
  StepResult r;
  if (!world_.is_main())  // rank 0's generator state is in the checkpoint; the others' follow
    torch::manual_seed(util::mix64(
        util::mix64(static_cast<uint64_t>(c_.run.seed)) ^
        util::mix64(static_cast<uint64_t>(world_.rank()) << 32 ^ static_cast<uint64_t>(st_.step))));
  zero_grad_to_none(*opt_);
  int64_t per_epoch = train_stream_->batches_per_epoch();
  std::vector<data::Batch> micro;
  double targets = 0, tokens = 0;  // of the whole step: every target weighs the same
  for (int64_t a = 0; a < c_.train.grad_accum; ++a) {
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
  st_.micro += c_.train.grad_accum;
  // The micro-batches: forward and backward only, nothing read back to the host.
  r.sums = tasks::StepSums(dev_);
  for (const auto& b : micro) {
    tasks::Forward f;
    {
      device::Autocast ac(dev_, c_.train.precision == config::Precision::kBf16);
      f = task_->forward(*model_, b.to(dev_));
    }
    if (targets > 0) (f.loss_sum / targets).backward();
    r.sums.add(f.sums);
  }
  sum_gradients();
  tasks::over_ranks(r.sums, dev_, "summing the step's losses");
  // Every rank now holds the same gradients and sums: the skip decision below is the same on
  // all of them. It is the step's one host read: the gradient norm and the loss sum.
  auto norm = clip_grad_norm(model_->parameters(), c_.train.clip);
  auto check = torch::stack({norm.to(torch::kFloat64),
                             r.sums.tensor().select(0, static_cast<int64_t>(tasks::Sum::kNll))})
                   .to(torch::kCPU);
  r.grad_norm = check.data_ptr<double>()[0];
  if (!std::isfinite(check.data_ptr<double>()[1]) || !std::isfinite(r.grad_norm)) {
    ++st_.skipped;
    if (++consecutive_bad_ >= c_.train.max_bad_steps)
      throw UserError(fmt::format(
          "{}: {} consecutive steps with a non-finite loss or gradient (last at step {}); "
          "stopped, the last good checkpoint is kept. HINT: lower train.lr or raise "
          "train.schedule.warmup",
          res_.run_dir, consecutive_bad_, st_.step + 1));
    spdlog::warn("step {}: non-finite loss/gradient, update skipped ({} so far)", st_.step + 1,
                 st_.skipped);
    return r;
  }
  consecutive_bad_ = 0;
  ++st_.step;
  double lr = learning_rate(c_.train, c_.model.d_model, st_.step);
  for (auto& g : opt_->param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
  opt_->step();
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

// ---- logging, evaluation, checkpoints

void Trainer::log_train(const StepResult& s, double lr) {
  window_.add(s.sums);
  if (st_.step % c_.train.log_every != 0 && st_.step != c_.train.max_steps) return;
  double secs = seconds_since(t_log_);
  double tps = secs > 0 ? (st_.tokens - tokens_at_log_) / secs : 0.0;
  auto row = task_->metrics(window_.read());  // loss and the task's metrics over the window
  double loss = row["loss"];
  row["step"] = static_cast<double>(st_.step);
  row["tokens"] = st_.tokens;
  row["lr"] = lr;
  row["grad_norm"] = s.grad_norm;
  row["tokens_per_s"] = tps;
  if (metrics_) metrics_->log("train", row);
  if (bar_)
    bar_->update(st_.step, fmt::format("loss {:.4f} lr {:.2e} {:.0f} tok/s", loss, lr, tps));
  window_ = tasks::StepSums{};
  t_log_ = clock::now();
  tokens_at_log_ = st_.tokens;
}

void Trainer::evaluate(bool final_eval) {
  if (!valid_stream_) return;
  auto t0 = clock::now();
  tasks::EvalOptions o{c_.train.eval_batches, dev_, c_.train.precision == config::Precision::kBf16};
  auto out = task_->evaluate(*model_, *valid_ds_, *valid_stream_, o);
  if (world_.sum({signals::stop_requested() ? 1.0 : 0.0}, "agreeing on a stop")[0] > 0) {
    stop_ = true;
    // A partial evaluation is not logged (it would be a wrong number, and could become the
    // "best"): the checkpoint saved on the way out marks it pending, and resume runs it.
    st_.eval_pending = true;
    spdlog::warn("step {}: evaluation stopped by a signal; it runs again on resume", st_.step);
    return;
  }
  st_.eval_pending = false;
  double secs = seconds_since(t0);
  auto row = out.metrics;
  row["step"] = static_cast<double>(st_.step);
  row["tokens"] = st_.tokens;
  row["lr"] = learning_rate(c_.train, c_.model.d_model, std::max<int64_t>(1, st_.step));
  row["tokens_per_s"] = secs > 0 ? out.tokens / secs : 0.0;  // evaluation speed
  if (metrics_) {
    metrics_->log("valid", row);
    metrics_->flush();
  }
  res_.final_valid = out.metrics;
  spdlog::info("step {} valid {}{}", st_.step, fmt_metrics(out.metrics),
               final_eval ? " (final)" : "");
  auto sel = task_->selection();
  double v = out.metrics[sel.metric];
  if (st_.best_step < 0 || (sel.higher_is_better ? v > st_.best_valid : v < st_.best_valid)) {
    st_.best_valid = v;
    st_.best_step = st_.step;
  }
}

void Trainer::save() {
  if (world_.is_main()) {
    metrics_->sync();  // every metrics row up to this step is durable before the checkpoint is
    save_checkpoint(res_.run_dir, *model_, opt_.get(), st_, c_.train.keep_last);
  }
  // Every rank leaves only once the checkpoint is committed (if rank 0 fails to write it, it
  // exits with the error, and the others report it gone).
  world_.barrier("committing a checkpoint");
}

// ---- the loop

TrainResult Trainer::run() {
  resume();
  {  // every rank starts from rank 0's parameters and buffers
    std::vector<torch::Tensor> state = model_->parameters();
    for (const auto& b : model_->buffers()) state.push_back(b);
    world_.broadcast(state, "broadcasting rank 0's parameters");
  }
  // Whether this finished run's final validation row is read from its log: rank 0's decision.
  final_from_log_ = world_.sum({final_from_log_ ? 1.0 : 0.0}, "agreeing on the final row")[0] > 0;
  model_->train();
  if (world_.is_main()) bar_ = std::make_unique<Progress>("train", c_.train.max_steps, "step");
  if (st_.eval_pending || (st_.step == 0 && c_.train.eval_every > 0))
    evaluate(st_.step >= c_.train.max_steps);  // a stopped one, or the untrained baseline
  t_log_ = clock::now();                       // tokens/s counts training time only
  tokens_at_log_ = st_.tokens;
  while (st_.step < c_.train.max_steps && !stop_) {
    auto s = train_step();
    if (s.stop) stop_ = true;
    if (!s.applied) continue;
    log_train(s, learning_rate(c_.train, c_.model.d_model, st_.step));
    bool last = st_.step == c_.train.max_steps;
    auto t_pause = clock::now();
    if (last || due(c_.train.eval_every)) evaluate(last);
    if (last || due(c_.train.checkpoint_every)) save();
    t_log_ += clock::now() - t_pause;  // tokens/s counts training time only
  }
  if (bar_) bar_->finish();
  if (stop_) {
    spdlog::warn("stopping on signal at step {}: {}", st_.step,
                 world_.is_main() ? "saving a checkpoint" : "rank 0 saves the checkpoint");
    save();
    res_.interrupted = true;
  } else if (final_from_log_) {
    spdlog::info("step {} valid {} (final, from metrics.h5)", st_.step,
                 fmt_metrics(res_.final_valid));
  } else if (st_.step >= c_.train.max_steps && res_.final_valid.empty() && valid_stream_) {
    evaluate(true);  // resumed a finished run whose log lacks its final evaluation
  }
  if (metrics_) metrics_->flush();
  res_.steps = st_.step;
  auto sel = task_->selection();
  res_.selection_metric = sel.metric;
  res_.higher_is_better = sel.higher_is_better;
  if (st_.best_step >= 0) res_.best_selected = st_.best_valid;
  return res_;
}

}  // namespace

TrainResult train(const config::Config& config, const TrainOptions& o) {
  signals::install_handlers();
  config::Config c = config;
  std::optional<Pretrained> pretrained;
  if (!c.task.init_from.empty()) {
    pretrained = read_pretrained(c.task.init_from);
    check_pretrained_architecture(c, *pretrained);
    use_pretrained_tokenizer(c, *pretrained);
  }
  Trainer t(c, pretrained ? &*pretrained : nullptr, o);
  struct DropLog {
    ~DropLog() { log::drop_log_files(); }
  } drop_log;  // also when training throws
  return t.run();
}

// ---- evaluation of a finished run

std::vector<std::string> rope_scaling_overrides(const std::string& spec) {
  auto colon = spec.find(':');
  std::string method = spec.substr(0, colon);
  const std::vector<std::string> methods = {"linear", "ntk", "dynamic", "yarn", "llama3"};
  const std::string usage = "--rope-scaling '" + spec +
                            "': expected METHOD:FACTOR, METHOD one of linear, ntk, dynamic, "
                            "yarn, llama3 (e.g. yarn:4)";
  if (method == "longrope")
    throw UserError(
        "--rope-scaling: longrope needs per-pair factors; set "
        "model.position.scaling in the run's config instead");
  if (colon == std::string::npos ||
      std::find(methods.begin(), methods.end(), method) == methods.end())
    throw UserError(usage);
  std::string factor = spec.substr(colon + 1);
  char* end = nullptr;
  double f = std::strtod(factor.c_str(), &end);
  if (factor.empty() || *end != '\0' || !(f >= 1.0) || !std::isfinite(f))
    throw UserError(usage + "; the factor must be a number >= 1");
  return {"model.position.scaling.type=" + method, "model.position.scaling.factor=" + factor};
}

std::string rope_scaling_tag(const std::string& spec) {
  std::string t = "rope-" + spec;
  std::replace(t.begin(), t.end(), ':', '-');
  return t;
}

EvalReport evaluate_run(const std::string& run_dir, const std::string& split,
                        const std::vector<int64_t>& lengths, int64_t max_tokens, bool use_best,
                        const std::string& rope_scaling) {
  if (!fs::exists((stdfs::path(run_dir) / "config.yaml").string()))
    throw UserError(run_dir + ": not a ropelab run (no config.yaml)");
  std::vector<std::string> overrides;
  if (!rope_scaling.empty()) {
    overrides = rope_scaling_overrides(rope_scaling);
    auto trained = config::load_config((stdfs::path(run_dir) / "config.yaml").string());
    if (!std::holds_alternative<config::RopeConfig>(trained.model.position.opts))
      throw UserError(run_dir + ": --rope-scaling needs a RoPE model (its position module is " +
                      trained.model.position.type() + ")");
  }
  auto rm = load_run_model(run_dir, use_best, overrides);
  const config::Config& c = rm.config;
  apply_thread_policy(c.run);
  torch::Device dev = device::resolve(c.run.device);
  data::Data data(c.data, 1, /*prepare=*/false);
  if (!data.has_split(split)) throw UserError(run_dir + ": its data has no '" + split + "' split");
  auto ds = data.split(split);
  auto task =
      tasks::make_task(c, data.vocab_size(), &data.target_tokenizer(), data.source_vocab_size());
  rm.model->to(dev);
  tasks::EvalOptions o{0, dev, c.train.precision == config::Precision::kBf16, /*full=*/true};

  EvalReport r;
  r.run_dir = run_dir;
  r.checkpoint = rm.checkpoint;
  r.split = split;
  r.rope_scaling = rope_scaling;
  r.train_seq_len = c.task.seq_len;
  auto full = task->evaluate(*rm.model, ds,
                             *task->stream(ds, false, c.task.seq_len, c.train.batch_size), o);
  const std::string stopped = "evaluation of " + run_dir;
  const std::string kept = "nothing written (a partial evaluation would be wrong)";
  signals::throw_if_stopped(stopped, kept);
  r.metrics = full.metrics;
  o.full = false;  // the length rows: likelihood only
  int64_t max_len = rm.model->backbone->position().max_len();
  for (int64_t L : lengths) {
    LengthRow row;
    row.length = L;
    if (max_len > 0 && L > max_len) {
      row.applicable = false;
      r.lengths.push_back(row);
      continue;
    }
    // The same token budget at every length: fewer, longer sequences.
    int64_t batch = std::max<int64_t>(1, c.train.batch_size * c.task.seq_len / L);
    std::unique_ptr<data::BatchStream> s;
    try {
      s = task->stream(ds, false, L, batch);
    } catch (const UserError& e) {
      row.applicable = false;  // the split is shorter than one window of this length
      r.lengths.push_back(row);
      continue;
    }
    o.max_batches = std::max<int64_t>(1, max_tokens / (batch * L));
    auto out = task->evaluate(*rm.model, ds, *s, o);
    signals::throw_if_stopped(stopped, kept);
    row.metrics = out.metrics;
    row.tokens = static_cast<int64_t>(out.tokens);
    r.lengths.push_back(row);
  }
  if (!full.predictions_file.empty()) {
    // The GLUE leaderboard layout: a header, then one `index<TAB>prediction` row per example.
    std::string tsv = "index\tprediction\n";
    for (size_t i = 0; i < full.predictions.size(); ++i)
      tsv += fmt::format("{}\t{}\n", i, full.predictions[i]);
    auto dir = stdfs::path(run_dir) / "predictions" / split;
    fs::make_dirs(dir.string());
    r.predictions_path = (dir / full.predictions_file).string();
    fs::write_file_atomic(r.predictions_path, tsv);
  }
  nlohmann::json j;
  j["checkpoint"] = r.checkpoint;
  j["split"] = split;
  if (!rope_scaling.empty()) j["rope_scaling"] = rope_scaling;
  j["metrics"] = r.metrics;
  if (!r.predictions_path.empty()) j["predictions"] = r.predictions_path;
  for (const auto& row : r.lengths)
    j["lengths"].push_back({{"length", row.length},
                            {"applicable", row.applicable},
                            {"metrics", row.metrics},
                            {"tokens", row.tokens}});
  std::string name = "eval-" + split +
                     (rope_scaling.empty() ? "" : "-" + rope_scaling_tag(rope_scaling)) + ".json";
  fs::write_file_atomic((stdfs::path(run_dir) / name).string(), j.dump(2) + "\n");
  return r;
}

std::string format_eval(const EvalReport& r) {
  std::string s = fmt::format("run {} ({} split, {}{})\n", r.run_dir, r.split,
                              stdfs::path(r.checkpoint).filename().string(),
                              r.rope_scaling.empty() ? "" : ", RoPE scaling " + r.rope_scaling);
  s += fmt::format("  {}\n",
                   r.metrics.empty() ? "(unlabeled split: no metrics)" : fmt_metrics(r.metrics));
  if (!r.predictions_path.empty()) s += fmt::format("  predictions: {}\n", r.predictions_path);
  if (r.lengths.empty()) return s;
  // Columns: whatever metrics the task reported, "loss" first.
  std::vector<std::string> names = {"loss"};
  for (const auto& [k, v] : r.metrics)
    if (k != "loss") names.push_back(k);
  s += fmt::format("\nlength extrapolation (trained at {} tokens):\n", r.train_seq_len);
  s += fmt::format("  {:>8}", "length");
  for (const auto& n : names) s += fmt::format("  {:>10}", n);
  s += fmt::format("  {:>10}\n", "tokens");
  for (const auto& row : r.lengths) {
    s += fmt::format("  {:>8}", row.length);
    for (const auto& n : names) {
      auto it = row.metrics.find(n);
      s += row.applicable && it != row.metrics.end() ? fmt::format("  {:>10.4f}", it->second)
                                                     : fmt::format("  {:>10}", "n/a");
    }
    s += row.applicable ? fmt::format("  {:>10}\n", row.tokens) : fmt::format("  {:>10}\n", "-");
  }
  return s;
}

}  // namespace ropelab::train
