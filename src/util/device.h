// The device seam: which device a run uses, mixed precision on it, and the state of every
// random generator a run draws from. Nothing outside this file assumes a CPU.
//
//   run.device: auto (the first CUDA GPU when libtorch has one, else the CPU), cpu, cuda, cuda:N;
//               auto and cuda mean GPU LOCAL_RANK in a data-parallel rank (one GPU per rank)
//   bf16 autocast: CPU autocast (oneDNN/AMX) or CUDA autocast, by device type
//   RNG state: the CPU generator always; the device's CUDA generator when the run is on CUDA
#pragma once
#include <torch/types.h>

#include <map>
#include <string>

namespace ropelab::device {

// Parses and checks run.device (UserError for a CUDA device libtorch does not have).
torch::Device resolve(const std::string& spec);

// bf16 autocast for the forward pass on `dev` while the object lives (a no-op when `on` is
// false). Tables and losses stay fp32 in their own code.
class Autocast {
 public:
  Autocast(torch::Device dev, bool on);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  torch::Device dev_;
  bool on_;
};

// run.deterministic: libtorch's deterministic algorithms (warning, not failing, where an op has
// none), cuBLAS's fixed workspace (CUBLAS_WORKSPACE_CONFIG, read when cuBLAS starts: call this
// before the first GPU matmul), and softmax attention on the unfused path instead of the fused
// SDPA kernels, whose backward passes may add in a varying order. Process-wide.
void set_deterministic(bool on);
bool deterministic();

// The states of every generator a run on `dev` uses, by name ("cpu", "cuda:0").
std::map<std::string, torch::Tensor> rng_states(torch::Device dev);
// Restores states saved by rng_states (names absent here, e.g. a GPU state on a CPU run, are
// skipped).
void set_rng_states(const std::map<std::string, torch::Tensor>& states);

}  // namespace ropelab::device
