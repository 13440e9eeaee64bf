// Benchmarks that print figures (never timed unit tests: the machines are shared and noisy).
//
// `ropelab bench` measures, in one session, each figure in its own child process (so every
// measurement starts from the same state and its peak memory is its own):
//   machine    fp32 and bf16 matmul peak (GFLOP/s), the yardstick of MFU (on the run's device:
//              run.device=cuda measures the GPU, 8192^3);
//   train      training tokens/s, model FLOP/s and MFU of the LM, MLM and translation bench
//              configs (configs/bench/), fp32 and bf16; with --compare-pytorch the PyTorch
//              reference (scripts/bench_pytorch.py) of the same model and step runs interleaved
//              with ropelab's, round after round, so ratios share the machine's state: every
//              PyTorch on hand (this system's, and those of --pytorch-root) in each variant it
//              has (eager; SDPA + fused AdamW and torch.compile on 2.x), and the ratio that
//              counts is against the best of them. Both sides inherit ropelab's BLAS core and
//              OpenMP wait policy, and each figure records what it ran on;
//   positions  the step time of every position module relative to `none` (LM, fp32);
//   attention  softmax vs linear attention across sequence lengths at a fixed number of tokens
//              per step: step time, tokens/s, peak training memory, and where linear wins;
//   long       long-context training at batch 1 (2k-32k tokens; RoPE, T5 and ALiBi, the tiled
//              kernel from 1024 tokens on), with --compare-pytorch interleaved with PyTorch's
//              SDPA (2.x: the flash kernel on the CPU) for RoPE; and one causal attention layer,
//              forward and backward, global against a sliding window at the longest length;
//   layouts    batch-1 training of the LM with every layer a sliding window (model.layout) against
//              global attention, 512 to 8192 tokens: a local layer's time per token stays flat
//              (it grows linearly in T), a global one's grows;
//   decode     time per generated token with and without the key/value cache as the output grows;
//   data       the real batch stream's tokens/s next to training's, and peak RSS.
// Training steps are train::Trainer::train_step() itself (forward, loss / targets, backward,
// global-norm clipping, AdamW) on one batch of random token ids of the bench shape: compute does
// not depend on the text.
// Model FLOPs follow PaLM's accounting (Chowdhery et al. 2022, App. B): 6 per parameter of every
// matmul per token it touches, plus 12 * layers * d * context per token for attention.
#pragma once
#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "config/schema.h"

namespace ropelab::lab {

// Batch-stream throughput next to training throughput for a config, measured in one process,
// side by side: data must never be the bottleneck. Returns a printable report.
std::string bench_data(const config::Config& c, int64_t batches, int64_t train_steps);

// fp32 and bf16 n x n matmul throughput in this process, GFLOP/s, each through libtorch's matmul
// (the BLAS in fp32, oneDNN's matmul in bf16) and through the model's dense-layer path (oneDNN's
// sgemm, and its bf16 gemm with float32 output, where the process has them: util/gemm.h).
// fp32_gflops and bf16_gflops, the yardsticks of MFU, are the faster of each pair.
struct MatmulRate {
  double fp32_gflops = 0, bf16_gflops = 0;
  double fp32_blas_gflops = 0, fp32_dense_gflops = 0;
  double bf16_mm_gflops = 0, bf16_dense_gflops = 0;
};
MatmulRate measure_matmul(int n, int repeats);

// Forward + backward model FLOPs of one training step of `c` on a full batch of B sequences of
// T tokens (PaLM's accounting; see above).
double train_step_flops(const config::Config& c, int64_t B, int64_t T);

// The sections of a bench run, in the order they run.
enum class BenchSection {
  kMachine,
  kTrain,
  kPositions,
  kAttention,
  kLong,
  kLayouts,
  kDecode,
  kData
};
// The bench configs (configs/bench/NAME.yaml): the CPU shapes of the LM (whose figures the goals
// are about; the other sections use it), MLM and translation, and lm-large (d=1024, 12 layers,
// seq 2048: the GPU shape).
enum class BenchModel { kLm, kMlm, kTranslation, kLmLarge };

struct BenchOptions {
  std::string configs_dir = "configs/bench";  // NAME.yaml for each BenchModel
  std::string out_dir = "runs/bench";         // bench.json and bench.md
  std::vector<BenchSection> sections;         // empty = all but kLong
  // The training section's models and precisions.
  std::vector<BenchModel> models{BenchModel::kLm, BenchModel::kMlm, BenchModel::kTranslation};
  std::vector<config::Precision> precisions{config::Precision::kFp32, config::Precision::kBf16};
  std::vector<std::string> overrides;  // applied to every bench config
  int steps = 5;                       // timed steps per measurement (+1 warm-up)
  int rounds = 2;                      // interleaved rounds of the training section
  bool compare_pytorch = false;
  // More PyTorch columns: Debian roots holding another release's PyTorch (built by
  // scripts/pytorch_root.sh), run with chroot. /usr/bin/python3's PyTorch is always a column.
  std::vector<std::string> pytorch_roots;
  // The reference's variants (scripts/bench_pytorch.py); sdpa and compile run only on a
  // PyTorch >= 2.
  std::vector<std::string> pytorch_variants{"eager", "sdpa", "compile"};
  // The python whose PyTorch is the reference column (a GPU machine's is usually a venv's).
  std::string python = "/usr/bin/python3";
  int threads = 0;  // 0 = all cores
  std::vector<int64_t> lengths{256, 512, 1024, 2048, 4096, 8192};
  int64_t attention_tokens = 8192;  // tokens per step in the attention section
  std::vector<int64_t> long_lengths{2048, 4096, 8192, 16384, 32768};  // the long section's
  int long_steps = 1;          // timed steps per long-section point (they take minutes at 32k)
  int64_t long_window = 1024;  // the sliding window of the long section's kernel points
  // The long section's context-parallel figures: RoPE on one rank with every thread against
  // 2 ranks a sequence (train.context_parallel) with half the threads each, at these lengths.
  std::vector<int64_t> context_lengths{32768, 65536};
  std::vector<int64_t> layout_lengths{512, 1024, 2048, 4096, 8192};  // the layouts section's
  int64_t layout_window = 256;                                       // its local layers' window
  std::vector<int64_t> decode_lengths{64, 256, 1024, 2048};
};
// Runs the sections, prints the table, writes OUT/bench.json and OUT/bench.md
// (lab/bench_run.cpp).
void run_bench(const BenchOptions& o);

// Seconds since `t` on the steady clock: the timer of every figure.
double seconds_since(std::chrono::steady_clock::time_point t);

// What one child measures.
enum class BenchPoint { kMatmul, kTrain, kDecode, kData, kKernel };

// One measurement (the child side); `config_file` + `overrides` give the model (train, decode,
// data, kernel). kernel: one causal softmax attention layer of the model's heads, forward and
// backward, at `length` tokens, batch 1, with a sliding `window` (0 = global). Returns a JSON
// object.
std::string bench_point(BenchPoint point, const std::string& config_file,
                        const std::vector<std::string>& overrides, int steps, int64_t length,
                        int64_t window = 0);

}  // namespace ropelab::lab

namespace ropelab::config {
ROPELAB_ENUM_NAMES(lab::BenchPoint, "matmul", "train", "decode", "data", "kernel");
ROPELAB_ENUM_NAMES(lab::BenchSection, "machine", "train", "positions", "attention", "long",
                   "layouts", "decode", "data");
ROPELAB_ENUM_NAMES(lab::BenchModel, "lm", "mlm", "translation", "lm-large");
}  // namespace ropelab::config
