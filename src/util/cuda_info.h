// What ropelab knows about the GPUs of a CUDA build: the devices, the CUDA and cuDNN versions,
// which fused attention kernel libtorch picks, peak device memory, and the measured bf16 matmul
// peak (the yardstick of model FLOP utilisation, MFU). In a CPU build (Debian's libtorch) every
// query answers "none" or 0; the file compiles in both (ROPELAB_WITH_CUDA marks a CUDA libtorch).
#pragma once
#include <c10/core/Device.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::cuda_info {

struct Gpu {
  std::string name;  // "NVIDIA H100 80GB HBM3"
  double memory_gib = 0;
  int multiprocessors = 0;
  int major = 0, minor = 0;  // compute capability
};

// Whether this build was compiled against a CUDA libtorch.
bool built_with_cuda();
// The GPUs libtorch sees (none in a CPU build or on a machine without one).
std::vector<Gpu> gpus();
// "13.0" (the CUDA runtime libtorch was built with), "9.10.2" (cuDNN); "" when absent.
std::string cuda_version();
std::string cudnn_version();

// The attention backend scaled_dot_product_attention picks on `dev` for a bf16 causal score of
// `head_dim` (e.g. "flash"), and for the same score with an additive float mask ("efficient");
// "" where libtorch has no SDPA or `dev` is not a GPU.
std::string sdpa_backend(c10::Device dev, int64_t head_dim, bool with_mask);

// Peak bytes the caching allocator has handed out on `dev` since the last reset (0 on the CPU
// or in a CPU build), and the reset.
int64_t peak_memory_bytes(c10::Device dev);
void reset_peak_memory(c10::Device dev);

// bf16 n x n x n matmul throughput on `dev` in TFLOP/s: the mean of `repeats` products after
// three warm-ups, timed around a device synchronisation.
double bf16_matmul_tflops(c10::Device dev, int64_t n, int repeats);

// The lines `ropelab info` prints for the GPUs (device, versions, SDPA, bf16 peak).
std::string report();

}  // namespace ropelab::cuda_info
