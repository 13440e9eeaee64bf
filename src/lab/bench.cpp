#include "lab/bench.h"

#include <dlfcn.h>
#include <spdlog/fmt/fmt.h>
#include <spdlog/spdlog.h>
#include <sys/wait.h>
#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
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
#include "dist/world.h"
#include "lab/step_split.h"
#include "model/decode.h"
#include "model/linear.h"
#include "model/tiled_attention.h"
#include "run/run.h"
#include "tasks/task.h"
#include "train/trainer.h"
#include "util/cuda_info.h"
#include "util/device.h"
#include "util/error.h"
#include "util/float_rows.h"
#include "util/fs.h"
#include "util/gemm.h"
#include "util/platform.h"
#include "util/progress.h"
#include "util/signals.h"

namespace ropelab::lab {

using clock = std::chrono::steady_clock;
using json = nlohmann::json;

double seconds_since(clock::time_point t) {
  return std::chrono::duration<double>(clock::now() - t).count();
}

namespace {

// VmRSS / VmHWM of this process in MiB (Linux /proc/self/status).
double proc_status_mb(const std::string& key) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line))
    if (line.rfind(key + ":", 0) == 0) return std::stod(line.substr(key.size() + 1)) / 1024.0;
  return 0.0;
}

// The machine's CPU time so far from /proc/stat's first line, in ticks: the hypervisor's steal
// (time a virtual CPU was ready but the host ran something else) and all of it. Zeros where
// there is no /proc/stat.
struct CpuTicks {
  double steal = 0, all = 0;
};
CpuTicks cpu_ticks() {
  std::ifstream f("/proc/stat");
  std::string cpu;
  CpuTicks t;
  if (!(f >> cpu) || cpu != "cpu") return t;
  double x = 0;  // user nice system idle iowait irq softirq steal (guest: inside user)
  for (int i = 0; i < 8 && f >> x; ++i) {
    t.all += x;
    if (i == 7) t.steal = x;
  }
  return t;
}

// The steal's share of the machine's CPU time since `t0` (NaN where none was counted).
double steal_share_since(const CpuTicks& t0) {
  const CpuTicks t1 = cpu_ticks();
  return t1.all > t0.all ? (t1.steal - t0.steal) / (t1.all - t0.all) : std::nan("");
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

// What ran the math: the BLAS kernel and every pool's threads (reported beside each figure, so
// that a comparison can show both sides ran the same layout).
json thread_facts() {
  return {{"blas_core", platform::blas_core()},
          {"fp32_gemm", util::fp32_gemm_name()},
          {"bf16_products", util::bf16_products_name()},
          {"threads", at::get_num_threads()},
          {"blas_threads", platform::blas_threads()},
          {"omp_wait_policy", platform::openmp_wait_policy()},
          {"malloc",
           std::string(platform::freed_memory_kept() ? "keeps freed memory" : "glibc defaults") +
               (platform::malloc_huge_pages() ? ", huge pages" : "")}};
}

// Which oneDNN kernel runs a bf16 matmul here ("brg:avx512_core_amx" is AMX's tiles, and
// "brg:avx512_core_bf16" AVX-512's bf16 dot products), and the ISA oneDNN found, read off its
// verbose log of one small product. The log goes to stdout, this process's result channel, so it
// is caught in a temporary file. A libtorch that links oneDNN statically (PyTorch's wheels)
// hides dnnl_set_verbose: then only the CPU's flag is reported.
json bf16_matmul_facts() {
  json j{{"amx", platform::cpu_has_amx_bf16()},
         {"onednn_bf16", util::bf16_gemm_native()},
         {"bf16_matmul_kernel", "unknown"},
         {"onednn_isa", "unknown"}};
  using SetVerbose = int (*)(int);
  auto set_verbose = reinterpret_cast<SetVerbose>(dlsym(RTLD_DEFAULT, "dnnl_set_verbose"));
  std::string dir = std::getenv("TMPDIR") != nullptr ? std::getenv("TMPDIR") : "/tmp";
  std::string path = dir + "/ropelab-onednn-XXXXXX";
  int fd = set_verbose != nullptr ? mkstemp(path.data()) : -1;
  if (fd < 0) return j;
  std::fflush(stdout);
  const int saved = dup(1);
  dup2(fd, 1);
  set_verbose(1);
  {
    torch::NoGradGuard ng;
    auto a = torch::ones({64, 64}, torch::kBFloat16);
    auto c = a.mm(a);
  }
  set_verbose(0);
  std::fflush(stdout);
  dup2(saved, 1);
  close(saved);
  close(fd);
  std::ifstream f(path);
  std::string line;
  auto field_after = [&](const std::string& key) {  // "...,key,VALUE,..." -> VALUE
    auto at = line.find(key);
    if (at == std::string::npos) return std::string();
    auto start = at + key.size();
    return line.substr(start, line.find(',', start) - start);
  };
  while (std::getline(f, line)) {
    if (auto isa = field_after(",isa:"); !isa.empty()) j["onednn_isa"] = isa;
    if (line.find(",exec,") == std::string::npos) continue;
    if (auto impl = field_after(",matmul,"); !impl.empty()) j["bf16_matmul_kernel"] = impl;
  }
  std::remove(path.c_str());
  return j;
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

// Where the step's time goes (lab/step_split.h), from kSplitSteps more steps profiled by
// StepSplit, each split on its own: the one with the median matmul share gives the figures.
// The share is taken within one step, where matmuls and the rest met the same machine (a
// difference between the unprofiled steps' mean and one profiled step moved 3x from run to run
// on a busy VM), and applied to the unprofiled step: matmul_s. The median step's own times are
// kept beside it (profiled_step_s, profiled_matmul_s: its rest is the steadier figure for
// comparing two builds), with the 15 largest ops by self time, in ms a step over the profiled
// steps, largest first (ropelab's fused kernels under their own names: ropelab::masked_softmax,
// ropelab::cross_entropy, ...).
// On a GPU the host sees only launches: no split there.
json step_split(train::Trainer& trainer, double step_s) {
  constexpr int kSplitSteps = 3;
  struct Profiled {
    double share, step_s, matmul_s, unrecorded_s;
  };
  std::vector<Profiled> runs;
  runs.reserve(kSplitSteps);
  std::map<std::string, double> self_s;  // summed over the steps
  for (int k = 0; k < kSplitSteps; ++k) {
    signals::throw_if_stopped("bench", "");
    auto t = clock::now();
    StepSplit split;
    trainer.train_step();
    const double profiled_s = seconds_since(t);
    runs.push_back({split.matmul_s() / profiled_s, profiled_s, split.matmul_s(),
                    std::max(0.0, profiled_s - split.recorded_s())});
    for (const auto& [name, s] : split.self_s()) self_s[name] += s;
  }
  std::sort(runs.begin(), runs.end(),
            [](const Profiled& a, const Profiled& b) { return a.share < b.share; });
  const Profiled& median = runs[runs.size() / 2];
  std::vector<std::pair<double, std::string>> ops;
  ops.reserve(self_s.size());
  for (const auto& [name, s] : self_s) ops.emplace_back(s / kSplitSteps, name);
  std::sort(ops.rbegin(), ops.rend());
  ops.resize(std::min<size_t>(ops.size(), 15));
  json top_ops = json::array();
  for (const auto& [s, name] : ops) top_ops.push_back({name, 1e3 * s});
  // Timing each op costs about a microsecond: on a tiny model that is much of the step, which the
  // share (of the profiled step) carries over to the unprofiled one.
  return {{"matmul_s", median.share * step_s},   {"matmul_share", median.share},
          {"profiled_step_s", median.step_s},    {"profiled_matmul_s", median.matmul_s},
          {"unrecorded_s", median.unrecorded_s}, {"top_ops_ms", top_ops}};
}

// Training tokens/s of the trainer's own step (train::Trainer::train_step: micro-batches,
// loss / targets, backward, global-norm clipping, AdamW) on one batch of the bench shape.
json train_point(const config::Config& c, int steps) {
  auto opened = run::open_new(c, run::DataUse::kNone);
  const int threads = opened.threads;
  const torch::Device dev = opened.device;
  auto& task = opened.task;
  auto& model = opened.model;
  int64_t vocab = opened.vocab, B = c.train.batch_size, T = c.task.seq_len;
  model->train();
  auto batch = synthetic_batch(c, vocab, B, T);
  const int64_t tokens = batch.num_tokens;  // the whole sequences' (a context-parallel group's)
  const auto& world = dist::world();
  if (c.train.context_parallel > 1)  // as ranks: this member's share of the sequences
    batch = data::context_share(batch, static_cast<int>(c.train.context_parallel),
                                tasks::context_group(tasks::task_setup(c, vocab)).member);
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
  CpuTicks ticks;
  for (int s = 0; s <= steps; ++s) {  // step 0 warms up (allocations, oneDNN primitives)
    signals::throw_if_stopped("bench", "");
    if (s == 1 && profile_file != nullptr)
      profile = std::make_unique<StepProfile>(profile_file, dev.is_cuda());
    if (s == 1) ticks = cpu_ticks();
    auto t = clock::now();
    loss = trainer.train_step().loss;  // reads the loss back: waits for an asynchronous device
    if (s > 0) timed += seconds_since(t);
  }
  const double steal = steal_share_since(ticks);
  profile.reset();
  double step_s = timed / steps;
  json split = dev.is_cuda() ? json{{"matmul_s", std::nan("")}} : step_split(trainer, step_s);
  // Every rank's peak (one rank: this process's); the figure is the largest.
  std::vector<double> peaks(static_cast<size_t>(world.size()), 0.0), added = peaks;
  peaks[static_cast<size_t>(world.rank())] = proc_status_mb("VmHWM");
  added[static_cast<size_t>(world.rank())] = peaks[static_cast<size_t>(world.rank())] - rss0;
  peaks = world.sum(peaks, "gathering the peaks");
  added = world.sum(added, "gathering the peaks");
  const double tokens_per_s =  // the data-parallel groups' batches together
      static_cast<double>(tokens) * static_cast<double>(world.size()) /
      static_cast<double>(c.train.context_parallel) / step_s;
  json r{{"tokens_per_s", tokens_per_s},
         {"step_s", step_s},
         {"flops_per_step", train_step_flops(c, B, T)},
         {"params", params},
         {"loss", loss},
         {"peak_rss_mb", *std::max_element(peaks.begin(), peaks.end())},
         {"peak_train_mb", *std::max_element(added.begin(), added.end())},
         {"steal_share", steal},
         {"device", dev.str()}};
  if (world.size() > 1) {
    r["ranks"] = world.size();
    r["context_parallel"] = c.train.context_parallel;
    r["rank_peak_rss_mb"] = peaks;
  }
  if (dev.is_cuda())
    r["peak_gpu_mb"] = static_cast<double>(cuda_info::peak_memory_bytes(dev)) / (1 << 20);
  r.update(split);
  r.update(thread_facts());
  r["threads"] = threads;
  return r;
}

// Time per generated token after `length` tokens, greedy, batch 1: one incremental step with
// the key/value cache, or a forward pass over the whole prefix without it.
json decode_point(const config::Config& c, int steps, int64_t length) {
  auto r = run::open_new(c, run::DataUse::kNone);
  auto& model = r.model;
  model->eval();
  torch::NoGradGuard ng;
  auto prefix = torch::randint(4, r.vocab, {1, length}, torch::kInt64).to(r.device);
  // The next token, waited for (a GPU runs asynchronously): what a token costs.
  auto next = [&](const torch::Tensor& h) {
    auto tok = model->logits(h.narrow(1, h.size(1) - 1, 1)).argmax(-1);  // [1, 1]
    if (r.device.is_cuda()) torch::cuda::synchronize(r.device.index());
    return tok;
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

// One causal attention layer of the model's heads at T tokens, batch 1, forward and backward
// (the tiled kernel, global or with a sliding window): seconds per pass and the memory it adds.
json kernel_point(const config::Config& c, int steps, int64_t T, int64_t window) {
  const int threads = dist::apply_thread_policy(c.run.threads);
  const int64_t N = c.model.n_heads, H = config::head_dim_of(c.model);
  auto opts = torch::TensorOptions().requires_grad(true);
  auto q = torch::randn({1, N, T, H}, opts), k = torch::randn({1, N, T, H}, opts),
       v = torch::randn({1, N, T, H}, opts);
  model::TileMask mask;
  mask.causal = true;
  mask.window = window;
  double rss0 = proc_status_mb("VmRSS"), timed = 0;
  for (int s = 0; s <= steps; ++s) {
    signals::throw_if_stopped("bench", "");
    auto t = clock::now();
    model::tiled_attention(q, k, v, mask).sum().backward();
    if (s > 0) timed += seconds_since(t);
  }
  json r{{"step_s", timed / steps},
         {"length", T},
         {"window", window},
         {"peak_train_mb", proc_status_mb("VmHWM") - rss0}};
  r.update(thread_facts());
  r["threads"] = threads;
  return r;
}

// n x n x n products per second of mm(), GFLOP/s: after a warm-up call, the best of three
// timings of `repeats` calls (a shared machine's hiccup must not lower the yardstick of MFU).
template <class F>
double best_gflops(int n, int repeats, const F& mm) {
  mm();
  double best = 0;
  for (int trial = 0; trial < 3; ++trial) {
    auto t0 = clock::now();
    for (int i = 0; i < repeats; ++i) mm();
    best = std::max(best, 2.0 * n * n * static_cast<double>(n) * repeats / seconds_since(t0) / 1e9);
  }
  return best;
}

// oneDNN's bf16 gemm of the dense layers (util::gemm_bf16: bf16 operands, float32 C, x W^T as
// model/linear.cpp calls it), n x n x n, GFLOP/s.
double bf16_gemm_gflops(int n, int repeats) {
  auto a = torch::randn({n, n}).to(torch::kBFloat16), b = torch::randn({n, n}).to(torch::kBFloat16);
  auto c = torch::empty({n, n});
  return best_gflops(n, repeats, [&] {
    util::gemm_bf16(false, true, n, n, n, util::bf16_bits(a), n, util::bf16_bits(b), n, 0.0F,
                    c.data_ptr<float>(), n);
  });
}

}  // namespace

MatmulRate measure_matmul(int n, int repeats) {
  torch::NoGradGuard ng;
  // mm: torch::matmul (the BLAS in float32, oneDNN in bf16), or the model's dense-layer path
  // (model::linear: oneDNN's sgemm in float32 where the process has it, util/gemm.h).
  auto time_it = [&](torch::ScalarType dt, bool dense_path) {
    auto a = torch::randn({n, n}).to(dt), b = torch::randn({n, n}).to(dt);
    torch::Tensor c;
    return best_gflops(n, repeats,
                       [&] { c = dense_path ? model::linear(a, b) : torch::matmul(a, b); });
  };
  MatmulRate r;
  r.fp32_blas_gflops = time_it(torch::kFloat32, false);
  r.fp32_dense_gflops =
      util::fast_sgemm_available() ? time_it(torch::kFloat32, true) : r.fp32_blas_gflops;
  // The yardstick of MFU is the faster of the two: the best this machine's float32 gemms do.
  r.fp32_gflops = std::max(r.fp32_blas_gflops, r.fp32_dense_gflops);
  r.bf16_mm_gflops = time_it(torch::kBFloat16, false);
  r.bf16_dense_gflops =
      util::bf16_gemm_available() ? bf16_gemm_gflops(n, repeats) : r.bf16_mm_gflops;
  // The same rule in bf16: the dense layers' oneDNN gemm ran 750-760 GFLOP/s where libtorch's
  // bf16 matmul ran 640-660 (2048^2, 2 cores of an AVX-512 EPYC), and a yardstick below the
  // model's own matmuls would overstate MFU.
  r.bf16_gflops = std::max(r.bf16_mm_gflops, r.bf16_dense_gflops);
  // Where the bf16 products are widened to float32 (no bf16 gemm in oneDNN: an AVX2 CPU) they
  // run on float32's units, and float32's peak is theirs: the widened 2048^2 gemm's own blocks
  // ran it at 135 against 176 GFLOP/s while the LM step's products ran at 153.
  if (!util::bf16_gemm_native() && util::bf16_gemm_available())
    r.bf16_gflops = std::max(r.bf16_gflops, r.fp32_gflops);
  return r;
}

double train_step_flops(const config::Config& c, int64_t B, int64_t T) {
  const auto& m = c.model;
  double d = static_cast<double>(m.d_model), ff = static_cast<double>(m.d_ff);
  double V = static_cast<double>(c.data.tokenizer.vocab_size);
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
                        const std::vector<std::string>& overrides, int steps, int64_t length,
                        int64_t window) {
  if (point == BenchPoint::kMatmul) {  // no config: only run.threads and run.device apply
    // The run section as any config reads it (checked by the schema: run.device=gpu is refused,
    // naming the key); the other sections have nothing here to set and are left out.
    // (task.type is the one key every config must give.)
    std::vector<config::Override> run_only{{"task.type=clm", "bench --point matmul"}};
    for (const auto& ov : overrides)
      if (ov.rfind("run.", 0) == 0) run_only.push_back(config::Override{ov, "command line"});
    const config::RunConfig run = config::load_overrides(run_only).run;
    if (run.threads > 0) platform::set_threads(run.threads);
    const torch::Device dev = device::resolve(run.device == "auto" ? "cpu" : run.device);
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
             {"bf16_mm_gflops", bf16},    {"bf16_dense_gflops", bf16},
             {"device", dev.str()},       {"gpu", gpus.empty() ? std::string("?") : gpus[0].name}};
      j.update(thread_facts());
      return j.dump();
    }
    auto r = measure_matmul(2048, 10);
    json j{{"fp32_gflops", r.fp32_gflops},
           {"fp32_blas_gflops", r.fp32_blas_gflops},
           {"fp32_dense_gflops", r.fp32_dense_gflops},
           {"bf16_gflops", r.bf16_gflops},
           {"bf16_mm_gflops", r.bf16_mm_gflops},
           {"bf16_dense_gflops", r.bf16_dense_gflops}};
    j.update(thread_facts());
    j.update(bf16_matmul_facts());
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
    case BenchPoint::kKernel:
      return kernel_point(c, steps, length, window).dump();
    case BenchPoint::kMatmul:
      break;
  }
  return {};
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
