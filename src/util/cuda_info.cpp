#include "util/cuda_info.h"

#include <ATen/detail/CUDAHooksInterface.h>
#include <fmt/format.h>
#include <torch/cuda.h>
#include <torch/torch.h>

#include <chrono>

#include "compat/torch_compat.h"

#ifdef ROPELAB_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDACachingAllocator.h>
#endif

namespace ropelab::cuda_info {

bool built_with_cuda() {
#ifdef ROPELAB_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::vector<Gpu> gpus() {
  std::vector<Gpu> out;
  if (!torch::cuda::is_available()) return out;
  const auto n = static_cast<int64_t>(torch::cuda::device_count());
  for (int64_t i = 0; i < n; ++i) {
    Gpu g;
#ifdef ROPELAB_WITH_CUDA
    const auto* p = at::cuda::getDeviceProperties(i);
    g.name = p->name;
    g.memory_gib = static_cast<double>(p->totalGlobalMem) / (1024.0 * 1024.0 * 1024.0);
    g.multiprocessors = p->multiProcessorCount;
    g.major = p->major;
    g.minor = p->minor;
#else
    g.name = "GPU " + std::to_string(i);
#endif
    out.push_back(g);
  }
  return out;
}

std::string cuda_version() {
  if (!at::detail::getCUDAHooks().hasCUDA()) return "";
  const long v = at::detail::getCUDAHooks().versionCUDART();  // 13000 = 13.0
  return fmt::format("{}.{}", v / 1000, (v % 1000) / 10);
}

std::string cudnn_version() {
  if (!at::detail::getCUDAHooks().hasCuDNN()) return "";
  const long v = at::detail::getCUDAHooks().versionCuDNN();
  // cuDNN 9 encodes major * 10000 + minor * 100 + patch; cuDNN 8 major * 1000 + minor * 100.
  if (v >= 90000) return fmt::format("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
  return fmt::format("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100);
}

std::string sdpa_backend(c10::Device dev, int64_t head_dim, bool with_mask) {
  if (!dev.is_cuda() || !compat::has_sdpa()) return "";
  auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(dev);
  auto q = torch::randn({2, 4, 128, head_dim}, opts);
  torch::Tensor mask;
  if (with_mask) mask = torch::zeros({1, 4, 128, 128}, opts);
  return compat::sdpa_backend(q, q, q, mask, !with_mask,
                              1.0 / std::sqrt(static_cast<double>(head_dim)));
}

int64_t peak_memory_bytes(c10::Device dev) {
#ifdef ROPELAB_WITH_CUDA
  if (dev.is_cuda()) {
    auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(dev.index() < 0 ? 0 : dev.index());
    return stats.allocated_bytes[0].peak;  // [0]: the aggregate over pool types
  }
#else
  (void)dev;
#endif
  return 0;
}

void reset_peak_memory(c10::Device dev) {
#ifdef ROPELAB_WITH_CUDA
  if (dev.is_cuda())
    c10::cuda::CUDACachingAllocator::resetPeakStats(dev.index() < 0 ? 0 : dev.index());
#else
  (void)dev;
#endif
}

double bf16_matmul_tflops(c10::Device dev, int64_t n, int repeats) {
  torch::NoGradGuard ng;
  auto opts = torch::TensorOptions().dtype(torch::kBFloat16).device(dev);
  auto a = torch::randn({n, n}, opts), b = torch::randn({n, n}, opts);
  auto c = torch::empty({n, n}, opts);
  auto sync = [&] {
    if (dev.is_cuda()) torch::cuda::synchronize(dev.index() < 0 ? 0 : dev.index());
  };
  for (int i = 0; i < 3; ++i) torch::mm_out(c, a, b);
  sync();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < repeats; ++i) torch::mm_out(c, a, b);
  sync();
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * static_cast<double>(n) * static_cast<double>(n) * static_cast<double>(n) * repeats /
         s / 1e12;
}

std::string report() {
  std::string s;
  const auto list = gpus();
  s += fmt::format("cuda_build: {}\n", built_with_cuda() ? "yes" : "no (CPU libtorch)");
  if (list.empty()) {
    s += "cuda: no GPU\n";
    return s;
  }
  s += fmt::format("cuda: {} (runtime libtorch was built with), cudnn: {}\n", cuda_version(),
                   cudnn_version().empty() ? "none" : cudnn_version());
  for (size_t i = 0; i < list.size(); ++i)
    s += fmt::format("gpu{}: {}, {:.1f} GiB, {} SMs, compute capability {}.{}\n", i, list[i].name,
                     list[i].memory_gib, list[i].multiprocessors, list[i].major, list[i].minor);
  const c10::Device dev(c10::DeviceType::CUDA, 0);
  if (compat::has_sdpa()) {
    s += fmt::format("sdpa: yes; bf16 head dim 64: causal -> {}, additive mask -> {}\n",
                     sdpa_backend(dev, 64, false), sdpa_backend(dev, 64, true));
  } else {
    s += "sdpa: no (libtorch " + compat::libtorch_version() + " has none)\n";
  }
  s += fmt::format("bf16_matmul_peak: {:.0f} TFLOP/s (8192^3 on gpu0, measured now)\n",
                   bf16_matmul_tflops(dev, 8192, 20));
  return s;
}

}  // namespace ropelab::cuda_info
