#include "lab/bench.h"

#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "compat/torch_compat.h"
#include "config/loader.h"
#include "data/prepare.h"
#include "dist/threads.h"
#include "model/decode.h"
#include "model/linear.h"
#include "run/run.h"
#include "tasks/task.h"
#include "train/trainer.h"
#include "util/cuda_info.h"
#include "util/device.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/gemm.h"
#include "util/platform.h"
#include "util/progress.h"
#include "util/signals.h"

namespace ropelab::lab {

using clock = std::chrono::steady_clock;
using json = nlohmann::json;

// The bench config (configs/bench/lm.yaml) whose figures the goals are about.
const std::string kLmBench = "lm";

namespace {

double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

// VmRSS / VmHWM of this process in MiB (Linux /proc/self/status).
double proc_status_mb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  return 0.0;
}

// Random token ids of the bench shape for the config's task (ids 4.. leave the specials out).
data::Batch synthetic_batch(const config::Config& c, int64_t vocab, int64_t B, int64_t T) {
  torch::manual_seed(1);
  data::Batch b;
  const auto& task = c.task.opts;
  auto tok = torch::randint(4, vocab, {B, T}, torch::kInt64);
  b.num_tokens = B * T;
  if (std::holds_alternative<config::MlmTaskConfig>(task)) {
    auto masked = torch::rand({B, T}) < 0.15;
    b.target_BT = torch::where(masked, tok, torch::full_like(tok, -100));
    b.input_BT = torch::where(masked, torch::full_like(tok, 3), tok);
    b.num_targets = masked.sum().item<int64_t>();
    b.scored_N = data::scored_positions(b.target_BT);
    return b;
  }
  b.input_BT = tok;
  b.target_BT = torch::randint(4, vocab, {B, T}, torch::kInt64);
  b.num_targets = B * T;
  if (std::holds_alternative<config::TranslationTaskConfig>(task)) {
    b.src_BS = torch::randint(4, vocab, {B, T}, torch::kInt64);
    b.src_pad_BS = torch::ones({B, T}, torch::kBool);
    b.num_tokens = 2 * B * T;
  } else if (!std::holds_alternative<config::ClmTaskConfig>(task)) {
    throw UserError(std::string("bench: task.type ") + c.task.type() +
                    " has no bench shape (clm, mlm, translation)");
  }
  return b;
}

int64_t vocab_of(const config::Config& c) { return c.data.tokenizer.vocab_size; }

// What ran the math: the BLAS kernel and every pool's threads (reported beside each figure, so
// that a comparison can show both sides ran the same layout).
json thread_facts() {
  return {{"blas_core", platform::blas_core()},
          {"fp32_gemm", util::fp32_gemm_name()},
          {"threads", at::get_num_threads()},
          {"blas_threads", platform::blas_threads()},
          {"omp_wait_policy", platform::openmp_wait_policy()},
          {"malloc",
           std::string(platform::freed_memory_kept() ? "keeps freed memory" : "glibc defaults") +
               (platform::malloc_huge_pages() ? ", huge pages" : "")}};
}

// A chrome trace of the steps run while it lives. On the CPU it is libtorch's legacy profiler
// (each op's time on the host). On a GPU that would time only the launches, so there it is the
// Kineto profiler with CUDA activity: the trace holds every kernel's time on the device too
// (scripts/profile_summary.py reads both).
class StepProfile {
 public:
  StepProfile(const std::string& file, bool gpu) : file_(file), gpu_(gpu) {
    if (!gpu_) {
      legacy_ = std::make_unique<torch::autograd::profiler::RecordProfile>(file_);
      return;
    }
    namespace impl = torch::profiler::impl;
    const impl::ProfilerConfig config(impl::ProfilerState::KINETO);
    const std::set<impl::ActivityType> activities{impl::ActivityType::CPU,
                                                  impl::ActivityType::CUDA};
    torch::autograd::profiler::prepareProfiler(config, activities);
    torch::autograd::profiler::enableProfiler(config, activities);
  }
  StepProfile(const StepProfile&) = delete;
  StepProfile& operator=(const StepProfile&) = delete;
  ~StepProfile() {
    if (!gpu_) return;
    try {
      torch::autograd::profiler::disableProfiler()->save(file_);
    } catch (const std::exception& e) {  // a destructor must not throw: the figures still count
      spdlog::warn("bench: the profile was not written to {}: {}", file_, e.what());
    }
  }

 private:
  std::string file_;
  bool gpu_;
  std::unique_ptr<torch::autograd::profiler::RecordProfile> legacy_;
};

// Training tokens/s of the trainer's own step (train::Trainer::train_step: micro-batches,
// loss / targets, backward, global-norm clipping, AdamW) on one batch of the bench shape.
json train_point(const config::Config& c, int steps) {
  int threads = dist::apply_thread_policy(c.run.threads);
  torch::Device dev = device::resolve(c.run.device);
  int64_t vocab = vocab_of(c), B = c.train.batch_size, T = c.task.seq_len;
  auto task = tasks::make_task(c, vocab);
  torch::manual_seed(0);
  auto model = task->build_model();
  model->to(dev);
  model->train();
  auto batch = synthetic_batch(c, vocab, B, T);
  const int64_t tokens = batch.num_tokens;
  auto cfg = train::TrainerConfig::of(c);
  cfg.train.grad_accum = 1;
  train::Trainer trainer(cfg, *task, model, data::make_repeat_stream(batch.to(dev)), dev);
  int64_t params = 0;
  for (const auto& p : model->parameters()) params += p.numel();
  double rss0 = proc_status_mb("VmRSS");
  cuda_info::reset_peak_memory(dev);
  double timed = 0;
  double loss = 0;
  // ROPELAB_PROFILE=FILE: a chrome trace of the timed steps, for finding where a step's time goes.
  std::unique_ptr<StepProfile> profile;
  const char* profile_file = std::getenv("ROPELAB_PROFILE");
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up (allocations, oneDNN primitives)
    signals::throw_if_stopped("bench", "");
    if (s == 1 && profile_file != nullptr)
      profile = std::make_unique<StepProfile>(profile_file, dev.is_cuda());
    auto t = clock::now();
    loss = trainer.train_step().loss;  // reads the loss back: waits for an asynchronous device
    if (s > 0) timed += seconds_since(t);
  }
  profile.reset();
  double step_s = timed / steps;
  json r{{"tokens_per_s", static_cast<double>(tokens) / step_s},
         {"step_s", step_s},
         {"flops_per_step", train_step_flops(c, B, T)},
         {"params", params},
         {"loss", loss},
         {"peak_rss_mb", proc_status_mb("VmHWM")},
         {"peak_train_mb", proc_status_mb("VmHWM") - rss0},
         {"device", dev.str()}};
  if (dev.is_cuda())
    r["peak_gpu_mb"] = static_cast<double>(cuda_info::peak_memory_bytes(dev)) / (1 << 20);
  r.update(thread_facts());
  r["threads"] = threads;
  return r;
}

// Time per generated token after `length` tokens, greedy, batch 1: one incremental step with
// the key/value cache, or a forward pass over the whole prefix without it.
json decode_point(const config::Config& c, int steps, int64_t length) {
  dist::apply_thread_policy(c.run.threads);
  int64_t vocab = vocab_of(c);
  auto task = tasks::make_task(c, vocab);
  torch::manual_seed(0);
  auto model = task->build_model();
  model->eval();
  torch::NoGradGuard ng;
  auto prefix = torch::randint(4, vocab, {1, length}, torch::kInt64);
  auto next = [&](const torch::Tensor& h) {
    return model->logits(h.narrow(1, h.size(1) - 1, 1)).argmax(-1);  // [1, 1]
  };
  // With the cache: prefill, then `steps` tokens one at a time (the first is a warm-up).
  model::DecodeState state;
  auto tok = next(model->backbone->decode(prefix, {}, {}, &state));
  double cached = 0;
  for (int s = 0; s <= steps; ++s) {
    auto t = clock::now();
    tok = next(model->backbone->decode(tok, {}, {}, &state));
    if (s > 0) cached += seconds_since(t);
  }
  // Without: the whole prefix again for every token.
  int reps = std::max(1, std::min(steps, 3));
  double uncached = 0;
  auto seq = torch::cat({prefix, tok}, 1);
  for (int s = 0; s <= reps; ++s) {
    auto t = clock::now();
    next(model->backbone->decode(seq));
    if (s > 0) uncached += seconds_since(t);
  }
  return {{"length", length},
          {"cache_ms_per_token", 1e3 * cached / steps},
          {"nocache_ms_per_token", 1e3 * uncached / reps}};
}

// Tokens/s of drawing `batches` batches from a stream (epochs wrap around).
double stream_tokens_per_s(const data::BatchStream& stream, int64_t batches) {
  int64_t per_epoch = stream.batches_per_epoch();
  double tokens = 0;
  auto t0 = clock::now();
  for (int64_t i = 0; i < batches; ++i) {
    const int64_t epoch = i / per_epoch, index = i % per_epoch;
    tokens += static_cast<double>(stream.batch(epoch, index).num_tokens);
  }
  return tokens / seconds_since(t0);
}

// The real batch stream of the config's prepared data (prepared first if needed).
json data_point(const config::Config& c, int64_t batches) {
  auto r = run::open_new(c, run::DataUse::kPrepare);
  auto ds = r.data->split("train");
  auto stream = r.task->stream(ds, true, c.task.seq_len, c.train.batch_size);
  return {{"stream_tokens_per_s", stream_tokens_per_s(*stream, batches)},
          {"batches", batches},
          {"peak_rss_mb", proc_status_mb("VmHWM")}};
}

}  // namespace

MatmulRate measure_matmul(int n, int repeats) {
  torch::NoGradGuard ng;
  // mm: torch::matmul (the BLAS in float32, oneDNN in bf16), or the model's dense-layer path
  // (model::linear: oneDNN's sgemm in float32 where the process has it, util/gemm.h).
  auto time_it = [&](torch::ScalarType dt, bool dense_path) {
    auto a = torch::randn({n, n}).to(dt), b = torch::randn({n, n}).to(dt);
    auto mm = [&] { return dense_path ? model::linear(a, b) : torch::matmul(a, b); };
    auto c = mm();  // warm-up
    // The best of three timings: a shared machine's hiccup must not lower the yardstick of MFU.
    double best = 0;
    for (int trial = 0; trial < 3; ++trial) {
      auto t0 = clock::now();
      for (int i = 0; i < repeats; ++i) c = mm();
      best =
          std::max(best, 2.0 * n * n * static_cast<double>(n) * repeats / seconds_since(t0) / 1e9);
    }
    return best;
  };
  MatmulRate r;
  r.fp32_blas_gflops = time_it(torch::kFloat32, false);
  r.fp32_dense_gflops =
      util::fast_sgemm_available() ? time_it(torch::kFloat32, true) : r.fp32_blas_gflops;
  // The yardstick of MFU is the faster of the two: the best this machine's float32 gemms do.
  r.fp32_gflops = std::max(r.fp32_blas_gflops, r.fp32_dense_gflops);
  r.bf16_gflops = time_it(torch::kBFloat16, false);
  return r;
}

double train_step_flops(const config::Config& c, int64_t B, int64_t T) {
  const auto& m = c.model;
  double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.d_ff);
  double V = static_cast<double>(vocab_of(c));
  double rows = static_cast<double>(B * T), t = static_cast<double>(T);
  auto lin = [](double r, double in, double out) { return 2.0 * r * in * out; };
  // One layer: q,k,v,o and the FFN on `rows`, and the two attention matmuls over `ctx` keys.
  auto layer = [&](double r, double ctx) {
    return lin(r, d, 4 * d) + lin(r, d, ff) + lin(r, ff, d) + 4.0 * r * ctx * d;
  };
  double fwd = 0;
  if (std::holds_alternative<config::TranslationTaskConfig>(c.task.opts)) {
    int64_t dec = m.n_decoder_layers > 0 ? m.n_decoder_layers : m.n_layers;
    fwd += static_cast<double>(m.n_layers) * layer(rows, t);
    // Decoder: self-attention, cross-attention (q, o on targets; k, v on the source) and FFN.
    fwd += static_cast<double>(dec) *
           (layer(rows, t) + lin(rows, d, 2 * d) + lin(rows, d, 2 * d) + 4.0 * rows * t * d);
    fwd += lin(rows, d, V);
  } else {
    fwd += static_cast<double>(m.n_layers) * layer(rows, t);
    // MLM: the head runs on the ~15% selected positions only.
    fwd += std::holds_alternative<config::MlmTaskConfig>(c.task.opts)
               ? lin(0.15 * rows, d, d) + lin(0.15 * rows, d, V)
               : lin(rows, d, V);
  }
  return 3.0 * fwd;  // backward = 2x forward
}

std::string bench_point(BenchPoint point, const std::string& config_file,
                        const std::vector<std::string>& overrides, int steps, int64_t length) {
  if (point == BenchPoint::kMatmul) {  // no config: only run.threads and run.device apply
    std::string device = "cpu";
    for (const auto& ov : overrides) {
      if (ov.rfind("run.threads=", 0) == 0) platform::set_threads(std::stoi(ov.substr(12)));
      if (ov.rfind("run.device=", 0) == 0) device = ov.substr(11);
    }
    const torch::Device dev = device::resolve(device);
    if (dev.is_cuda()) {  // 8192^3 products; fp32 with libtorch's default (no TF32)
      double bf16 = 1e3 * cuda_info::bf16_matmul_tflops(dev, 8192, 20);
      torch::NoGradGuard ng;
      auto a = torch::randn({8192, 8192}, torch::TensorOptions().device(dev)), c = a.mm(a);
      torch::cuda::synchronize(dev.index());
      auto t0 = clock::now();
      for (int i = 0; i < 5; ++i) c = a.mm(a);
      torch::cuda::synchronize(dev.index());
      double fp32 = 2.0 * 8192.0 * 8192.0 * 8192.0 * 5 / seconds_since(t0) / 1e9;
      auto gpus = cuda_info::gpus();
      json j{{"fp32_gflops", fp32},       {"fp32_blas_gflops", fp32},
             {"fp32_dense_gflops", fp32}, {"bf16_gflops", bf16},
             {"device", dev.str()},       {"gpu", gpus.empty() ? std::string("?") : gpus[0].name}};
      j.update(thread_facts());
      return j.dump();
    }
    auto r = measure_matmul(2048, 10);
    json j{{"fp32_gflops", r.fp32_gflops},
           {"fp32_blas_gflops", r.fp32_blas_gflops},
           {"fp32_dense_gflops", r.fp32_dense_gflops},
           {"bf16_gflops", r.bf16_gflops}};
    j.update(thread_facts());
    return j.dump();
  }
  auto c = config::load_config(config_file, config::overrides_from_args(overrides));
  switch (point) {
    case BenchPoint::kTrain:
      return train_point(c, steps).dump();
    case BenchPoint::kDecode:
      return decode_point(c, steps, length).dump();
    case BenchPoint::kData:
      return data_point(c, std::max<int64_t>(length, 1)).dump();
    case BenchPoint::kMatmul:
      break;
  }
  return {};
}

// ---- the parent: points in child processes, the table, the files

namespace {

// One PyTorch column: which python runs the reference, and in which variant.
double num(const json& j, const char* k);
std::string with_omp(const std::string& python, const std::string& omp);
std::vector<std::string> omp_settings(const std::string& precision);

struct Peer {
  std::string label;   // "PyTorch 1.13.0 eager"
  std::string python;  // a shell command that runs python3
  std::string variant;
};

bool is_gpu_run(const config::Config& c) { return device::resolve(c.run.device).is_cuda(); }

struct Runner {
  const BenchOptions& o;
  std::string logs_dir;
  int threads;
  int64_t total, done = 0;
  Progress bar;
  json points = json::array();

  bool gpu = false;  // the reference runs on the GPU too (no OpenMP settings to compare)

  Runner(const BenchOptions& opts, int64_t n, int th)
      : o(opts),
        logs_dir(opts.out_dir + "/logs"),
        threads(th),
        total(n),
        bar("bench", n, "point") {}

  // Runs one shell command whose stdout is a JSON object; records and returns it (with
  // "error" set where it failed).
  json run(const std::string& label, const std::string& cmd, json meta) {
    signals::throw_if_stopped("bench", "nothing was written");
    std::string log = fmt::format("{}/{:03d}.log", logs_dir, done);
    std::string out = log + ".json";
    bar.update(done, label);
    auto t0 = clock::now();
    int rc = std::system(
        (cmd + " >" + platform::shell_quote(out) + " 2>" + platform::shell_quote(log)).c_str());
    signals::throw_if_stopped("bench", "nothing was written");
    json r;
    std::string text = fs::exists(out) ? fs::read_file(out) : "";
    if (rc == 0) {
      try {
        r = json::parse(text.substr(text.find('{')));
      } catch (const std::exception&) {
        r = json{{"error", "unreadable output (" + out + ")"}};
      }
    } else {
      int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : 128 + WTERMSIG(rc);
      r = json{
          {"error", fmt::format("exit {}{} (log: {})", code,
                                code == 137 || code == 9 ? ", killed: out of memory?" : "", log)}};
    }
    r["wall_s"] = seconds_since(t0);
    for (const auto& [k, v] : meta.items()) r[k] = v;
    r["label"] = label;
    points.push_back(r);
    bar.update(++done, label);
    return r;
  }

  json ropelab(const std::string& label, const std::string& point, const std::string& cfg,
               const std::vector<std::string>& ov, int64_t length, json meta) {
    std::string cmd = platform::shell_quote(platform::executable_dir() + "/ropelab") +
                      " bench --point " + point + " --steps " + std::to_string(o.steps) +
                      " --length " + std::to_string(length);
    if (!cfg.empty()) cmd += " --config " + platform::shell_quote(cfg);
    std::vector<std::string> all = o.overrides;
    all.push_back("run.threads=" + std::to_string(threads));
    all.insert(all.end(), ov.begin(), ov.end());
    for (const auto& x : all) cmd += " " + platform::shell_quote(x);
    meta["impl"] = "ropelab";
    return run(label, cmd, meta);
  }

  json pytorch(const Peer& peer, const config::Config& c, const std::string& model,
               const std::string& precision, json meta) {
    std::string pos = c.model.position.type();
    // The script goes in on stdin, so that a python inside a chroot can read it.
    std::string args =
        fmt::format(
            " - --model {} --precision {} --position {} --d-model {} --n-layers {} "
            "--n-heads {} --d-ff {} --vocab {} --seq-len {} --batch {} --dropout {} "
            "--steps {} --threads {} --variant {} --device {} < ",
            model == "lm-large" ? "lm" : model, precision, pos == "none" ? "none" : "rope",
            c.model.d_model, c.model.n_layers, c.model.n_heads, c.model.d_ff, vocab_of(c),
            c.task.seq_len, c.train.batch_size, c.model.dropout, o.steps, threads, peer.variant,
            is_gpu_run(c) ? "cuda" : "cpu") +
        platform::shell_quote(platform::script_path("bench_pytorch.py"));
    meta["impl"] = peer.label;
    json best;
    const auto omps =
        gpu ? std::vector<std::string>{"OMP_WAIT_POLICY=PASSIVE"} : omp_settings(precision);
    for (const auto& omp : omps) {
      json j = run(peer.label + " " + meta.value("model", "") + " " + precision + " (" + omp + ")",
                   with_omp(peer.python, omp) + args, meta);
      if (best.is_null() ||
          (!j.contains("error") &&
           (best.contains("error") || num(j, "tokens_per_s") > num(best, "tokens_per_s"))))
        best = j;
    }
    return best;
  }
};

// The first line a shell command prints ("" when it fails).
std::string first_line_of(const std::string& cmd) {
  std::string out;
  if (FILE* f = popen((cmd + " 2>/dev/null").c_str(), "r")) {
    char buf[256];
    if (std::fgets(buf, sizeof buf, f) != nullptr) out = buf;
    if (pclose(f) != 0) out.clear();
  }
  while (!out.empty() && (out.back() == '\n' || out.back() == '\r')) out.pop_back();
  return out;
}

// A peer's command with "{omp}" replaced by an OpenMP setting (NAME=value).
std::string with_omp(const std::string& python, const std::string& omp) {
  std::string s = python;
  auto at = s.find("{omp}");
  if (at != std::string::npos) s.replace(at, 5, omp);
  return s;
}

// The OpenMP settings a PyTorch figure is measured under; the faster counts. What the user set
// (OMP_WAIT_POLICY or GOMP_SPINCOUNT) applies to both sides alone. Otherwise PASSIVE, which
// PyTorch's fp32 needs (its matmuls run on OpenBLAS's own threads, and libgomp's spinning
// workers took their cores: 1062-1180 against 2932-2958 tokens/s for PyTorch 2.6, LM fp32), and
// in bf16 (oneDNN on the OpenMP pool) also libgomp's default spin, which can be faster there.
std::vector<std::string> omp_settings(const std::string& precision) {
  if (const char* v = std::getenv("OMP_WAIT_POLICY")) return {std::string("OMP_WAIT_POLICY=") + v};
  if (const char* v = std::getenv("GOMP_SPINCOUNT")) return {std::string("GOMP_SPINCOUNT=") + v};
  if (precision == "fp32") return {"OMP_WAIT_POLICY=PASSIVE"};
  return {"OMP_WAIT_POLICY=PASSIVE", "GOMP_SPINCOUNT=300000"};
}

// Every PyTorch to compare with: this system's /usr/bin/python3 and each --pytorch-root, in each
// variant it has.
std::vector<Peer> find_peers(const BenchOptions& o) {
  // The settings both sides must share: the BLAS core and the OpenMP wait policy are in this
  // process's environment (ensure_fast_blas); the allocator's is passed as GLIBC_TUNABLES.
  // The OpenMP wait policy goes in per run (Runner::pytorch): "{omp}" stands for it.
  std::string shared = " {omp}";
  if (const char* v = std::getenv("OPENBLAS_CORETYPE"))
    shared += std::string(" OPENBLAS_CORETYPE=") + v;
  if (platform::freed_memory_kept()) shared += " GLIBC_TUNABLES=" + platform::malloc_tunables();
  std::vector<std::string> pythons{"/usr/bin/env" + shared + " " + o.python};
  // A chroot starts from an empty environment.
  std::string env = "/usr/bin/env -i PATH=/usr/local/bin:/usr/bin:/bin HOME=/root" + shared;
  for (const auto& root : o.pytorch_roots) {
    if (!fs::exists(root + "/usr/bin/python3"))
      throw UserError("bench --pytorch-root " + root +
                      ": no usr/bin/python3 there (scripts/pytorch_root.sh builds such a root)");
    // /proc, /sys and /dev bound in a private mount namespace (gone when the child exits):
    // without /proc, PyTorch cannot read the CPU's features and runs its slowest kernels.
    pythons.push_back(
        "unshare --mount --fork /bin/sh -c 'for d in proc sys dev; do mount --bind /$d \"$0/$d\"; "
        "done; exec chroot \"$0\" " +
        env + " /usr/bin/python3 \"$@\"' " + platform::shell_quote(root));
  }
  std::vector<Peer> peers;
  for (const auto& py : pythons) {
    std::string version = first_line_of(with_omp(py, "OMP_WAIT_POLICY=PASSIVE") +
                                        " -c 'import torch; print(torch.__version__)'");
    if (version.empty())
      throw UserError("bench --compare-pytorch: `" + py +
                      "` cannot import torch (apt-get install python3-torch, or name a python "
                      "with PyTorch: --python)");
    version = version.substr(0, version.find('+'));
    bool two = version.rfind("1.", 0) != 0;
    for (const auto& v : o.pytorch_variants) {
      if (v != "eager" && !two) continue;
      peers.push_back({"PyTorch " + version + " " + v, py, v});
    }
  }
  return peers;
}

// "SkylakeX, 2 + 2 threads, PASSIVE": what one figure ran on.
std::string layout_of(const json& j) {
  if (!j.contains("blas_core")) return "-";
  return fmt::format(
      "BLAS core {}, fp32 dense layers on {}, {} intra-op + {} OpenBLAS threads, OpenMP wait {}, "
      "malloc {}",
      j.value("blas_core", "?"), j.value("fp32_gemm", "BLAS (libtorch)"), j.value("threads", -1),
      j.value("blas_threads", -1), j.value("omp_wait_policy", "?"), j.value("malloc", "?"));
}

bool wanted(const BenchOptions& o, const std::string& s) {
  return o.sections.empty() ||
         std::find(o.sections.begin(), o.sections.end(), s) != o.sections.end();
}

double num(const json& j, const char* k) {
  return j.contains(k) && j[k].is_number() ? j[k].get<double>() : std::nan("");
}
std::string fmt_num(double x, const char* f = "{:.0f}") {
  return std::isnan(x) ? std::string("-") : fmt::format(fmt::runtime(f), x);
}
std::string cell(const json& j, const char* k, const char* f = "{:.0f}") {
  return j.contains("error") ? std::string("failed") : fmt_num(num(j, k), f);
}

struct Table {
  std::vector<std::string> head;
  std::vector<std::vector<std::string>> rows;
  std::string md() const {
    std::string s = "|";
    for (const auto& h : head) s += " " + h + " |";
    s += "\n|";
    for (size_t i = 0; i < head.size(); ++i) s += i == 0 ? ":--|" : "--:|";
    s += "\n";
    for (const auto& r : rows) {
      s += "|";
      for (const auto& x : r) s += " " + x + " |";
      s += "\n";
    }
    return s;
  }
};

std::string check(bool ok) { return ok ? "yes" : "**no**"; }

}  // namespace

void run_bench(const BenchOptions& o) {
  static const std::vector<std::string> kSections{"machine",   "train",  "positions",
                                                  "attention", "decode", "data"};
  for (const auto& s : o.sections)
    if (std::find(kSections.begin(), kSections.end(), s) == kSections.end())
      throw UserError("bench: unknown section '" + s +
                      "' (machine, train, positions, attention, decode, data)");
  // The training section runs o.models; the other sections use the LM config.
  std::vector<std::string> models = o.models;
  for (const auto& m : models)
    if (m != kLmBench && m != "mlm" && m != "translation" && m != "lm-large")
      throw UserError("bench: unknown --models entry '" + m + "' (lm, mlm, translation, lm-large)");
  if (models.empty()) throw UserError("bench: --models names none of lm, mlm, translation");
  std::map<std::string, config::Config> cfg;
  std::map<std::string, std::string> file;
  std::vector<std::string> to_load = models;
  if (std::find(models.begin(), models.end(), kLmBench) == models.end())
    to_load.push_back(kLmBench);
  for (const auto& m : to_load) {
    file[m] = o.configs_dir + "/" + m + ".yaml";
    cfg[m] = config::load_config(file[m], config::overrides_from_args(o.overrides));
  }
  std::vector<Peer> peers;
  std::vector<config::Precision> precisions;
  for (const auto& p : o.precisions) precisions.push_back(config::enum_from<config::Precision>(p));
  if (precisions.empty()) throw UserError("bench: --precisions names none of fp32, bf16");
  // A GPU run (run.device cuda, or auto on a machine with one): the GPU's matmul peak, GPU
  // memory, the reference on the GPU, and the GPU's goals.
  const bool gpu = is_gpu_run(cfg[kLmBench]);
  const std::string device_override =
      "run.device=" + std::string(gpu ? device::resolve(cfg[kLmBench].run.device).str() : "cpu");
  if (o.compare_pytorch) {
    if (o.python.rfind('/', 0) == 0 && !fs::exists(o.python))
      throw UserError("bench --compare-pytorch: " + o.python +
                      " is missing (apt-get install python3-torch, or --python)");
    peers = find_peers(o);
  } else if (!o.pytorch_roots.empty()) {
    throw UserError("bench --pytorch-root needs --compare-pytorch");
  }
  int threads = o.threads > 0 ? o.threads
                              : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  static const std::vector<std::string> kPositions{
      "none",   "sinusoidal", "learned", "t5",   "rope",    "alibi", "xpos", "fire",
      "kerple", "fox",        "cope",    "pope", "comrope", "path",  "mrope"};
  // The number of points, for the progress line.
  int64_t n = 0;
  // On a GPU the thread count is not the figure's limit: no 1-thread comparisons.
  const bool thread_checks = threads > 1 && !gpu;
  if (wanted(o, "machine")) n += thread_checks ? 2 : 1;
  if (wanted(o, "train")) {
    int64_t per_model = 0;
    for (auto p : precisions)
      per_model += 1 + static_cast<int64_t>(peers.size() *
                                            (gpu ? 1 : omp_settings(config::to_string(p)).size()));
    n += o.rounds * static_cast<int64_t>(models.size()) * per_model + (thread_checks ? 1 : 0);
  }
  if (wanted(o, "positions")) n += static_cast<int64_t>(kPositions.size());
  if (wanted(o, "attention")) n += 2 * static_cast<int64_t>(o.lengths.size());
  if (wanted(o, "decode")) n += static_cast<int64_t>(o.decode_lengths.size());
  if (wanted(o, "data")) n += 1;
  fs::make_dirs(o.out_dir + "/logs");
  Runner r(o, n, threads);
  r.gpu = gpu;
  std::string md = fmt::format(
      "# ropelab bench\n\nlibtorch {}, BLAS core {}, {} threads, OpenMP wait policy {}, {} timed "
      "steps per point (after one warm-up step).\n\n",
      compat::libtorch_version(), platform::blas_core(), threads, platform::openmp_wait_policy(),
      o.steps);
  if (gpu) {
    auto g = cuda_info::gpus();
    md += fmt::format("GPU: {}, CUDA {}, cuDNN {}; the PyTorch reference runs on the same GPU.\n\n",
                      g.empty() ? std::string("?") : g[0].name, cuda_info::cuda_version(),
                      cuda_info::cudnn_version());
  }
  std::vector<std::pair<std::string, std::string>> goals;  // goal, measured + verdict
  json summary;

  double peak32 = std::nan(""), peak16 = std::nan("");
  if (wanted(o, "machine")) {
    auto m = r.ropelab("matmul peak", "matmul", "", {device_override}, 0, {{"section", "machine"}});
    peak32 = num(m, "fp32_gflops");
    peak16 = num(m, "bf16_gflops");
    Table t{{"matmul 2048x2048", "GFLOP/s"},
            {{"fp32, BLAS (libtorch's matmul)", cell(m, "fp32_blas_gflops", "{:.1f}")},
             {"fp32, " + m.value("fp32_gemm", std::string("-")) + " (the dense layers)",
              cell(m, "fp32_dense_gflops", "{:.1f}")},
             {"bf16", fmt_num(peak16, "{:.1f}")}}};
    if (gpu)
      t = Table{{"matmul 8192x8192 on " + m.value("gpu", std::string("the GPU")), "GFLOP/s"},
                {{"fp32 (no TF32)", cell(m, "fp32_gflops", "{:.0f}")},
                 {"bf16", fmt_num(peak16, "{:.0f}")}}};
    if (thread_checks) {
      // The same on one thread: every pool must scale (ATen's, OpenBLAS's, oneDNN's).
      auto one = r.ropelab("matmul 1 thread", "matmul", "", {"run.threads=1"}, 0,
                           {{"section", "machine"}, {"threads", 1}});
      double s32 = peak32 / num(one, "fp32_gflops"), s16 = peak16 / num(one, "bf16_gflops");
      t.rows.push_back({"fp32, 1 thread", cell(one, "fp32_gflops", "{:.1f}")});
      t.rows.push_back({"bf16, 1 thread", cell(one, "bf16_gflops", "{:.1f}")});
      summary["machine"]["threads_speedup"] = {{"fp32", s32}, {"bf16", s16}};
      goals.emplace_back(fmt::format("{} threads >= 1.5x 1 thread (fp32 matmul)", threads),
                         fmt_num(s32, "{:.2f}x") + " " + check(s32 >= 1.5));
      goals.emplace_back(fmt::format("{} threads >= 1.5x 1 thread (bf16 matmul)", threads),
                         fmt_num(s16, "{:.2f}x") + " " + check(s16 >= 1.5));
    }
    md += "## Machine\n\n" + t.md() + "\nRan on: " + layout_of(m) + ".\n\n";
  }

  double lm_fp32_tps = std::nan("");
  if (wanted(o, "train")) {
    // best[model/precision][impl] over rounds; who goes first rotates from round to round.
    std::map<std::string, std::map<std::string, json>> best;
    for (int round = 0; round < o.rounds; ++round)
      for (const auto& m : models)
        for (auto p : precisions) {
          const std::string prec = config::to_string(p);
          std::string key = m + " " + prec;
          json meta{{"section", "train"}, {"model", m}, {"precision", prec}, {"round", round}};
          std::vector<std::function<json()>> runs;
          runs.emplace_back([&] {
            return r.ropelab("train " + key, "train", file[m], {"train.precision=" + prec}, 0,
                             meta);
          });
          for (const auto& peer : peers)
            runs.emplace_back([&, peer] { return r.pytorch(peer, cfg[m], m, prec, meta); });
          std::rotate(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(round % runs.size()),
                      runs.end());
          for (const auto& run : runs) {
            json g = run();
            auto& slot = best[key][g["impl"].get<std::string>()];
            if (slot.is_null() ||
                (!g.contains("error") &&
                 (slot.contains("error") || num(g, "tokens_per_s") > num(slot, "tokens_per_s"))))
              slot = g;
          }
        }
    // On a GPU each figure also shows its step time and peak GPU memory (the allocator's).
    auto gpu_facts = [&](const json& j) {
      return j.contains("error") ? std::string()
                                 : fmt::format(" ({} ms, {} MiB)", fmt_num(1e3 * num(j, "step_s")),
                                               fmt_num(num(j, "peak_gpu_mb")));
    };
    Table t{{"config", "precision", "ropelab tokens/s", "model GFLOP/s", "MFU"}, {}};
    if (gpu) t.head[2] = "ropelab tokens/s (step, peak GPU memory)";
    for (const auto& peer : peers) t.head.push_back(peer.label);
    if (!peers.empty()) {
      t.head.push_back("best PyTorch");
      t.head.push_back("ropelab / best");
    }
    for (const auto& m : models)
      for (auto p : precisions) {
        const std::string prec = config::to_string(p);
        const bool fp32 = p == config::Precision::kFp32;
        const json& a = best[m + " " + prec]["ropelab"];
        double tps = num(a, "tokens_per_s");
        double gflops = num(a, "flops_per_step") / num(a, "step_s") / 1e9;
        double mfu = gflops / (fp32 ? peak32 : peak16);
        std::vector<std::string> row{m, prec, cell(a, "tokens_per_s") + (gpu ? gpu_facts(a) : ""),
                                     fmt_num(gflops, "{:.1f}"), fmt_num(100 * mfu, "{:.0f}%")};
        summary["train"][m][prec] = {{"tokens_per_s", tps}, {"gflops", gflops}, {"mfu", mfu}};
        if (gpu) summary["train"][m][prec]["peak_gpu_mb"] = num(a, "peak_gpu_mb");
        if (gpu && !fp32 && m == "lm-large")
          goals.emplace_back("bf16 MFU >= 40% on the GPU (lm-large)",
                             fmt_num(100 * mfu, "{:.0f}%") + " " + check(mfu >= 0.4));
        if (m == kLmBench && fp32 && !gpu) {
          lm_fp32_tps = tps;
          goals.emplace_back("fp32 MFU >= 50% (LM)",
                             fmt_num(100 * mfu, "{:.0f}%") + " " + check(mfu >= 0.5));
        }
        if (peers.empty()) {
          t.rows.push_back(row);
          continue;
        }
        double best_tps = std::nan("");
        std::string best_label = "-";
        for (const auto& peer : peers) {
          const json& b = best[m + " " + prec][peer.label];
          double x = num(b, "tokens_per_s");
          row.push_back(cell(b, "tokens_per_s") + (gpu ? gpu_facts(b) : ""));
          summary["train"][m][prec]["pytorch"][peer.label] = x;
          // The GPU goals are per variant: 1.3x eager PyTorch, 1.0x torch.compile (either).
          if (gpu && (peer.variant == "eager" || peer.variant.rfind("compile", 0) == 0)) {
            const double want = peer.variant == "eager" ? 1.3 : 1.0;
            goals.emplace_back(
                fmt::format("ropelab >= {:.1f}x {} ({}, {})", want, peer.label, m, prec),
                fmt_num(tps / x, "{:.2f}x") + " " + check(tps / x >= want));
          }
          if (!std::isnan(x) && (std::isnan(best_tps) || x > best_tps)) {
            best_tps = x;
            best_label = peer.label;
          }
        }
        double ratio = tps / best_tps;
        row.push_back(best_label);
        row.push_back(fmt_num(ratio, "{:.2f}x"));
        summary["train"][m][prec]["best_pytorch"] = best_label;
        summary["train"][m][prec]["ratio"] = ratio;
        double want = m == kLmBench ? 1.3 : 1.2;
        if (!gpu)
          goals.emplace_back(
              fmt::format("ropelab >= {:.1f}x the best PyTorch ({}, {})", want, m, prec),
              fmt_num(ratio, "{:.2f}x") + " vs " + best_label + " " + check(ratio >= want));
        t.rows.push_back(row);
      }
    md += fmt::format(
              "## Training\n\nBest of {} interleaved rounds. Model FLOP/s by PaLM's accounting; "
              "MFU against the matmul peak of the same dtype measured above.\n\n",
              o.rounds) +
          t.md() + "\n";
    // What each side ran on (the LM fp32 figure of each): the comparison is like for like only
    // if these agree.
    const std::string first = models.front() + " " + config::to_string(precisions.front());
    md += "Ran on:\n\n- ropelab: " + layout_of(best[first]["ropelab"]) + "\n";
    for (const auto& peer : peers)
      md += "- " + peer.label + ": " + layout_of(best[first][peer.label]) + "\n";
    md += "\n";
    if (thread_checks && std::find(precisions.begin(), precisions.end(),
                                   config::Precision::kFp32) != precisions.end()) {
      auto one = r.ropelab("train lm fp32, 1 thread", "train", file[kLmBench],
                           {"train.precision=fp32", "run.threads=1"}, 0,
                           {{"section", "train"}, {"model", kLmBench}, {"threads", 1}});
      double gain = lm_fp32_tps / num(one, "tokens_per_s");
      summary["train"]["lm_fp32_threads_speedup"] = gain;
      md += fmt::format("LM fp32 on 1 thread: {} tokens/s; on {}: {} ({}).\n\n",
                        cell(one, "tokens_per_s"), threads, fmt_num(lm_fp32_tps),
                        fmt_num(gain, "{:.2f}x"));
      goals.emplace_back(fmt::format("{} threads beat 1 (LM fp32 training)", threads),
                         fmt_num(gain, "{:.2f}x") + " " + check(gain > 1.0));
    }
  }

  if (wanted(o, "positions")) {
    Table t{{"position (LM, fp32)", "step ms", "tokens/s", "cost vs none"}, {}};
    double none_s = std::nan("");
    for (const auto& p : kPositions) {
      auto j = r.ropelab("position " + p, "train", file["lm"], {"model.position.type=" + p}, 0,
                         {{"section", "positions"}, {"position", p}});
      double s = num(j, "step_s");
      if (p == "none") none_s = s;
      double cost = s / none_s - 1.0;
      t.rows.push_back({p, fmt_num(1e3 * s, "{:.0f}"), cell(j, "tokens_per_s"),
                        p == "none" ? "-" : fmt_num(100 * cost, "{:+.1f}%")});
      summary["positions"][p] = {{"step_s", s}, {"cost_vs_none", cost}};
      if (p == "rope")
        goals.emplace_back("RoPE costs <= 5% of step time over none",
                           fmt_num(100 * cost, "{:+.1f}%") + " " + check(cost <= 0.05));
    }
    md += "## Position modules\n\n" + t.md() + "\n";
  }

  if (wanted(o, "attention")) {
    Table t{{"length", "batch", "softmax step s", "softmax tokens/s", "softmax peak MiB",
             "linear step s", "linear tokens/s", "linear peak MiB", "faster"},
            {}};
    std::map<int64_t, double> lin_tps, soft_tps;
    int64_t wins_from = -1;
    for (int64_t len : o.lengths) {
      int64_t batch = std::max<int64_t>(1, o.attention_tokens / len);
      std::vector<std::string> ov{"task.seq_len=" + std::to_string(len),
                                  "train.batch_size=" + std::to_string(batch)};
      std::vector<std::string> row{std::to_string(len), std::to_string(batch)};
      std::map<std::string, json> got;
      for (const std::string k : {"softmax", "linear"}) {
        auto v = ov;
        v.push_back("model.attention.kernel=" + k);
        got[k] = r.ropelab(fmt::format("attention {} {}", k, len), "train", file["lm"], v, 0,
                           {{"section", "attention"}, {"kernel", k}, {"length", len}});
        row.push_back(cell(got[k], "step_s", "{:.2f}"));
        row.push_back(cell(got[k], "tokens_per_s"));
        row.push_back(cell(got[k], "peak_train_mb"));
      }
      soft_tps[len] = num(got["softmax"], "tokens_per_s");
      lin_tps[len] = num(got["linear"], "tokens_per_s");
      bool lin_wins = got["softmax"].contains("error") ||
                      (!got["linear"].contains("error") && lin_tps[len] > soft_tps[len]);
      if (lin_wins && wins_from < 0) wins_from = len;
      if (!lin_wins) wins_from = -1;  // "from some length on": every longer one too
      row.push_back(lin_wins ? "linear" : "softmax");
      t.rows.push_back(row);
      summary["attention"][std::to_string(len)] = {{"softmax", got["softmax"]},
                                                   {"linear", got["linear"]}};
    }
    md += fmt::format(
              "## Attention kernels\n\nLM bench model, fp32, {} tokens per step "
              "(batch = tokens / length), RoPE; linear = elu+1 features, Eq. 19, "
              "causal chunked prefix sums. Peak MiB: the training steps' growth of the "
              "resident set over the model's.\n\n",
              o.attention_tokens) +
          t.md();
    if (lin_tps.count(512) && lin_tps.count(8192)) {
      double keep = lin_tps[8192] / lin_tps[512];
      md += fmt::format(
          "\nLinear attention at 8192 tokens runs at {:.2f} of its tokens/s at 512.\n", keep);
      goals.emplace_back("linear attention at 8192 >= 2/3 of its tokens/s at 512",
                         fmt_num(keep, "{:.2f}") + " " + check(keep >= 2.0 / 3.0));
    }
    md += wins_from > 0
              ? fmt::format("\nLinear attention is faster from length {} on.\n\n", wins_from)
              : std::string(
                    "\nLinear attention is not faster from any length measured "
                    "on.\n\n");
    goals.emplace_back("linear attention beats softmax from some length on",
                       (wins_from > 0 ? "from " + std::to_string(wins_from) : std::string("none")) +
                           " " + check(wins_from > 0));
  }

  if (wanted(o, "decode")) {
    Table t{{"output length", "ms/token, cache", "ms/token, no cache", "speed-up"}, {}};
    double first = std::nan(""), last = std::nan("");
    for (int64_t len : o.decode_lengths) {
      auto j = r.ropelab(fmt::format("decode {}", len), "decode", file["lm"], {}, len,
                         {{"section", "decode"}, {"length", len}});
      double c = num(j, "cache_ms_per_token"), u = num(j, "nocache_ms_per_token");
      if (std::isnan(first)) first = c;
      last = c;
      t.rows.push_back({std::to_string(len), cell(j, "cache_ms_per_token", "{:.2f}"),
                        cell(j, "nocache_ms_per_token", "{:.1f}"), fmt_num(u / c, "{:.0f}x")});
    }
    double growth = last / first;
    md +=
        "## Decoding\n\nLM bench model, batch 1, greedy: the time of the next token after "
        "`output length` tokens.\n\n" +
        t.md() +
        fmt::format("\nWith the cache, a token at {} costs {:.2f}x one at {}.\n\n",
                    o.decode_lengths.back(), growth, o.decode_lengths.front());
    goals.emplace_back("cached decoding: time per token flat (<= 1.25x from first to last)",
                       fmt_num(growth, "{:.2f}x") + " " + check(growth <= 1.25));
  }

  if (wanted(o, "data")) {
    auto j = r.ropelab("batch stream", "data", file["lm"], {}, 2000, {{"section", "data"}});
    double s = num(j, "stream_tokens_per_s");
    md += "## Batch stream\n\n" +
          Table{{"LM stream tokens/s", "LM training tokens/s (fp32)", "stream / training",
                 "peak RSS MiB"},
                {{cell(j, "stream_tokens_per_s"), fmt_num(lm_fp32_tps), fmt_num(s / lm_fp32_tps),
                  cell(j, "peak_rss_mb")}}}
              .md() +
          "\n";
  }
  r.bar.finish();

  if (!goals.empty()) {
    Table g{{"goal", "measured"}, {}};
    for (const auto& [k, v] : goals) g.rows.push_back({k, v});
    md += "## Goals\n\n" + g.md();
  }
  json all{{"libtorch", compat::libtorch_version()},
           {"blas_core", platform::blas_core()},
           {"threads", threads},
           {"steps", o.steps},
           {"rounds", o.rounds},
           {"summary", summary},
           {"points", r.points}};
  fs::write_file_atomic(o.out_dir + "/bench.json", all.dump(2) + "\n");
  fs::write_file_atomic(o.out_dir + "/bench.md", md);
  std::cout << md << "\nwritten: " << o.out_dir << "/bench.md, " << o.out_dir << "/bench.json\n";
}

std::string bench_data(const config::Config& c, int64_t batches, int64_t train_steps) {
  auto r = run::open_new(c, run::DataUse::kPrepare);
  const int threads = r.threads;
  const torch::Device dev = r.device;
  auto ds = r.data->split("train");
  auto& task = r.task;
  auto& model = r.model;
  auto stream = task->stream(ds, true, c.task.seq_len, c.train.batch_size);

  double data_tps = stream_tokens_per_s(*stream, batches);
  auto cfg = train::TrainerConfig::of(c);
  cfg.train.grad_accum = 1;
  train::Trainer trainer(cfg, *task, model, std::move(stream), dev);
  double train_tokens = 0;
  double train_s = 0;
  for (int64_t s = 0; s <= train_steps; ++s) {  // step 0 is a warm-up, not timed
    double before = trainer.state().tokens;
    auto t = clock::now();
    trainer.train_step();
    if (s > 0) {
      train_s += seconds_since(t);
      train_tokens += trainer.state().tokens - before;
    }
  }
  double train_tps = train_tokens / train_s;
  return fmt::format(
      "task {} ({} positions, {} attention, {}), seq_len {}, batch {}, {} threads\n"
      "  batch stream: {:>12.0f} tokens/s ({} batches)\n"
      "  training:     {:>12.0f} tokens/s ({} steps, forward + backward + clip + AdamW)\n"
      "  the stream is {:.0f}x faster than training\n",
      c.task.type(), c.model.position.type(), config::to_string(c.model.attention.kernel),
      config::to_string(c.train.precision), c.task.seq_len, c.train.batch_size, threads, data_tps,
      batches, train_tps, train_steps, data_tps / train_tps);
}

}  // namespace ropelab::lab
