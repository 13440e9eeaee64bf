#include "train/trainer.h"

#include <ATen/autocast_mode.h>
#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <yaml-cpp/yaml.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>

#include "config/loader.h"
#include "data/prepare.h"
#include "tasks/task.h"
#include "train/checkpoint.h"
#include "train/metrics.h"
#include "train/schedule.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/log.h"
#include "util/platform.h"
#include "util/progress.h"

namespace ropelab::train {

namespace stdfs = std::filesystem;

// ---- signals

namespace {
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int sig) {
  if (g_stop != 0 && sig == SIGINT) std::_Exit(130);  // a second Ctrl-C: leave at once
  g_stop = sig;
}
}  // namespace

bool stop_requested() { return g_stop != 0; }

void install_signal_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

namespace {

// bf16 autocast on CPU for the forward pass (tables and losses stay fp32 in their code).
class Autocast {
 public:
  explicit Autocast(bool on) : on_(on) {
    if (!on_) return;
    at::autocast::set_cpu_enabled(true);
    at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  }
  ~Autocast() {
    if (!on_) return;
    at::autocast::clear_cache();
    at::autocast::set_cpu_enabled(false);
  }
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  bool on_;
};

int threads_of(const config::Config& c) {
  return c.run.threads > 0 ? static_cast<int>(c.run.threads)
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

// Flattens a YAML document into dotted keys (for "what changed" messages).
void flatten(const YAML::Node& n, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten(kv.second, prefix + kv.first.Scalar() + ".", out);
  } else {
    YAML::Emitter e;
    e << YAML::Flow << n;
    out[prefix.substr(0, prefix.size() - 1)] = e.c_str();
  }
}

// The config sections a checkpoint depends on: changing them makes resuming meaningless.
std::map<std::string, std::string> architecture_keys(const config::Config& c) {
  std::map<std::string, std::string> all, out;
  flatten(YAML::Load(config::dump(c)), "", all);
  for (const auto& [k, v] : all)
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

std::string fmt_metrics(const std::map<std::string, double>& m) {
  std::string s;
  for (const auto& [k, v] : m) s += fmt::format("{}{} {:.4g}", s.empty() ? "" : " ", k, v);
  return s;
}

torch::optim::AdamW make_optimizer(torch::nn::Module& model, const config::TrainConfig& t) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& p : model.named_parameters()) {
    const std::string& n = p.key();
    bool nd = (n.size() >= 4 && n.compare(n.size() - 4, 4, "bias") == 0) ||
              n.find("norm") != std::string::npos || n.find("position.") != std::string::npos;
    (nd ? no_decay : decay).push_back(p.value());
  }
  // Adam = AdamW with no decoupled decay (Adam's L2 decay is not offered: it interacts badly
  // with adaptive steps, Loshchilov & Hutter 2019).
  double wd = t.optimizer == "adamw" ? t.weight_decay : 0.0;
  auto opts = torch::optim::AdamWOptions(t.lr).betas({t.beta1, t.beta2}).eps(t.eps);
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(opts).weight_decay(wd)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(opts).weight_decay(0.0)));
  return torch::optim::AdamW(std::move(groups), opts);
}

struct EvalOut {
  std::map<std::string, double> metrics;
  int64_t tokens = 0;
};

EvalOut run_eval(const tasks::Task& task, model::TransformerImpl& m, const data::BatchStream& s,
                 int64_t max_batches, bool bf16, torch::Device dev) {
  bool was_training = m.is_training();
  m.eval();
  torch::NoGradGuard ng;
  tasks::Stats st;
  int64_t n = s.batches_per_epoch();
  if (max_batches > 0) n = std::min(n, max_batches);
  for (int64_t i = 0; i < n && !stop_requested(); ++i) {
    auto b = s.batch(0, i);
    b.input_BT = b.input_BT.to(dev);
    b.target_BT = b.target_BT.to(dev);
    if (b.pad_BT.defined()) b.pad_BT = b.pad_BT.to(dev);
    Autocast ac(bf16);
    task.loss(m, b, &st);
  }
  if (was_training) m.train();
  return {task.metrics(st), static_cast<int64_t>(st.tokens)};
}

torch::Device device_of(const config::Config& c) {
  (void)c;
  return torch::cuda::is_available() ? torch::Device(torch::kCUDA) : torch::Device(torch::kCPU);
}

}  // namespace

TrainResult train(const config::Config& c) {
  install_signal_handlers();
  TrainResult res;
  res.run_dir = (stdfs::path(c.run.out_dir) / c.run.name).string();
  fs::make_dirs(res.run_dir);
  int threads = threads_of(c);
  platform::set_threads(threads);
  torch::Device dev = device_of(c);

  auto prepared = data::prepare(c.data, threads);
  auto tok = data::load_tokenizer(prepared);
  auto train_ds = data::load_split(prepared, "train", *tok);
  std::optional<data::TokenDataset> valid_ds;
  if (prepared.splits.count("valid") != 0) valid_ds = data::load_split(prepared, "valid", *tok);
  auto task = tasks::make_task(c, tok->vocab_size(), tok->kind());

  torch::manual_seed(static_cast<uint64_t>(c.run.seed));
  auto model = task->build_model();
  model->to(dev);
  auto opt = make_optimizer(*model, c.train);
  int64_t n_params = 0;
  for (const auto& p : model->parameters()) n_params += p.numel();

  // Resume or start.
  auto arch = architecture_keys(c);
  TrainState st;
  st.config_hash = hash_of(arch);
  st.threads = threads;
  st.vocab = tok->vocab_size();
  std::string cfg_path = (stdfs::path(res.run_dir) / "config.yaml").string();
  if (auto ck = latest_checkpoint(res.run_dir)) {
    config::Config old = config::load_config(cfg_path);
    auto before = architecture_keys(old);
    std::string diffs;
    for (const auto& [k, v] : arch)
      if (before[k] != v)
        diffs += fmt::format("{}{}: {} -> {}", diffs.empty() ? "" : "; ", k, before[k], v);
    if (!diffs.empty())
      throw UserError(res.run_dir + ": holds a run with a different configuration (" + diffs +
                      "); HINT: choose another run.name, or delete the run directory");
    st = load_checkpoint(*ck, *model, &opt);
    st.config_hash = hash_of(arch);
    st.vocab = tok->vocab_size();
    if (st.threads != threads)
      spdlog::warn(
          "resuming with {} threads (the run used {}): results may differ in the last bits",
          threads, st.threads);
    spdlog::info("resuming {} from step {}", res.run_dir, st.step);
  }
  fs::write_file_atomic(cfg_path, config::dump(c));
  log::add_log_file((stdfs::path(res.run_dir) / "train.log").string());
  struct DropLog {
    ~DropLog() { log::drop_log_files(); }
  } drop_log;

  std::string pos_name = c.model.position.type;
  MetricsLog metrics(res.run_dir,
                     {{"config", config::dump(c)},
                      {"position", pos_name},
                      {"task", c.task.type},
                      {"arch", c.model.arch},
                      {"attention", c.model.attention.kernel},
                      {"name", c.run.name},
                      {"params", std::to_string(n_params)}},
                     st.step);
  spdlog::info("{}", platform::blas_summary());
  spdlog::info("run {}: {} {} / {} positions / {} attention, {:.2f}M parameters, {} threads, {}",
               res.run_dir, c.task.type, c.model.arch, pos_name, c.model.attention.kernel,
               static_cast<double>(n_params) / 1e6, threads, dev.is_cuda() ? "cuda" : "cpu");

  if (c.model.position.type == "sinusoidal" && !c.model.scale_embeddings && c.model.init_std < 0.1)
    spdlog::warn(
        "sinusoidal positions (amplitude 1) are added to token embeddings initialised at "
        "std {}: the tokens are drowned and training may stall; consider "
        "model.scale_embeddings=true",
        c.model.init_std);
  auto train_stream = task->stream(train_ds, true, c.task.seq_len);
  std::unique_ptr<data::BatchStream> valid_stream;
  if (valid_ds) valid_stream = task->stream(*valid_ds, false, c.task.seq_len);
  int64_t per_epoch = train_stream->batches_per_epoch();
  if (per_epoch <= 0) throw UserError("the training split is smaller than one batch");
  const bool bf16 = c.train.precision == "bf16";

  auto evaluate = [&](bool final_eval) {
    if (!valid_stream) return;
    auto t0 = std::chrono::steady_clock::now();
    auto out = run_eval(*task, *model, *valid_stream, c.train.eval_batches, bf16, dev);
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto row = out.metrics;
    row["step"] = static_cast<double>(st.step);
    row["tokens"] = st.tokens;
    row["lr"] = learning_rate(c.train, c.model.d_model, std::max<int64_t>(1, st.step));
    row["tokens_per_s"] =
        secs > 0 ? static_cast<double>(out.tokens) / secs : 0.0;  // evaluation speed
    metrics.log("valid", row);
    metrics.flush();
    res.final_valid = out.metrics;
    spdlog::info("step {} valid {}{}", st.step, fmt_metrics(out.metrics),
                 final_eval ? " (final)" : "");
    if (st.best_step < 0 || out.metrics["loss"] < st.best_valid) {
      st.best_valid = out.metrics["loss"];
      st.best_step = st.step;
    }
  };
  auto checkpoint = [&] { save_checkpoint(res.run_dir, *model, opt, st, c.train.keep_last); };

  model->train();
  Progress bar("train", c.train.max_steps, "step");
  auto t_log = std::chrono::steady_clock::now();
  double tokens_at_log = st.tokens;
  tasks::Stats window;
  int64_t consecutive_bad = 0;
  if (st.step == 0 && c.train.eval_every > 0) evaluate(false);  // the untrained baseline
  while (st.step < c.train.max_steps && !stop_requested()) {
    opt.zero_grad();
    tasks::Stats step_stats;
    for (int64_t a = 0; a < c.train.grad_accum; ++a) {
      auto b = train_stream->batch(st.micro / per_epoch, st.micro % per_epoch);
      ++st.micro;
      b.input_BT = b.input_BT.to(dev);
      b.target_BT = b.target_BT.to(dev);
      if (b.pad_BT.defined()) b.pad_BT = b.pad_BT.to(dev);
      torch::Tensor loss;
      {
        Autocast ac(bf16);
        loss = task->loss(*model, b, &step_stats);
      }
      (loss / static_cast<double>(c.train.grad_accum)).backward();
    }
    double grad_norm = torch::nn::utils::clip_grad_norm_(
        model->parameters(),
        c.train.clip > 0 ? c.train.clip : std::numeric_limits<double>::infinity());
    double mean_loss = step_stats.targets > 0 ? step_stats.loss_sum / step_stats.targets : 0.0;
    if (!std::isfinite(mean_loss) || !std::isfinite(grad_norm)) {
      ++st.skipped;
      if (++consecutive_bad >= c.train.max_bad_steps)
        throw UserError(
            fmt::format("{}: {} consecutive steps with a non-finite loss or gradient "
                        "(last at step {}); stopped, the last good checkpoint is kept. "
                        "HINT: lower train.lr or raise train.schedule.warmup",
                        res.run_dir, consecutive_bad, st.step + 1));
      spdlog::warn("step {}: non-finite loss/gradient, update skipped ({} so far)", st.step + 1,
                   st.skipped);
      continue;
    }
    consecutive_bad = 0;
    ++st.step;
    double lr = learning_rate(c.train, c.model.d_model, st.step);
    for (auto& g : opt.param_groups()) static_cast<torch::optim::AdamWOptions&>(g.options()).lr(lr);
    opt.step();
    st.tokens += step_stats.tokens;
    window.add(step_stats);

    if (st.step % c.train.log_every == 0 || st.step == c.train.max_steps) {
      auto now = std::chrono::steady_clock::now();
      double secs = std::chrono::duration<double>(now - t_log).count();
      double tps = secs > 0 ? (st.tokens - tokens_at_log) / secs : 0.0;
      auto m = task->metrics(window);
      auto row = m;  // loss and the task's metrics (ppl, acc, bpb) over the window
      row["step"] = static_cast<double>(st.step);
      row["tokens"] = st.tokens;
      row["lr"] = lr;
      row["grad_norm"] = grad_norm;
      row["tokens_per_s"] = tps;
      metrics.log("train", row);
      bar.update(st.step, fmt::format("loss {:.4f} lr {:.2e} {:.0f} tok/s", m["loss"], lr, tps));
      window = tasks::Stats{};
      t_log = now;
      tokens_at_log = st.tokens;
    }
    bool last = st.step == c.train.max_steps;
    auto t_pause = std::chrono::steady_clock::now();
    if (last || (c.train.eval_every > 0 && st.step % c.train.eval_every == 0)) evaluate(last);
    if (last || (c.train.checkpoint_every > 0 && st.step % c.train.checkpoint_every == 0))
      checkpoint();
    t_log += std::chrono::steady_clock::now() - t_pause;  // tokens/s counts training time only
  }
  bar.finish();
  if (stop_requested()) {
    spdlog::warn("stopping on signal at step {}: saving a checkpoint", st.step);
    checkpoint();
    res.interrupted = true;
  } else if (st.step >= c.train.max_steps && res.final_valid.empty() && valid_stream) {
    evaluate(true);  // resumed a finished run: report its numbers again
  }
  metrics.flush();
  res.steps = st.step;
  return res;
}

// ---- evaluation of a finished run

EvalReport evaluate_run(const std::string& run_dir, const std::string& split,
                        const std::vector<int64_t>& lengths, int64_t max_tokens, bool use_best) {
  std::string cfg_path = (stdfs::path(run_dir) / "config.yaml").string();
  if (!fs::exists(cfg_path)) throw UserError(run_dir + ": not a ropelab run (no config.yaml)");
  config::Config c = config::load_config(cfg_path);
  int threads = threads_of(c);
  platform::set_threads(threads);
  torch::Device dev = device_of(c);
  auto prepared = data::prepared_paths(c.data);
  auto tok = data::load_tokenizer(prepared);
  if (prepared.splits.count(split) == 0)
    throw UserError(run_dir + ": its data has no '" + split + "' split");
  auto ds = data::load_split(prepared, split, *tok);
  auto task = tasks::make_task(c, tok->vocab_size(), tok->kind());
  auto model = task->build_model();
  auto latest = latest_checkpoint(run_dir);
  if (!latest) throw UserError(run_dir + ": no checkpoint to evaluate");
  std::string ck = *latest;
  if (use_best) {
    TrainState st = load_checkpoint(*latest, *model, nullptr);
    if (auto best = checkpoint_for_step(run_dir, st.best_step)) ck = *best;
  }
  load_checkpoint(ck, *model, nullptr);
  model->to(dev);
  bool bf16 = c.train.precision == "bf16";

  EvalReport r;
  r.run_dir = run_dir;
  r.checkpoint = ck;
  r.split = split;
  r.train_seq_len = c.task.seq_len;
  {
    auto s = task->stream(ds, false, c.task.seq_len);
    r.metrics = run_eval(*task, *model, *s, 0, bf16, dev).metrics;
  }
  int64_t max_len = model->position().max_len();
  for (int64_t L : lengths) {
    LengthRow row;
    row.length = L;
    if (max_len > 0 && L > max_len) {
      row.applicable = false;
      r.lengths.push_back(row);
      continue;
    }
    // The same token budget at every length: fewer, longer sequences.
    config::Config cl = c;
    cl.train.batch_size = std::max<int64_t>(1, c.train.batch_size * c.task.seq_len / L);
    auto tl = tasks::make_task(cl, tok->vocab_size(), tok->kind());
    std::unique_ptr<data::BatchStream> s;
    try {
      s = tl->stream(ds, false, L);
    } catch (const UserError& e) {
      row.applicable = false;  // the split is shorter than one window of this length
      r.lengths.push_back(row);
      continue;
    }
    int64_t batches = std::max<int64_t>(1, max_tokens / (cl.train.batch_size * L));
    auto out = run_eval(*tl, *model, *s, batches, bf16, dev);
    row.metrics = out.metrics;
    row.tokens = out.tokens;
    r.lengths.push_back(row);
  }
  nlohmann::json j;
  j["checkpoint"] = r.checkpoint;
  j["split"] = split;
  j["metrics"] = r.metrics;
  for (const auto& row : r.lengths)
    j["lengths"].push_back({{"length", row.length},
                            {"applicable", row.applicable},
                            {"metrics", row.metrics},
                            {"tokens", row.tokens}});
  fs::write_file_atomic((stdfs::path(run_dir) / ("eval-" + split + ".json")).string(),
                        j.dump(2) + "\n");
  return r;
}

std::string format_eval(const EvalReport& r) {
  std::string s = fmt::format("run {} ({} split, {})\n", r.run_dir, r.split,
                              stdfs::path(r.checkpoint).filename().string());
  s += fmt::format("  {}\n", fmt_metrics(r.metrics));
  if (!r.lengths.empty()) {
    s += fmt::format("\nlength extrapolation (trained at {} tokens):\n", r.train_seq_len);
    s += fmt::format("  {:>8}  {:>10}  {:>12}  {:>10}\n", "length", "loss", "perplexity", "tokens");
    for (const auto& row : r.lengths) {
      if (!row.applicable) {
        s += fmt::format("  {:>8}  {:>10}  {:>12}  {:>10}\n", row.length, "n/a", "n/a", "-");
        continue;
      }
      s += fmt::format("  {:>8}  {:>10.4f}  {:>12.2f}  {:>10}\n", row.length,
                       row.metrics.at("loss"), row.metrics.at("ppl"), row.tokens);
    }
  }
  return s;
}

}  // namespace ropelab::train
