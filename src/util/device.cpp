#include "util/device.h"

#include <algorithm>
#include <cstdlib>

#include <ATen/CPUGeneratorImpl.h>
#include <ATen/Context.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/Generator.h>
#include <torch/cuda.h>

#include "compat/torch_compat.h"
#include "util/error.h"

namespace ropelab::device {

torch::Device resolve(const std::string& spec) {
  if (spec == "cpu") return torch::kCPU;
  // A rank of a data-parallel run takes its machine's GPU number LOCAL_RANK (as torchrun users
  // expect); one process takes GPU 0.
  int index = 0;
  if (const char* lr = std::getenv("LOCAL_RANK")) index = std::max(0, std::atoi(lr));
  if (spec == "auto" && !torch::cuda::is_available()) return torch::kCPU;
  if (spec.rfind("cuda:", 0) == 0)
    index = std::stoi(spec.substr(5));
  else if (spec != "cuda" && spec != "auto")
    throw UserError("run.device: '" + spec + "' is not a device (auto, cpu, cuda or cuda:N)");
  if (!torch::cuda::is_available())
    throw UserError("run.device: " + spec +
                    " was asked for, but this libtorch has no CUDA device; use run.device=cpu");
  if (index >= static_cast<int>(torch::cuda::device_count()))
    throw UserError("run.device: " + spec + " does not exist (" +
                    std::to_string(torch::cuda::device_count()) + " CUDA device(s))");
  return torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(index));
}

Autocast::Autocast(torch::Device dev, bool on) : dev_(dev), on_(on) {
  if (on_) compat::set_bf16_autocast(dev_.type(), true);
}

Autocast::~Autocast() {
  if (!on_) return;
  at::autocast::clear_cache();
  compat::set_bf16_autocast(dev_.type(), false);
}

void set_deterministic(bool on) {
  if (on) setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8", /*overwrite=*/0);
  at::globalContext().setDeterministicAlgorithms(on, /*warn_only=*/true);
}

bool deterministic() { return at::globalContext().deterministicAlgorithms(); }

std::map<std::string, torch::Tensor> rng_states(torch::Device dev) {
  std::map<std::string, torch::Tensor> out;
  // A handle to the global generator; get_state() is not const in libtorch 1.13.
  at::Generator cpu =
      at::detail::getDefaultCPUGenerator();  // NOLINT(performance-unnecessary-copy-initialization)
  out["cpu"] = cpu.get_state();
  if (dev.is_cuda()) {
    at::Generator gen = at::globalContext().defaultGenerator(dev);
    out[dev.str()] = gen.get_state();
  }
  return out;
}

void set_rng_states(const std::map<std::string, torch::Tensor>& states) {
  for (const auto& [name, state] : states) {
    if (name == "cpu") {
      at::Generator cpu = at::detail::getDefaultCPUGenerator();
      cpu.set_state(state);
      continue;
    }
    torch::Device dev(name);
    if (!dev.is_cuda() || !torch::cuda::is_available() ||
        dev.index() >= static_cast<int>(torch::cuda::device_count()))
      continue;
    at::Generator gen = at::globalContext().defaultGenerator(dev);
    gen.set_state(state);
  }
}

}  // namespace ropelab::device
