// The parent side of `ropelab bench` (lab/bench.h): each figure measured in its own child
// process (`ropelab bench --point ...`), the PyTorch reference (scripts/bench_pytorch.py)
// interleaved with it round after round, and the report: one table per section, the goals, and
// OUT/bench.md + OUT/bench.json. Model FLOPs by PaLM's accounting (Chowdhery et al. 2022, App. B).
#include <spdlog/fmt/fmt.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <functional>
#include <iostream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <thread>

#include "compat/torch_compat.h"
#include "config/loader.h"
#include "dist/threads.h"
#include "lab/bench.h"
#include "model/attention.h"
#include "util/cuda_info.h"
#include "util/device.h"
#include "util/error.h"
#include "util/fs.h"
#include "util/platform.h"
#include "util/progress.h"
#include "util/signals.h"

namespace ropelab::lab {

using clock = std::chrono::steady_clock;
using json = nlohmann::json;

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

  // steps 0: the options' steps; window > 0: the kernel point's sliding window.
  // ranks > 1: the point runs as that many ranks on this machine (`launch`), each with its
  // share of the threads.
  json ropelab(const std::string& label, const std::string& point, const std::string& cfg,
               const std::vector<std::string>& ov, int64_t length, json meta, int steps = 0,
               int64_t window = 0, int ranks = 1) {
    const std::string exe = platform::shell_quote(platform::executable_path());
    std::string cmd = exe;
    if (ranks > 1) cmd += fmt::format(" launch --nproc {} --timeout 900 --", ranks);
    cmd += " bench --point " + point + " --steps " + std::to_string(steps > 0 ? steps : o.steps) +
           " --length " + std::to_string(length);
    if (window > 0) cmd += " --window " + std::to_string(window);
    if (!cfg.empty()) cmd += " --config " + platform::shell_quote(cfg);
    std::vector<std::string> all = o.overrides;
    all.push_back("run.threads=" + std::to_string(std::max(1, threads / ranks)));
    all.insert(all.end(), ov.begin(), ov.end());
    for (const auto& x : all) cmd += " " + platform::shell_quote(x);
    meta["impl"] = "ropelab";
    return run(label, cmd, meta);
  }

  json pytorch(const Peer& peer, const config::Config& c, BenchModel model,
               const std::string& precision, json meta, int steps = 0) {
    std::string pos = c.model.position.type();
    // The script goes in on stdin, so that a python inside a chroot can read it.
    std::string args =
        fmt::format(
            " - --model {} --precision {} --position {} --d-model {} --n-layers {} "
            "--n-heads {} --d-ff {} --vocab {} --seq-len {} --batch {} --dropout {} "
            "--steps {} --threads {} --variant {} --device {} < ",
            config::to_string(model == BenchModel::kLmLarge ? BenchModel::kLm : model), precision,
            pos == "none" ? "none" : "rope", c.model.d_model, c.model.n_layers, c.model.n_heads,
            c.model.d_ff, c.data.tokenizer.vocab_size, c.task.seq_len, c.train.batch_size,
            c.model.dropout, steps > 0 ? steps : o.steps, threads, peer.variant,
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

// "SkylakeX, 2 + 2 threads, PASSIVE": what one figure ran on (a PyTorch figure names no bf16
// product path: "its own ops").
std::string layout_of(const json& j) {
  if (!j.contains("blas_core")) return "-";
  return fmt::format(
      "BLAS core {}, fp32 dense layers on {}, bf16 products on {}, {} intra-op + {} OpenBLAS "
      "threads, OpenMP wait {}, malloc {}",
      j.value("blas_core", "?"), j.value("fp32_gemm", "BLAS (libtorch)"),
      j.value("bf16_products", "its own ops"), j.value("threads", -1), j.value("blas_threads", -1),
      j.value("omp_wait_policy", "?"), j.value("malloc", "?"));
}

// No --sections: every section but long (about 25 minutes, 10 GiB at 32k tokens).
bool wanted(const BenchOptions& o, BenchSection s) {
  if (o.sections.empty()) return s != BenchSection::kLong;
  return std::find(o.sections.begin(), o.sections.end(), s) != o.sections.end();
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

// a with b's keys added.
json merged(json a, const json& b) {
  a.update(b);
  return a;
}

// One `ropelab bench`: the bench configs, the PyTorch peers, the child-process runner, and what
// the sections write (the markdown report, the goals and the JSON summary).
class Session {
 public:
  explicit Session(const BenchOptions& o);
  void machine();
  void train();
  void positions();
  void attention();
  void long_context();
  void layouts();
  void decode();
  void data();
  // The goals' table; writes OUT/bench.json and OUT/bench.md and prints the report.
  void finish();

 private:
  using Best = std::map<std::string, std::map<std::string, json>>;  // [model precision][impl]
  int64_t points() const;
  Best train_rounds();
  void train_table(Best& best);
  std::vector<std::string> train_row(Best& best, BenchModel m, config::Precision p);
  void train_one_thread();
  const std::string& file(BenchModel m) { return files_[m]; }
  // The PyTorch peers of the long section: the SDPA variants (PyTorch 2.x).
  std::vector<Peer> sdpa_peers() const;
  void long_goals(const std::map<int64_t, std::map<std::string, json>>& got,
                  const std::vector<Peer>& peers);
  void long_window();
  void long_context_parallel();

  const BenchOptions& o_;
  std::map<BenchModel, std::string> files_;
  std::map<BenchModel, config::Config> cfg_;
  std::vector<config::Precision> precisions_;
  std::vector<Peer> peers_;
  bool gpu_ = false;
  int threads_ = 1;
  bool thread_checks_ = false;  // on a GPU the thread count is not the limit: no 1-thread checks
  std::string device_override_;
  std::unique_ptr<Runner> r_;
  std::string md_;
  std::vector<std::pair<std::string, std::string>> goals_;  // goal, measured + verdict
  json summary_;
  double peak32_ = std::nan(""), peak16_ = std::nan(""), lm_fp32_tps_ = std::nan("");
};

Session::Session(const BenchOptions& o) : o_(o) {
  if (o.models.empty()) throw UserError("bench: --models names no bench config");
  if (o.precisions.empty()) throw UserError("bench: --precisions names none of fp32, bf16");
  precisions_ = o.precisions;
  // The training section runs o.models; the other sections use the LM config.
  std::vector<BenchModel> to_load = o.models;
  to_load.push_back(BenchModel::kLm);
  for (auto m : to_load) {
    files_[m] = o.configs_dir + "/" + config::to_string(m) + ".yaml";
    cfg_[m] = config::load_config(files_[m], config::overrides_from_args(o.overrides));
  }
  // A GPU run (run.device cuda, or auto on a machine with one): the GPU's matmul peak, GPU
  // memory, the reference on the GPU, and the GPU's goals.
  gpu_ = is_gpu_run(cfg_[BenchModel::kLm]);
  device_override_ =
      "run.device=" +
      std::string(gpu_ ? device::resolve(cfg_[BenchModel::kLm].run.device).str() : "cpu");
  if (o.compare_pytorch) {
    if (o.python.rfind('/', 0) == 0 && !fs::exists(o.python))
      throw UserError("bench --compare-pytorch: " + o.python +
                      " is missing (apt-get install python3-torch, or --python)");
    peers_ = find_peers(o);
  } else if (!o.pytorch_roots.empty()) {
    throw UserError("bench --pytorch-root needs --compare-pytorch");
  }
  threads_ = o.threads > 0 ? o.threads : dist::usable_cpus().cpus;
  thread_checks_ = threads_ > 1 && !gpu_;
  fs::make_dirs(o.out_dir + "/logs");
  r_ = std::make_unique<Runner>(o, points(), threads_);
  r_->gpu = gpu_;
  md_ = fmt::format(
      "# ropelab bench\n\nlibtorch {}, BLAS core {}, {} threads, OpenMP wait policy {}, {} timed "
      "steps per point (after one warm-up step).\n\n",
      compat::libtorch_version(), platform::blas_core(), threads_, platform::openmp_wait_policy(),
      o.steps);
  if (gpu_) {
    auto g = cuda_info::gpus();
    md_ +=
        fmt::format("GPU: {}, CUDA {}, cuDNN {}; the PyTorch reference runs on the same GPU.\n\n",
                    g.empty() ? std::string("?") : g[0].name, cuda_info::cuda_version(),
                    cuda_info::cudnn_version());
  }
}

// The number of points, for the progress line.
int64_t Session::points() const {
  int64_t n = 0;
  if (wanted(o_, BenchSection::kMachine)) n += thread_checks_ ? 2 : 1;
  if (wanted(o_, BenchSection::kTrain)) {
    int64_t per_model = 0;
    for (auto p : precisions_)
      per_model += 1 + static_cast<int64_t>(peers_.size() *
                                            (gpu_ ? 1 : omp_settings(config::to_string(p)).size()));
    n += o_.rounds * static_cast<int64_t>(o_.models.size()) * per_model + (thread_checks_ ? 1 : 0);
  }
  if (wanted(o_, BenchSection::kPositions))
    n += static_cast<int64_t>(config::variant_names<config::PositionVariant>().size());
  if (wanted(o_, BenchSection::kAttention)) n += 2 * static_cast<int64_t>(o_.lengths.size());
  if (wanted(o_, BenchSection::kLong))
    n += static_cast<int64_t>(o_.long_lengths.size() * (3 + sdpa_peers().size())) + 2 +
         2 * static_cast<int64_t>(o_.context_lengths.size());
  if (wanted(o_, BenchSection::kLayouts)) n += 2 * static_cast<int64_t>(o_.layout_lengths.size());
  if (wanted(o_, BenchSection::kDecode)) n += static_cast<int64_t>(o_.decode_lengths.size());
  if (wanted(o_, BenchSection::kData)) n += 1;
  return n;
}

void Session::machine() {
  auto m =
      r_->ropelab("matmul peak", "matmul", "", {device_override_}, 0, {{"section", "machine"}});
  peak32_ = num(m, "fp32_gflops");
  peak16_ = num(m, "bf16_gflops");
  Table t{{"matmul 2048x2048", "GFLOP/s"},
          {{"fp32, BLAS (libtorch's matmul)", cell(m, "fp32_blas_gflops", "{:.1f}")},
           {"fp32, " + m.value("fp32_gemm", std::string("-")) + " (the dense layers)",
            cell(m, "fp32_dense_gflops", "{:.1f}")},
           {"bf16, libtorch's matmul (oneDNN's matmul)", cell(m, "bf16_mm_gflops", "{:.1f}")},
           {m.value("onednn_bf16", true) ? "bf16, oneDNN's gemm (the dense layers)"
                                         : "bf16, oneDNN's sgemm, widened (the dense layers)",
            cell(m, "bf16_dense_gflops", "{:.1f}")}}};
  if (gpu_)
    t = Table{{"matmul 8192x8192 on " + m.value("gpu", std::string("the GPU")), "GFLOP/s"},
              {{"fp32 (no TF32)", cell(m, "fp32_gflops", "{:.0f}")},
               {"bf16", fmt_num(peak16_, "{:.0f}")}}};
  if (thread_checks_) {
    // The same on one thread: every pool must scale (ATen's, OpenBLAS's, oneDNN's).
    auto one = r_->ropelab("matmul 1 thread", "matmul", "", {"run.threads=1"}, 0,
                           {{"section", "machine"}, {"threads", 1}});
    double s32 = peak32_ / num(one, "fp32_gflops"), s16 = peak16_ / num(one, "bf16_gflops");
    t.rows.push_back({"fp32, 1 thread", cell(one, "fp32_gflops", "{:.1f}")});
    t.rows.push_back({"bf16, 1 thread", cell(one, "bf16_gflops", "{:.1f}")});
    summary_["machine"]["threads_speedup"] = {{"fp32", s32}, {"bf16", s16}};
    goals_.emplace_back(fmt::format("{} threads >= 1.5x 1 thread (fp32 matmul)", threads_),
                        fmt_num(s32, "{:.2f}x") + " " + check(s32 >= 1.5));
    goals_.emplace_back(fmt::format("{} threads >= 1.5x 1 thread (bf16 matmul)", threads_),
                        fmt_num(s16, "{:.2f}x") + " " + check(s16 >= 1.5));
  }
  md_ += "## Machine\n\n" + t.md() + "\nRan on: " + layout_of(m) + ".\n\n";
  if (!gpu_) {  // which kernel the bf16 matmuls ran on (lab/bench.cpp, bf16_matmul_facts)
    md_ += "The yardstick of MFU in each dtype is the faster of its two rows: " +
           fmt_num(peak32_, "{:.1f}") + " GFLOP/s in fp32, " + fmt_num(peak16_, "{:.1f}") +
           " in bf16" +
           (m.value("onednn_bf16", true) ? std::string()
                                         : " (or fp32's where that is faster: the widened bf16 "
                                           "products run on float32's units)") +
           ".\n\n";
    const bool amx = m.value("amx", false);
    for (const char* k : {"fp32_blas_gflops", "fp32_dense_gflops", "bf16_mm_gflops",
                          "bf16_dense_gflops", "fp32_gflops", "bf16_gflops"})
      summary_["machine"][k] = num(m, k);
    summary_["machine"]["bf16_matmul_kernel"] = m.value("bf16_matmul_kernel", "unknown");
    summary_["machine"]["amx"] = amx;
    summary_["machine"]["onednn_bf16"] = m.value("onednn_bf16", true);
    const std::string amx_says =
        amx ? "yes (amx_bf16 in /proc/cpuinfo)" : "no (no amx_bf16 in /proc/cpuinfo)";
    if (!m.value("onednn_bf16", true))  // an AVX2 CPU (util/gemm.h)
      md_ +=
          "oneDNN has no bf16 gemm for this CPU: libtorch's bf16 matmul ran its own loops, "
          "and the dense layers' row is oneDNN's sgemm on operands widened to float32; AMX: " +
          amx_says + ".\n\n";
    else
      md_ += fmt::format("bf16 matmuls ran on oneDNN's `{}` (ISA: {}); AMX: {}.\n\n",
                         m.value("bf16_matmul_kernel", "unknown"), m.value("onednn_isa", "unknown"),
                         amx_says);
  }
}

// Every training figure, best over rounds; who goes first rotates from round to round.
Session::Best Session::train_rounds() {
  Best best;
  for (int round = 0; round < o_.rounds; ++round)
    for (auto m : o_.models)
      for (auto p : precisions_) {
        const std::string prec = config::to_string(p);
        const std::string key = std::string(config::to_string(m)) + " " + prec;
        json meta{{"section", "train"},
                  {"model", config::to_string(m)},
                  {"precision", prec},
                  {"round", round}};
        std::vector<std::function<json()>> runs;
        runs.emplace_back([&] {
          return r_->ropelab("train " + key, "train", file(m), {"train.precision=" + prec}, 0,
                             meta);
        });
        for (const auto& peer : peers_)
          runs.emplace_back([&, peer] { return r_->pytorch(peer, cfg_[m], m, prec, meta); });
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
  return best;
}

// One row of the training table: ropelab's figure, MFU, each peer's, the ratio, and the goals.
std::vector<std::string> Session::train_row(Best& best, BenchModel m, config::Precision p) {
  // On a GPU each figure also shows its step time and peak GPU memory (the allocator's).
  auto gpu_facts = [&](const json& j) {
    return !gpu_ || j.contains("error")
               ? std::string()
               : fmt::format(" ({} ms, {} MiB)", fmt_num(1e3 * num(j, "step_s")),
                             fmt_num(num(j, "peak_gpu_mb")));
  };
  const std::string name = config::to_string(m), prec = config::to_string(p);
  const bool fp32 = p == config::Precision::kFp32;
  auto& figures = best[name + " " + prec];
  const json& a = figures["ropelab"];
  double tps = num(a, "tokens_per_s");
  double gflops = num(a, "flops_per_step") / num(a, "step_s") / 1e9;
  double mfu = gflops / (fp32 ? peak32_ : peak16_);
  // The step's split (lab/step_split.h): the matmuls' share of the step, and the rest in ms.
  const double matmul_s = num(a, "matmul_s"), step_s = num(a, "step_s");
  std::vector<std::string> row{name,
                               prec,
                               cell(a, "tokens_per_s") + gpu_facts(a),
                               fmt_num(gflops, "{:.1f}"),
                               fmt_num(100 * mfu, "{:.0f}%"),
                               fmt_num(100 * matmul_s / step_s, "{:.0f}%"),
                               fmt_num(1e3 * (step_s - matmul_s), "{:.0f}"),
                               fmt_num(100 * mfu * step_s / matmul_s, "{:.0f}%"),
                               fmt_num(100 * num(a, "steal_share"), "{:.1f}%")};
  json& sum = summary_["train"][name][prec];
  sum = {{"tokens_per_s", tps}, {"gflops", gflops}, {"mfu", mfu}};
  if (!std::isnan(num(a, "steal_share"))) sum["steal_share"] = num(a, "steal_share");
  if (!std::isnan(matmul_s)) {
    sum["matmul_share"] = matmul_s / step_s;
    sum["non_matmul_ms"] = 1e3 * (step_s - matmul_s);
    // The matmuls' own rate against the peak: MFU = this x the matmul share, so this is the MFU
    // of a step with no other work, the most that work on the rest can reach.
    sum["matmul_efficiency"] = mfu * step_s / matmul_s;
  }
  if (gpu_) sum["peak_gpu_mb"] = num(a, "peak_gpu_mb");
  if (gpu_ && !fp32 && m == BenchModel::kLmLarge)
    goals_.emplace_back("bf16 MFU >= 40% on the GPU (lm-large)",
                        fmt_num(100 * mfu, "{:.0f}%") + " " + check(mfu >= 0.4));
  if (m == BenchModel::kLm && fp32 && !gpu_) {
    lm_fp32_tps_ = tps;
    goals_.emplace_back("fp32 MFU >= 50% (LM)",
                        fmt_num(100 * mfu, "{:.0f}%") + " " + check(mfu >= 0.5));
  }
  if (peers_.empty()) return row;
  double best_tps = std::nan("");
  std::string best_label = "-";
  for (const auto& peer : peers_) {
    const json& b = figures[peer.label];
    double x = num(b, "tokens_per_s");
    row.push_back(cell(b, "tokens_per_s") + gpu_facts(b));
    sum["pytorch"][peer.label] = x;
    // The GPU goals are per variant: 1.3x eager PyTorch, 1.0x torch.compile (either).
    if (gpu_ && (peer.variant == "eager" || peer.variant.rfind("compile", 0) == 0)) {
      const double want = peer.variant == "eager" ? 1.3 : 1.0;
      goals_.emplace_back(
          fmt::format("ropelab >= {:.1f}x {} ({}, {})", want, peer.label, name, prec),
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
  sum["best_pytorch"] = best_label;
  sum["ratio"] = ratio;
  double want = m == BenchModel::kLm ? 1.3 : 1.2;
  if (!gpu_)
    goals_.emplace_back(
        fmt::format("ropelab >= {:.1f}x the best PyTorch ({}, {})", want, name, prec),
        fmt_num(ratio, "{:.2f}x") + " vs " + best_label + " " + check(ratio >= want));
  return row;
}

void Session::train_table(Best& best) {
  Table t{{"config", "precision", "ropelab tokens/s", "model GFLOP/s", "MFU", "matmul share",
           "rest ms/step", "matmul efficiency", "steal"},
          {}};
  if (gpu_) t.head[2] = "ropelab tokens/s (step, peak GPU memory)";
  for (const auto& peer : peers_) t.head.push_back(peer.label);
  if (!peers_.empty()) {
    t.head.push_back("best PyTorch");
    t.head.push_back("ropelab / best");
  }
  for (auto m : o_.models)
    for (auto p : precisions_) t.rows.push_back(train_row(best, m, p));
  md_ += fmt::format(
             "## Training\n\nBest of {} interleaved rounds. Model FLOP/s by PaLM's accounting; "
             "MFU against the matmul peak of the same dtype measured above. Matmul share: "
             "the self time of matrix products in a profiled step (the median of 3), against "
             "that step's time; rest: the step's other work, in ms; matmul efficiency: the "
             "matmuls' model FLOP/s in that time against the peak, the MFU of a step with no "
             "other work (MFU = efficiency x share; the CPU only); steal: the share of the "
             "machine's CPU time that its hypervisor gave to other guests during the timed "
             "steps (/proc/stat; 0 on bare metal): a figure taken under steal is low.\n\n",
             o_.rounds) +
         t.md() + "\n";
  // What each side ran on (the first figure of each): the comparison is like for like only if
  // these agree.
  const std::string first = std::string(config::to_string(o_.models.front())) + " " +
                            config::to_string(precisions_.front());
  md_ += "Ran on:\n\n- ropelab: " + layout_of(best[first]["ropelab"]) + "\n";
  for (const auto& peer : peers_)
    md_ += "- " + peer.label + ": " + layout_of(best[first][peer.label]) + "\n";
  md_ += "\n";
}

// LM fp32 training on one thread: more threads must beat it.
void Session::train_one_thread() {
  auto one = r_->ropelab("train lm fp32, 1 thread", "train", file(BenchModel::kLm),
                         {"train.precision=fp32", "run.threads=1"}, 0,
                         {{"section", "train"}, {"model", "lm"}, {"threads", 1}});
  double gain = lm_fp32_tps_ / num(one, "tokens_per_s");
  summary_["train"]["lm_fp32_threads_speedup"] = gain;
  md_ += fmt::format("LM fp32 on 1 thread: {} tokens/s; on {}: {} ({}).\n\n",
                     cell(one, "tokens_per_s"), threads_, fmt_num(lm_fp32_tps_),
                     fmt_num(gain, "{:.2f}x"));
  goals_.emplace_back(fmt::format("{} threads beat 1 (LM fp32 training)", threads_),
                      fmt_num(gain, "{:.2f}x") + " " + check(gain > 1.0));
}

void Session::train() {
  Best best = train_rounds();
  train_table(best);
  if (thread_checks_ && std::find(precisions_.begin(), precisions_.end(),
                                  config::Precision::kFp32) != precisions_.end())
    train_one_thread();
}

// Every position module of the schema, its step time against `none`.
void Session::positions() {
  Table t{{"position (LM, fp32)", "step ms", "tokens/s", "cost vs none"}, {}};
  double none_s = std::nan("");
  for (const auto& p : config::variant_names<config::PositionVariant>()) {
    auto j =
        r_->ropelab("position " + p, "train", file(BenchModel::kLm), {"model.position.type=" + p},
                    0, {{"section", "positions"}, {"position", p}});
    double s = num(j, "step_s");
    if (p == config::NoPositionConfig::kName) none_s = s;
    double cost = s / none_s - 1.0;
    t.rows.push_back(
        {p, fmt_num(1e3 * s, "{:.0f}"), cell(j, "tokens_per_s"),
         p == config::NoPositionConfig::kName ? "-" : fmt_num(100 * cost, "{:+.1f}%")});
    summary_["positions"][p] = {{"step_s", s}, {"cost_vs_none", cost}};
    if (p == config::RopeConfig::kName)
      goals_.emplace_back("RoPE costs <= 5% of step time over none",
                          fmt_num(100 * cost, "{:+.1f}%") + " " + check(cost <= 0.05));
  }
  md_ += "## Position modules\n\n" + t.md() + "\n";
}

// Softmax against linear attention at a fixed number of tokens per step, length by length.
void Session::attention() {
  Table t{{"length", "batch", "softmax step s", "softmax tokens/s", "softmax peak MiB",
           "linear step s", "linear tokens/s", "linear peak MiB", "faster"},
          {}};
  std::map<int64_t, double> lin_tps, soft_tps;
  double soft_peak_8192 = std::nan("");
  int64_t wins_from = -1;
  for (int64_t len : o_.lengths) {
    int64_t batch = std::max<int64_t>(1, o_.attention_tokens / len);
    std::vector<std::string> row{std::to_string(len), std::to_string(batch)};
    std::map<config::AttentionKernel, json> got;
    for (auto k : {config::AttentionKernel::kSoftmax, config::AttentionKernel::kLinear}) {
      const std::string name = config::to_string(k);
      got[k] = r_->ropelab(
          fmt::format("attention {} {}", name, len), "train", file(BenchModel::kLm),
          {"task.seq_len=" + std::to_string(len), "train.batch_size=" + std::to_string(batch),
           "model.attention.kernel=" + name},
          0, {{"section", "attention"}, {"kernel", name}, {"length", len}});
      row.push_back(cell(got[k], "step_s", "{:.2f}"));
      row.push_back(cell(got[k], "tokens_per_s"));
      row.push_back(cell(got[k], "peak_train_mb"));
    }
    const json& soft = got[config::AttentionKernel::kSoftmax];
    const json& lin = got[config::AttentionKernel::kLinear];
    lin_tps[len] = num(lin, "tokens_per_s");
    soft_tps[len] = num(soft, "tokens_per_s");
    if (len == 8192) soft_peak_8192 = num(soft, "peak_train_mb");
    bool lin_wins = soft.contains("error") ||
                    (!lin.contains("error") && lin_tps[len] > num(soft, "tokens_per_s"));
    if (lin_wins && wins_from < 0) wins_from = len;
    if (!lin_wins) wins_from = -1;  // "from some length on": every longer one too
    row.push_back(lin_wins ? "linear" : "softmax");
    t.rows.push_back(row);
    summary_["attention"][std::to_string(len)] = {{"softmax", soft}, {"linear", lin}};
  }
  md_ += fmt::format(
             "## Attention kernels\n\nLM bench model, fp32, {} tokens per step "
             "(batch = tokens / length), RoPE; linear = elu+1 features, Eq. 19, "
             "causal chunked prefix sums. Peak MiB: the training steps' growth of the "
             "resident set over the model's.\n\n",
             o_.attention_tokens) +
         t.md();
  if (soft_tps.count(512) && soft_tps.count(8192)) {
    double keep = soft_tps[8192] / soft_tps[512];
    md_ += fmt::format(
        "\nSoftmax attention at 8192 tokens runs at {:.2f} of its tokens/s at 512; "
        "its peak at 8192 is {} MiB.\n",
        keep, fmt_num(soft_peak_8192));
    goals_.emplace_back("softmax attention at 8192 >= 0.35 of its tokens/s at 512",
                        fmt_num(keep, "{:.2f}") + " " + check(keep >= 0.35));
    goals_.emplace_back("softmax attention's peak training memory at 8192 < 2 GiB",
                        fmt_num(soft_peak_8192) + " MiB " + check(soft_peak_8192 < 2048));
  }
  if (lin_tps.count(512) && lin_tps.count(8192)) {
    double keep = lin_tps[8192] / lin_tps[512];
    md_ += fmt::format("\nLinear attention at 8192 tokens runs at {:.2f} of its tokens/s at 512.\n",
                       keep);
    goals_.emplace_back("linear attention at 8192 >= 2/3 of its tokens/s at 512",
                        fmt_num(keep, "{:.2f}") + " " + check(keep >= 2.0 / 3.0));
  }
  md_ += wins_from > 0
             ? fmt::format("\nLinear attention is faster from length {} on.\n\n", wins_from)
             : std::string("\nLinear attention is not faster from any length measured on.\n\n");
  goals_.emplace_back("linear attention beats softmax from some length on",
                      (wins_from > 0 ? "from " + std::to_string(wins_from) : std::string("none")) +
                          " " + check(wins_from > 0));
}

std::vector<Peer> Session::sdpa_peers() const {
  std::vector<Peer> out;
  for (const auto& p : peers_)
    if (p.variant == "sdpa") out.push_back(p);
  return out;
}

// Long-context training at batch 1, length by length: RoPE, T5 and ALiBi (ropelab) and RoPE in
// PyTorch's SDPA, interleaved (who goes first rotates); then one attention layer, global
// against a sliding window, at the longest length.
void Session::long_context() {
  const std::vector<std::pair<std::string, std::string>> families{
      {"rope", "RoPE"}, {"t5", "T5"}, {"alibi", "ALiBi"}};
  const auto peers = sdpa_peers();
  Table t{{"length"}, {}};
  for (const auto& [key, name] : families) {
    t.head.push_back(name + " tokens/s");
    t.head.push_back(name + " peak MiB");
  }
  for (const auto& p : peers) {
    t.head.push_back(p.label + " tokens/s");
    t.head.push_back(p.label + " peak MiB");
    t.head.push_back("RoPE / " + p.label);
  }
  std::map<int64_t, std::map<std::string, json>> got;  // [length][impl]
  for (size_t li = 0; li < o_.long_lengths.size(); ++li) {
    const int64_t len = o_.long_lengths[li];
    json meta{{"section", "long"}, {"length", len}};
    std::vector<std::function<void()>> runs;
    runs.reserve(families.size() + peers.size());
    for (const auto& [key, name] : families)
      runs.emplace_back([&, key = key] {
        got[len][key] =
            r_->ropelab(fmt::format("long {} {}", key, len), "train", file(BenchModel::kLm),
                        {"task.seq_len=" + std::to_string(len), "train.batch_size=1",
                         "model.position.type=" + key},
                        0, merged(meta, {{"position", key}}), o_.long_steps);
      });
    config::Config c = cfg_[BenchModel::kLm];
    c.task.seq_len = len;
    c.train.batch_size = 1;
    for (const auto& p : peers)
      runs.emplace_back([&, p, c] {
        got[len][p.label] = r_->pytorch(p, c, BenchModel::kLm, "fp32", meta, o_.long_steps);
      });
    std::rotate(runs.begin(), runs.begin() + static_cast<std::ptrdiff_t>(li % runs.size()),
                runs.end());
    for (const auto& run : runs) run();
    std::vector<std::string> row{std::to_string(len)};
    for (const auto& [key, name] : families) {
      row.push_back(cell(got[len][key], "tokens_per_s"));
      row.push_back(cell(got[len][key], "peak_rss_mb"));
    }
    for (const auto& p : peers) {
      const json& j = got[len][p.label];
      row.push_back(cell(j, "tokens_per_s"));
      row.push_back(cell(j, "peak_rss_mb"));
      row.push_back(
          fmt_num(num(got[len]["rope"], "tokens_per_s") / num(j, "tokens_per_s"), "{:.2f}x"));
    }
    t.rows.push_back(row);
    for (const auto& [impl, j] : got[len]) summary_["long"][std::to_string(len)][impl] = j;
  }
  md_ += fmt::format(
             "## Long context\n\nLM bench model, fp32, batch 1, {} timed step(s) per point; "
             "peak MiB: the process's peak resident set. PyTorch columns: "
             "scripts/bench_pytorch.py's sdpa variant (scaled_dot_product_attention, causal), "
             "run interleaved with ropelab's points. From 1024 tokens ropelab runs the tiled "
             "kernel for every family (the score biases of T5, ALiBi, Kerple, FIRE and FoX "
             "computed tile by tile) but CoPE and PaTH, whose bias is a stored [B, N, T, S] term "
             "of the layer's content: they keep the quadratic kernel.\n\n",
             o_.long_steps) +
         t.md();
  // What each column ran on (the first length's figures): a peer on a reference BLAS (a root
  // without OpenBLAS) runs its dense layers many times slower, so its ratio says nothing.
  if (!o_.long_lengths.empty()) {
    auto first = got[o_.long_lengths.front()];
    md_ += "\n- ropelab: " + layout_of(first["rope"]) + ".\n";
    for (const auto& p : peers) {
      const json& j = first[p.label];
      md_ += "- " + p.label + ": " + layout_of(j) + ".";
      if (j.value("blas_core", "") == "not OpenBLAS")
        md_ +=
            " **Not on OpenBLAS: its dense layers run on another BLAS, so the ratio to it is "
            "not a like-for-like one.**";
      md_ += "\n";
    }
  }
  long_goals(got, peers);
  long_window();
  long_context_parallel();
}

// RoPE at long lengths on one rank with every thread, against 2 ranks a sequence (ring
// attention, train.context_parallel=2) with half the threads each, interleaved: tokens/s and
// each rank's peak resident set.
void Session::long_context_parallel() {
  if (o_.context_lengths.empty()) return;
  const int ranks = 2;
  const int per_rank = std::max(1, r_->threads / ranks);
  Table t{{"length", fmt::format("1 rank ({} threads) tokens/s", r_->threads), "peak MiB",
           fmt::format("2 ranks a sequence ({} thread{} each) tokens/s", per_rank,
                       per_rank == 1 ? "" : "s"),
           "peak MiB per rank", "speed, 2 ranks / 1", "peak, 2 ranks / 1"},
          {}};
  for (size_t li = 0; li < o_.context_lengths.size(); ++li) {
    const int64_t len = o_.context_lengths[li];
    json meta{{"section", "long"}, {"length", len}, {"position", "rope"}};
    const std::vector<std::string> ov{"task.seq_len=" + std::to_string(len), "train.batch_size=1",
                                      "model.position.type=rope"};
    json one, two;
    std::vector<std::function<void()>> runs{
        [&] {
          one =
              r_->ropelab(fmt::format("long rope {} (1 rank)", len), "train", file(BenchModel::kLm),
                          ov, 0, merged(meta, {{"ranks", 1}}), o_.long_steps);
        },
        [&] {
          auto cp = ov;
          cp.push_back("train.context_parallel=" + std::to_string(ranks));
          two = r_->ropelab(fmt::format("long rope {} (2 ranks a sequence)", len), "train",
                            file(BenchModel::kLm), cp, 0, merged(meta, {{"ranks", ranks}}),
                            o_.long_steps, 0, ranks);
        }};
    if (li % 2 == 1) std::swap(runs[0], runs[1]);
    for (const auto& run : runs) run();
    const double speed = num(two, "tokens_per_s") / num(one, "tokens_per_s");
    const double peak = num(two, "peak_rss_mb") / num(one, "peak_rss_mb");
    t.rows.push_back({std::to_string(len), cell(one, "tokens_per_s"), cell(one, "peak_rss_mb"),
                      cell(two, "tokens_per_s"), cell(two, "peak_rss_mb"),
                      fmt_num(speed, "{:.2f}x"), fmt_num(peak, "{:.2f}")});
    summary_["long"]["context_parallel"][std::to_string(len)] = {{"one", one}, {"two", two}};
    goals_.emplace_back(fmt::format("2 ranks a sequence at {} >= 0.8x one rank's tokens/s", len),
                        fmt_num(speed, "{:.2f}x") + " " + check(speed >= 0.8));
    if (len >= 65536)
      goals_.emplace_back(fmt::format("2 ranks a sequence at {}: each rank's peak <= 0.6 of one "
                                      "rank's",
                                      len),
                          fmt_num(peak, "{:.2f}") + " " + check(peak <= 0.6));
  }
  md_ +=
      "\nContext parallelism (docs/distributed.md): the LM bench model with RoPE, batch 1, "
      "one sequence on one rank against the same sequence split over 2 ranks of this "
      "machine (ring attention on Gloo over 127.0.0.1), the threads shared out; peak MiB per "
      "rank is the larger rank's peak resident set.\n\n" +
      t.md() + "\n";
}

// The long section's goals: 32k trains within 24 GiB, and the ratio to PyTorch's SDPA at 8k
// and 16k.
void Session::long_goals(const std::map<int64_t, std::map<std::string, json>>& got,
                         const std::vector<Peer>& peers) {
  if (got.count(32768) != 0) {
    double worst = 0;
    bool ok = true;
    for (const auto& [impl, j] : got.at(32768)) {
      if (impl.rfind("PyTorch", 0) == 0) continue;
      ok = ok && !j.contains("error");
      worst = std::max(worst, num(j, "peak_rss_mb"));
    }
    goals_.emplace_back("32k tokens train on this machine within 24 GiB (RoPE, T5, ALiBi)",
                        fmt_num(worst / 1024, "{:.1f} GiB") + " " + check(ok && worst < 24576));
  }
  for (const auto& p : peers)
    for (int64_t len : {8192, 16384}) {
      if (got.count(len) == 0) continue;
      const auto& at = got.at(len);
      double ratio = num(at.at("rope"), "tokens_per_s") / num(at.at(p.label), "tokens_per_s");
      goals_.emplace_back(fmt::format("RoPE at {} >= 1.2x {}", len, p.label),
                          fmt_num(ratio, "{:.2f}x") + " " + check(ratio >= 1.2));
    }
}

// One attention layer at the longest length, global against a sliding window.
void Session::long_window() {
  const int64_t len = o_.long_lengths.back(), w = o_.long_window;
  json meta{{"section", "long"}, {"length", len}};
  auto global = r_->ropelab(fmt::format("kernel global {}", len), "kernel", file(BenchModel::kLm),
                            {}, len, merged(meta, {{"window", 0}}), o_.long_steps);
  auto local =
      r_->ropelab(fmt::format("kernel window {} {}", w, len), "kernel", file(BenchModel::kLm), {},
                  len, merged(meta, {{"window", w}}), o_.long_steps, w);
  double speedup = num(global, "step_s") / num(local, "step_s");
  summary_["long"]["kernel"] = {{"global", global}, {"window", local}};
  md_ += fmt::format(
             "\nOne causal attention layer of the LM's heads at {} tokens, forward and backward "
             "(the tiled kernel):\n\n",
             len) +
         Table{{"attention", "s per pass", "added MiB"},
               {{"global", cell(global, "step_s", "{:.2f}"), cell(global, "peak_train_mb")},
                {fmt::format("sliding window {}", w), cell(local, "step_s", "{:.2f}"),
                 cell(local, "peak_train_mb")}}}
             .md() +
         "\n";
  goals_.emplace_back(fmt::format("a window of {} at {} >= 3x faster than global", w, len),
                      fmt_num(speedup, "{:.1f}x") + " " + check(speedup >= 3));
}

// Batch-1 training of the LM with every layer a sliding window against global attention, length
// by length (the two interleaved, who goes first alternating): the local model's time per token
// stays flat from the tiled kernel's first length on, the global one's grows with T.
void Session::layouts() {
  const int64_t w = o_.layout_window;
  const std::string local = fmt::format("window {}", w);
  Table t{{"length", "global tokens/s", "global peak MiB", local + " tokens/s", local + " peak MiB",
           local + " ms/token"},
          {}};
  std::map<int64_t, std::map<std::string, json>> got;
  for (size_t li = 0; li < o_.layout_lengths.size(); ++li) {
    const int64_t len = o_.layout_lengths[li];
    const json meta{{"section", "layouts"}, {"length", len}};
    const std::vector<std::string> ov{"task.seq_len=" + std::to_string(len), "train.batch_size=1",
                                      "model.position.type=rope"};
    auto with_window = ov;
    with_window.push_back(fmt::format("model.layout.kinds.local={{window: {}}}", w));
    std::vector<std::function<void()>> runs{
        [&] {
          got[len]["global"] =
              r_->ropelab(fmt::format("layouts global {}", len), "train", file(BenchModel::kLm), ov,
                          0, merged(meta, {{"window", 0}}), 3);
        },
        [&] {
          got[len]["local"] =
              r_->ropelab(fmt::format("layouts {} {}", local, len), "train", file(BenchModel::kLm),
                          with_window, 0, merged(meta, {{"window", w}}), 3);
        }};
    if (li % 2 == 1) std::swap(runs[0], runs[1]);
    for (const auto& run : runs) run();
    const json &g = got[len]["global"], &l = got[len]["local"];
    t.rows.push_back({std::to_string(len), cell(g, "tokens_per_s"), cell(g, "peak_rss_mb"),
                      cell(l, "tokens_per_s"), cell(l, "peak_rss_mb"),
                      fmt_num(1000.0 / num(l, "tokens_per_s"), "{:.2f}")});
    summary_["layouts"][std::to_string(len)] = got[len];
  }
  md_ += fmt::format(
             "## Layouts\n\nLM bench model, fp32, batch 1, 3 timed steps per point: every layer "
             "global RoPE, or every layer a sliding window of {} (model.layout.kinds.local), "
             "interleaved. From {} tokens both run the tiled kernel, which skips the tiles "
             "outside a window.\n\n",
             w, model::kTiledFrom) +
         t.md();
  // Linear in T: the local model's time per token at the longest length against the tiled
  // kernel's first.
  auto tiled = std::find_if(o_.layout_lengths.begin(), o_.layout_lengths.end(),
                            [](int64_t x) { return x >= model::kTiledFrom; });
  const int64_t first = tiled == o_.layout_lengths.end() ? 0 : *tiled;
  const int64_t last = o_.layout_lengths.back();
  if (first > 0 && last > first) {
    const double growth =
        num(got[first]["local"], "tokens_per_s") / num(got[last]["local"], "tokens_per_s");
    goals_.emplace_back(
        fmt::format("a window of {}: time per token at {} within 1.5x of {} (linear in T)", w, last,
                    first),
        fmt_num(growth, "{:.2f}x") + " " + check(growth <= 1.5));
  }
}

// The time of the next greedy token as the output grows, with and without the cache.
void Session::decode() {
  Table t{{"output length", "ms/token, cache", "ms/token, no cache", "speed-up"}, {}};
  double first = std::nan(""), last = std::nan("");
  for (int64_t len : o_.decode_lengths) {
    auto j = r_->ropelab(fmt::format("decode {}", len), "decode", file(BenchModel::kLm), {}, len,
                         {{"section", "decode"}, {"length", len}});
    double c = num(j, "cache_ms_per_token"), u = num(j, "nocache_ms_per_token");
    if (std::isnan(first)) first = c;
    last = c;
    t.rows.push_back({std::to_string(len), cell(j, "cache_ms_per_token", "{:.2f}"),
                      cell(j, "nocache_ms_per_token", "{:.1f}"), fmt_num(u / c, "{:.0f}x")});
  }
  double growth = last / first;
  md_ +=
      "## Decoding\n\nLM bench model, batch 1, greedy: the time of the next token after "
      "`output length` tokens.\n\n" +
      t.md() +
      fmt::format("\nWith the cache, a token at {} costs {:.2f}x one at {}.\n\n",
                  o_.decode_lengths.back(), growth, o_.decode_lengths.front());
  goals_.emplace_back("cached decoding: time per token flat (<= 1.25x from first to last)",
                      fmt_num(growth, "{:.2f}x") + " " + check(growth <= 1.25));
}

// The real batch stream's tokens/s next to training's.
void Session::data() {
  auto j =
      r_->ropelab("batch stream", "data", file(BenchModel::kLm), {}, 2000, {{"section", "data"}});
  double s = num(j, "stream_tokens_per_s");
  md_ += "## Batch stream\n\n" +
         Table{{"LM stream tokens/s", "LM training tokens/s (fp32)", "stream / training",
                "peak RSS MiB"},
               {{cell(j, "stream_tokens_per_s"), fmt_num(lm_fp32_tps_), fmt_num(s / lm_fp32_tps_),
                 cell(j, "peak_rss_mb")}}}
             .md() +
         "\n";
}

void Session::finish() {
  r_->bar.finish();
  if (!goals_.empty()) {
    Table g{{"goal", "measured"}, {}};
    for (const auto& [k, v] : goals_) g.rows.push_back({k, v});
    md_ += "## Goals\n\n" + g.md();
  }
  json all{{"libtorch", compat::libtorch_version()},
           {"blas_core", platform::blas_core()},
           {"threads", threads_},
           {"steps", o_.steps},
           {"rounds", o_.rounds},
           {"summary", summary_},
           {"points", r_->points}};
  fs::write_file_atomic(o_.out_dir + "/bench.json", all.dump(2) + "\n");
  fs::write_file_atomic(o_.out_dir + "/bench.md", md_);
  std::cout << md_ << "\nwritten: " << o_.out_dir << "/bench.md, " << o_.out_dir << "/bench.json\n";
}

}  // namespace

void run_bench(const BenchOptions& o) {
  Session s(o);
  if (wanted(o, BenchSection::kMachine)) s.machine();
  if (wanted(o, BenchSection::kTrain)) s.train();
  if (wanted(o, BenchSection::kPositions)) s.positions();
  if (wanted(o, BenchSection::kAttention)) s.attention();
  if (wanted(o, BenchSection::kLong)) s.long_context();
  if (wanted(o, BenchSection::kLayouts)) s.layouts();
  if (wanted(o, BenchSection::kDecode)) s.decode();
  if (wanted(o, BenchSection::kData)) s.data();
  s.finish();
}

}  // namespace ropelab::lab
