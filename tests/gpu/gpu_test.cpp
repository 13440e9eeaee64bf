// The gpu tier (ctest -L gpu): the CUDA path against the CPU reference. Every test reports
// SKIPPED, with the reason, where libtorch sees no GPU (a CPU build, or no device).
//   - every position family and both attention kernels: logits and gradients on CUDA (fp32)
//     equal the CPU's within the golden tolerance; the score-bias families go through SDPA as an
//     additive mask, plain causal scores through its fused (flash) kernel;
//   - the fused AdamW kernel equals libtorch's AdamW, cross-entropy with label smoothing equals
//     the CPU kernel, dropout draws from the device's generator;
//   - every family trains in bf16 autocast; a run resumed from its checkpoint equals the
//     straight run bit for bit with run.deterministic; cached decoding equals the full forward;
//   - NCCL trains a one-rank run (two ranks where there are two GPUs); running out of GPU memory
//     exits with one line naming the batch size.
// ROPELAB_GPU_TESTS_ON_CPU=1 runs the tier's logic on the CPU (see on_cpu below).
#include <torch/cuda.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "compat/torch_compat.h"
#include "config/loader.h"
#include "helpers.h"
#include "model/attention.h"
#include "model/dropout.h"
#include "model/tiled_attention.h"
#include "model/transformer.h"
#include "model_helpers.h"
#include "tasks/loss.h"
#include "tasks/task.h"
#include "tensor_helpers.h"
#include "train/optim.h"
#include "train/trainer.h"
#include "train_helpers.h"
#include "util/cuda_info.h"
#include "util/error.h"
#include "weights/checkpoint.h"
#include "weights/weights.h"

namespace ropelab {
namespace {

namespace stdfs = std::filesystem;
using model::Transformer;
using test::close;

// ROPELAB_GPU_TESTS_ON_CPU=1 runs the tier's logic on the CPU instead (a check of the tests
// themselves on a machine without a GPU: the CPU-against-CPU comparisons then hold trivially,
// and the tests that need CUDA itself still skip).
bool on_cpu() {
  const char* v = std::getenv("ROPELAB_GPU_TESTS_ON_CPU");
  return v != nullptr && std::string(v) == "1";
}

#define SKIP_WITHOUT_GPU()                                                               \
  if (!on_cpu() && !torch::cuda::is_available())                                         \
  GTEST_SKIP() << "no CUDA GPU: libtorch " << compat::libtorch_version()                 \
               << (cuda_info::built_with_cuda() ? " (CUDA build) sees no device"         \
                                                : " is a CPU build; the gpu tier needs " \
                                                  "a CUDA libtorch and a GPU")
// For the tests that need CUDA itself (the device's facts, NCCL, its memory).
#define SKIP_WITHOUT_REAL_GPU() \
  SKIP_WITHOUT_GPU();           \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "needs a real CUDA device"

const torch::Device kGpu = on_cpu() ? torch::Device(torch::kCPU) : torch::Device(torch::kCUDA, 0);
const std::string kRunDevice = on_cpu() ? "run.device=cpu" : "run.device=cuda";

// Seeds the generator the device's dropout draws from.
void seed_device(uint64_t seed) {
  if (kGpu.is_cuda())
    torch::cuda::manual_seed(seed);
  else
    torch::manual_seed(seed);
}

// Every position family of ropelab (the config's names).
const std::vector<std::string> kFamilies = {"none",  "sinusoidal", "learned", "t5",     "rope",
                                            "alibi", "xpos",       "fire",    "kerple", "fox",
                                            "cope",  "pope",       "comrope", "path",   "mrope"};

// A small model whose attention has a real width (head dim 16) and whose position parameters
// are non-trivial.
config::ModelConfig gpu_model(const std::string& arch, const std::string& pos,
                              const std::string& kernel) {
  auto c = test::tiny_model(arch, pos, kernel);
  c.d_model = 64;
  c.n_heads = 4;
  c.d_ff = 128;
  if (auto* g = std::get_if<config::MropeConfig>(&c.position.opts)) g->grid_width = 3;
  return c;
}

// The same weights on both devices: a model built on the CPU and a copy moved to the GPU.
struct Pair {
  Transformer cpu{nullptr}, gpu{nullptr};
  Pair(const config::ModelConfig& c, int64_t vocab, uint64_t seed) {
    torch::manual_seed(seed);
    cpu = Transformer(c, vocab);
    for (auto& p : cpu->named_parameters())
      if (p.key().find("position") != std::string::npos) p.value().data().uniform_(-1.5, -0.2);
    torch::manual_seed(seed);
    gpu = Transformer(c, vocab);
    torch::NoGradGuard ng;
    auto src = cpu->named_parameters();
    for (auto& p : gpu->named_parameters()) p.value().copy_(src[p.key()]);
    gpu->to(kGpu);
  }
};

// The outputs (computed and backpropagated by each side's `run`) and every parameter's gradient
// of the pair's GPU copy equal its CPU model's: element by element, or, with `grad_norm_rel`, in
// norm (||got - want|| <= grad_norm_rel * ||want||) for sequences long enough that a gradient
// summed over their tokens cancels to values below float32's rounding of the terms.
template <class Run>
void expect_same_outputs_and_gradients(Pair& m, const Run& run, const std::string& what,
                                       double grad_norm_rel = 0) {
  auto want = run(m.cpu, torch::Device(torch::kCPU));
  auto got = run(m.gpu, kGpu).cpu();
  EXPECT_TRUE(close(got, want, 1e-4, 1e-5)) << what << ": outputs";
  auto gc = m.cpu->named_parameters();
  for (const auto& p : m.gpu->named_parameters()) {
    if (!p.value().grad().defined()) continue;
    auto g = p.value().grad().cpu();
    const auto& w = gc[p.key()].grad();
    EXPECT_TRUE(grad_norm_rel > 0 ? test::close_in_norm(g, w, grad_norm_rel)
                                  : close(g, w, 1e-3, 1e-5))
        << what << ": gradient of " << p.key();
  }
}

// Logits and every parameter's gradient of a model on CUDA equal the CPU's (fp32; TF32 is off
// in libtorch's matmuls by default).
void expect_same_on_both(const std::string& arch, const std::string& pos,
                         const std::string& kernel) {
  const std::string what = arch + " " + pos + " " + kernel;
  Pair m(gpu_model(arch, pos, kernel), 40, 7);
  auto tokens = torch::randint(0, 40, {3, 24});
  auto pad = torch::ones({3, 24}, torch::kBool);
  pad.index_put_({1, torch::indexing::Slice(17, 24)}, false);  // a padded row
  auto run = [&](Transformer& t, torch::Device dev) {
    torch::Tensor out;
    if (arch == "encoder") {
      out = t->encode(tokens.to(dev), pad.to(dev));
    } else if (arch == "encdec") {
      auto mem = t->encode(tokens.flip(1).to(dev), pad.to(dev));
      out = t->decode(tokens.to(dev), mem, pad.to(dev));
    } else {
      out = t->decode(tokens.to(dev));
    }
    // A loss that weighs every output differently, so every gradient path is exercised.
    auto w = torch::linspace(-1, 1, out.numel()).view(out.sizes()).to(dev);
    (out * w).sum().backward();
    return out;
  };
  expect_same_outputs_and_gradients(m, run, what);
}

TEST(Gpu, InfoNamesTheDeviceVersionsAndAMeasuredBf16Peak) {
  SKIP_WITHOUT_REAL_GPU();
  EXPECT_TRUE(cuda_info::built_with_cuda());
  auto g = cuda_info::gpus();
  ASSERT_FALSE(g.empty());
  EXPECT_FALSE(g[0].name.empty());
  EXPECT_GT(g[0].memory_gib, 1.0);
  EXPECT_GT(g[0].multiprocessors, 0);
  EXPECT_FALSE(cuda_info::cuda_version().empty());
  // Any GPU that trains transformers multiplies bf16 at more than 10 TFLOP/s.
  EXPECT_GT(cuda_info::bf16_matmul_tflops(kGpu, 4096, 10), 10.0);
  if (compat::has_sdpa()) {
    // A bf16 causal score of head dim 64 takes a fused kernel, never the math fallback.
    auto b = cuda_info::sdpa_backend(kGpu, 64, false);
    EXPECT_TRUE(b == "flash" || b == "cudnn" || b == "efficient") << b;
  }
  auto report = cuda_info::report();
  EXPECT_NE(report.find(g[0].name), std::string::npos) << report;
  EXPECT_NE(report.find("bf16_matmul_peak"), std::string::npos) << report;
}

TEST(Gpu, EveryPositionFamilyMatchesTheCpuReference) {
  SKIP_WITHOUT_GPU();
  for (const auto& pos : kFamilies) expect_same_on_both("decoder", pos, "softmax");
}

TEST(Gpu, EncodersAndEncoderDecodersWithPaddingMatchTheCpuReference) {
  SKIP_WITHOUT_GPU();
  for (const auto& pos : {"sinusoidal", "learned", "t5", "rope", "alibi", "kerple", "fire"}) {
    expect_same_on_both("encoder", pos, "softmax");
    expect_same_on_both("encdec", pos, "softmax");
  }
}

TEST(Gpu, LinearAttentionMatchesTheCpuReference) {
  SKIP_WITHOUT_GPU();
  for (const auto& pos : {"none", "rope", "sinusoidal"}) {
    expect_same_on_both("decoder", pos, "linear");  // the chunked causal form
    expect_same_on_both("encoder", pos, "linear");
  }
}

TEST(Gpu, FusedSdpaEqualsTheUnfusedAttentionInBf16) {
  SKIP_WITHOUT_GPU();
  if (!compat::has_sdpa())
    GTEST_SKIP() << "libtorch " << compat::libtorch_version() << " has no SDPA";
  torch::manual_seed(2);
  auto opts = torch::TensorOptions().device(kGpu);
  auto q = torch::randn({2, 4, 128, 64}, opts), k = torch::randn({2, 4, 128, 64}, opts),
       v = torch::randn({2, 4, 128, 64}, opts);
  auto bias = torch::randn({1, 4, 128, 128}, opts);
  model::AttnMask causal;
  causal.causal = true;
  for (bool with_bias : {false, true}) {
    auto b = with_bias ? bias : torch::Tensor();
    // The reference: the unfused path in float32 on the CPU.
    auto want = model::softmax_attention(q.cpu(), k.cpu(), v.cpu(), with_bias ? bias.cpu() : b,
                                         causal, 0, 0.0, false);
    auto got = model::softmax_attention(q.to(torch::kBFloat16), k.to(torch::kBFloat16),
                                        v.to(torch::kBFloat16), b, causal, 0, 0.0, false);
    EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
    EXPECT_TRUE(close(got.cpu(), want, 2e-2, 2e-2)) << "bias " << with_bias;
  }
}

TEST(Gpu, LongSequencesWithAScoreBiasRunTiledAndMatchTheCpuReference) {
  // From kTiledFrom tokens a tileable score bias (here ALiBi's and T5's form: one value per head
  // and distance) takes the tiled kernel on the GPU, not SDPA with a stored T x S mask: the same
  // outputs and gradients as the CPU's quadratic form, in float32 and under bf16 inputs.
  SKIP_WITHOUT_GPU();
  torch::manual_seed(4);
  const int64_t B = 1, N = 4, T = model::kTiledFrom + 77, H = 32;
  auto q = torch::randn({B, N, T, H}), k = torch::randn({B, N, T, H}),
       v = torch::randn({B, N, T, H});
  model::ScoreBias bias;
  bias.T = T;
  bias.S = T;
  bias.rel_NR = torch::randn({N, 2 * T - 1});
  model::AttnMask causal;
  causal.causal = true;
  auto rel_cpu = bias.rel_NR.clone().requires_grad_(true);
  model::ScoreBias on_cpu = bias;
  on_cpu.rel_NR = rel_cpu;
  model::TileMask tile_causal;
  tile_causal.causal = true;
  auto want = model::tiled_attention_reference(q, k, v, tile_causal, on_cpu);
  auto g = torch::randn_like(want);
  auto g_rel_want = torch::autograd::grad({want}, {rel_cpu}, {g})[0];
  auto rel_gpu = bias.rel_NR.to(kGpu).requires_grad_(true);
  model::ScoreBias on_gpu = bias;
  on_gpu.rel_NR = rel_gpu;
  auto got =
      model::softmax_attention(q.to(kGpu), k.to(kGpu), v.to(kGpu), on_gpu, causal, 0, 0.0, false);
  EXPECT_TRUE(close(got.cpu(), want, 1e-4, 1e-4));
  auto g_rel = torch::autograd::grad({got}, {rel_gpu}, {g.to(kGpu)})[0];
  EXPECT_TRUE(close(g_rel.cpu(), g_rel_want, 1e-3, 1e-3));
  auto bf =
      model::softmax_attention(q.to(kGpu).to(torch::kBFloat16), k.to(kGpu).to(torch::kBFloat16),
                               v.to(kGpu).to(torch::kBFloat16), on_gpu, causal, 0, 0.0, false);
  EXPECT_EQ(bf.scalar_type(), torch::kBFloat16);
  EXPECT_TRUE(close(bf.cpu().to(torch::kFloat32), want, 3e-2, 3e-2));
}

// Hybrid layouts on the device (windows and chunks as SDPA's additive mask, sinks through the
// unfused form or, from kTiledFrom tokens, the tiled kernel; QK-norm, SSMax, the temperature,
// packed documents): outputs and gradients equal the CPU's.
TEST(Gpu, HybridLayoutsSinksAndPackingMatchTheCpuReference) {
  SKIP_WITHOUT_GPU();
  auto c = gpu_model("decoder", "rope", "softmax");
  c.n_layers = 3;
  c.layout.pattern = {"local", "chunked", "global"};
  auto kind = [](const char* pos) {
    config::LayerKindConfig k;
    k.position = test::position(pos);
    return k;
  };
  c.layout.kinds["local"] = kind("alibi");
  c.layout.kinds["local"].window = config::Maybe<int64_t>::of(5);
  c.layout.kinds["chunked"] = kind("rope");
  c.layout.kinds["chunked"].chunk = config::Maybe<int64_t>::of(8);
  c.layout.kinds["global"] = kind("none");
  c.layout.kinds["global"].temperature.scale = 0.5;
  c.layout.kinds["global"].temperature.floor = 4;
  c.attention.qk_norm = c.attention.sinks = true;
  c.attention.ssmax = 0.7;
  for (int64_t T : {int64_t{24}, model::kTiledFrom + 40}) {
    Pair m(c, 40, 9);
    for (auto* t : {&m.cpu, &m.gpu}) {
      torch::NoGradGuard ng;
      for (auto& p : (*t)->named_parameters())
        if (p.key().find("sinks") != std::string::npos)
          p.value().copy_(torch::linspace(-1, 1, p.value().numel()));
    }
    auto tokens = torch::randint(0, 40, {2, T});
    auto docs = (torch::arange(T) >= T / 3).to(torch::kInt64).expand({2, T}).contiguous();
    auto run = [&](Transformer& t, torch::Device dev) {
      auto out = t->decode(tokens.to(dev), {}, {}, nullptr, docs.to(dev));
      auto w = torch::linspace(-1, 1, out.numel()).view(out.sizes()).to(dev);
      (out * w).sum().backward();
      return out;
    };
    // At 2 x 1064 tokens float32 itself is the limit: the CPU's own gradients differ from a
    // float64 run of the same model by up to 2.8e-4 element-wise (final_norm, whose weight
    // gradient reaches 122) and 1.9e-4 in norm, and the H200's differ from the CPU's by as much.
    expect_same_outputs_and_gradients(m, run, "layouts at " + std::to_string(T), T > 24 ? 1e-3 : 0);
  }
}

TEST(Gpu, FusedAdamWEqualsLibtorchsAdamW) {
  SKIP_WITHOUT_GPU();
  if (!compat::has_fused_adamw())
    GTEST_SKIP() << "libtorch " << compat::libtorch_version() << " has no fused AdamW";
  torch::manual_seed(1);
  std::vector<torch::Tensor> a, b;
  for (auto n : {7, 300, 4097}) {
    auto t = torch::randn({n}, torch::TensorOptions().device(kGpu));
    a.push_back(t.clone().requires_grad_());
    b.push_back(t.clone().requires_grad_());
  }
  auto opts = torch::optim::AdamWOptions(3e-3).betas({0.9, 0.98}).eps(1e-8).weight_decay(0.1);
  train::FusedAdamW fused(a, opts);
  torch::optim::AdamW plain(b, opts);
  for (int step = 0; step < 6; ++step) {
    for (size_t i = 0; i < a.size(); ++i) {
      auto g = torch::randn_like(a[i]);
      a[i].mutable_grad() = g.clone();
      b[i].mutable_grad() = g.clone();
    }
    fused.step();
    plain.step();
  }
  for (size_t i = 0; i < a.size(); ++i)
    EXPECT_TRUE(close(a[i].detach().cpu(), b[i].detach().cpu(), 1e-5, 1e-7)) << "tensor " << i;
}

TEST(Gpu, CrossEntropyWithLabelSmoothingEqualsTheCpuKernel) {
  SKIP_WITHOUT_GPU();
  torch::manual_seed(3);
  auto logits = torch::randn({37, 1000}) * 3;
  auto target = torch::randint(0, 1000, {37});
  target.index_put_({torch::indexing::Slice(0, 5)}, -100);
  const double eps = 0.1, V = 1000, a = 1 - eps, b = eps / V;
  auto lc = logits.clone().requires_grad_(), lg = logits.to(kGpu).requires_grad_();
  auto rc = tasks::cross_entropy(lc, target, a, b);
  auto rg = tasks::cross_entropy(lg, target.to(kGpu), a, b);
  rc.loss_sum.backward();
  rg.loss_sum.backward();
  EXPECT_TRUE(close(rg.loss_sum.cpu(), rc.loss_sum, 1e-5, 1e-4));
  EXPECT_TRUE(close(rg.nll_sum.cpu(), rc.nll_sum, 1e-5, 1e-4));
  EXPECT_EQ(rg.targets.cpu().item<int64_t>(), 32);
  EXPECT_EQ(rg.correct.cpu().item<int64_t>(), rc.correct.item<int64_t>());
  EXPECT_TRUE(close(lg.grad().cpu(), lc.grad(), 1e-4, 1e-6));
}

TEST(Gpu, DropoutDrawsFromTheDevicesGenerator) {
  SKIP_WITHOUT_GPU();
  auto x = torch::ones({1 << 20}, torch::TensorOptions().device(kGpu));
  seed_device(5);
  auto d1 = model::dropout(x, 0.25, true);
  seed_device(5);
  auto d2 = model::dropout(x, 0.25, true);
  EXPECT_EQ(d1.device(), kGpu);
  EXPECT_TRUE(torch::equal(d1, d2));  // the same device seed, the same mask
  const double dropped = (d1 == 0).to(torch::kFloat64).mean().cpu().item<double>();
  EXPECT_NEAR(dropped, 0.25, 0.005);
  EXPECT_NEAR(d1.sum().cpu().item<double>(), static_cast<double>(x.numel()), 0.01 * x.numel());
  seed_device(6);
  EXPECT_FALSE(torch::equal(model::dropout(x, 0.25, true), d1));
}

// Every family trains on the GPU under bf16 autocast: 150 steps on one repeated batch bring the
// loss well below its start.
TEST(Gpu, EveryFamilyLearnsOneBatchInBf16) {
  SKIP_WITHOUT_GPU();
  test::TempDir d;
  for (const auto& pos : kFamilies)
    for (const auto& kernel : {"softmax", "linear"}) {
      if (std::string(kernel) == "linear" && pos != "rope") continue;  // RoPE-linear
      auto c = test::tiny_clm_run(
          d, 5, "bf16-" + pos, "max_steps: 150, batch_size: 4, schedule: {warmup: 0}", "",
          {"train.precision=bf16", "train.lr=3e-3", kRunDevice, "model.d_model=64",
           "model.n_heads=4", "model.d_ff=128", "model.position.type=" + pos,
           std::string("model.attention.kernel=") + kernel});
      c.train.schedule.warmup = 0;
      auto task = tasks::make_task(c, 50);
      torch::manual_seed(0);
      auto model = task->build_model();
      model->to(kGpu);
      model->train();
      data::Batch b;
      b.input_BT = torch::randint(4, 50, {4, 16}, torch::kInt64);
      b.target_BT = torch::randint(4, 50, {4, 16}, torch::kInt64);
      b.num_tokens = b.num_targets = 64;
      train::Trainer t(train::TrainerConfig::of(c), *task, model, data::make_repeat_stream(b),
                       kGpu);
      double first = 0, last = 0;
      for (int s = 0; s < 150; ++s) {
        auto r = t.train_step();
        ASSERT_TRUE(r.applied) << pos << " " << kernel << " step " << s;
        if (s == 0) first = r.loss;
        last = r.loss;
      }
      EXPECT_LT(last, 0.5 * first) << pos << " " << kernel << ": " << first << " -> " << last;
      if (std::getenv("ROPELAB_GPU_TESTS_VERBOSE"))
        std::printf("%s %s: %.3f -> %.3f\n", pos.c_str(), kernel, first, last);
    }
}

config::Config resume_run(const test::TempDir& d, const std::string& name) {
  return test::tiny_clm_run(d, 5, name,
                            "max_steps: 10, batch_size: 4, log_every: 1, eval_every: 5, "
                            "eval_batches: 2, checkpoint_every: 5, keep_last: 5, "
                            "schedule: {warmup: 2}, precision: bf16",
                            ", dropout: 0.1",
                            {kRunDevice, "run.deterministic=true", "model.position.type=t5"});
}

TEST(Gpu, ResumedRunEqualsTheStraightRunBitForBitWhenDeterministic) {
  SKIP_WITHOUT_GPU();
  test::TempDir d;
  test::expect_resume_is_bit_exact(
      d, [&](const std::string& name) { return resume_run(d, name); }, 5, 10);
}

TEST(Gpu, CachedDecodingEqualsTheFullForward) {
  SKIP_WITHOUT_GPU();
  for (const auto& arch : {"decoder", "encdec"})
    for (const auto& pos : {"rope", "t5", "alibi", "learned", "fox", "pope"}) {
      torch::manual_seed(3);
      Transformer m(gpu_model(arch, pos, "softmax"), 30);
      m->to(kGpu);
      m->eval();
      torch::NoGradGuard ng;
      auto tokens = torch::randint(0, 30, {2, 9}).to(kGpu);
      torch::Tensor mem, mem_pad;
      if (std::string(arch) == "encdec") {
        mem_pad = torch::ones({2, 7}, torch::kBool);
        mem_pad.index_put_({0, torch::indexing::Slice(5, 7)}, false);
        mem_pad = mem_pad.to(kGpu);
        mem = m->encode(torch::randint(0, 30, {2, 7}).to(kGpu), mem_pad);
      }
      auto full = m->decode(tokens, mem, mem_pad);
      model::DecodeState st;
      std::vector<torch::Tensor> steps{m->decode(tokens.narrow(1, 0, 4), mem, mem_pad, &st)};
      for (int64_t t = 4; t < 9; ++t)
        steps.push_back(m->decode(tokens.narrow(1, t, 1), mem, mem_pad, &st));
      EXPECT_TRUE(close(torch::cat(steps, 1).cpu(), full.cpu(), 1e-4, 1e-5)) << arch << " " << pos;
    }
}

// The CLI on the GPU: a config on a tiny text corpus (byte tokenizer) in `d`.
std::string write_cli_config(const test::TempDir& d) {
  test::tiny_clm_run(d, 5, "cli", "max_steps: 20, batch_size: 4, log_every: 5, eval_every: 10", "",
                     {kRunDevice});
  return d.file("c.yaml");
}

TEST(Gpu, NcclTrainsAOneRankRunAndTwoWhereThereAreTwoGpus) {
  SKIP_WITHOUT_REAL_GPU();
  test::TempDir d;
  auto cfg = write_cli_config(d);
  const int ranks = torch::cuda::device_count() >= 2 ? 2 : 1;
  auto r = test::run(test::ropelab_bin() + " launch --nproc " + std::to_string(ranks) +
                     " -- train " + cfg + " run.device=cuda run.name=nccl");
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("(nccl"), std::string::npos) << "not NCCL:\n" << r.out;
  EXPECT_TRUE(stdfs::exists(d.file("runs/nccl/metrics.h5"))) << r.out;
}

TEST(Gpu, RunningOutOfGpuMemoryExitsWithOneLineNamingTheBatchSize) {
  SKIP_WITHOUT_REAL_GPU();
  test::TempDir d;
  auto cfg = write_cli_config(d);
  // A corpus of more than 20000 windows of 16 bytes.
  std::string text;
  for (int i = 0; i < 12000; ++i)
    text += "line " + std::to_string(i) + " of the corpus, and more.\n";
  test::write(d.file("train.txt"), text);
  // 320k tokens a step: 2.6 GB per 2048-wide activation and 10 GB per FFN activation in each of
  // eight layers; no GPU holds one step.
  auto r = test::run(test::ropelab_bin() + " train " + cfg +
                     " run.name=oom model.d_model=2048 model.n_heads=16 model.d_ff=8192 "
                     "model.n_layers=8 train.batch_size=20000 task.seq_len=16 "
                     "train.precision=fp32");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("error: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("out of GPU memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("train.batch_size=20000"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("frame #"), std::string::npos) << "a stack trace:\n" << r.out;
  EXPECT_EQ(r.out.find("Exception raised from"), std::string::npos) << r.out;
}

}  // namespace
}  // namespace ropelab
