#include "compat/torch_compat.h"

#include <ATen/Functions.h>
#include <ATen/autocast_mode.h>
#include <torch/version.h>

#include <stdexcept>

namespace ropelab::compat {

// libtorch 2.4 replaced the per-backend autocast setters with device-type ones.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define ROPELAB_AUTOCAST_BY_DEVICE_TYPE 1
#endif
// 2.1 gave scaled_dot_product_attention its scale argument and _fused_sdp_choice its enum, and
// has the fused AdamW kernel.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 1)
#define ROPELAB_HAS_SDPA 1
#define ROPELAB_HAS_FUSED_ADAMW 1
#include <ATen/SDPBackend.h>
#endif

std::string libtorch_version() { return TORCH_VERSION; }

int libtorch_version_number() { return TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR; }

void set_bf16_autocast(c10::DeviceType type, bool on) {
#ifdef ROPELAB_AUTOCAST_BY_DEVICE_TYPE
  at::autocast::set_autocast_enabled(type, on);
  if (on) at::autocast::set_autocast_dtype(type, at::kBFloat16);
#else
  if (type == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(on);
    if (on) at::autocast::set_autocast_gpu_dtype(at::kBFloat16);
  } else {
    at::autocast::set_cpu_enabled(on);
    if (on) at::autocast::set_autocast_cpu_dtype(at::kBFloat16);
  }
#endif
}

bool autocast_enabled(c10::DeviceType type) {
#ifdef ROPELAB_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::is_autocast_enabled(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::is_enabled()
                                       : at::autocast::is_cpu_enabled();
#endif
}

c10::ScalarType autocast_dtype(c10::DeviceType type) {
#ifdef ROPELAB_AUTOCAST_BY_DEVICE_TYPE
  return at::autocast::get_autocast_dtype(type);
#else
  return type == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                       : at::autocast::get_autocast_cpu_dtype();
#endif
}

bool has_sdpa() {
#ifdef ROPELAB_HAS_SDPA
  return true;
#else
  return false;
#endif
}

#ifdef ROPELAB_HAS_SDPA
namespace {
c10::optional<at::Tensor> optional_of(const at::Tensor& t) {
  return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
}
}  // namespace
#endif

at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& mask, double dropout, bool causal, double scale) {
#ifdef ROPELAB_HAS_SDPA
  return at::scaled_dot_product_attention(q, k, v, optional_of(mask), dropout, causal, scale);
#else
  (void)q, (void)k, (void)v, (void)mask, (void)dropout, (void)causal, (void)scale;
  throw std::logic_error("compat::sdpa: libtorch " TORCH_VERSION " has no SDPA");
#endif
}

std::string sdpa_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& mask, bool causal, double scale) {
#ifdef ROPELAB_HAS_SDPA
  auto b = static_cast<at::SDPBackend>(
      at::_fused_sdp_choice(q, k, v, optional_of(mask), 0.0, causal, scale));
  switch (b) {
    case at::SDPBackend::flash_attention:
      return "flash";
    case at::SDPBackend::efficient_attention:
      return "efficient";
    case at::SDPBackend::math:
      return "math";
    case at::SDPBackend::error:
      return "none";
    default:
      return static_cast<int>(b) == 3 ? "cudnn" : "other";
  }
#else
  (void)q, (void)k, (void)v, (void)mask, (void)causal, (void)scale;
  return "";
#endif
}

bool has_fused_adamw() {
#ifdef ROPELAB_HAS_FUSED_ADAMW
  return true;
#else
  return false;
#endif
}

void fused_adamw(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 const std::vector<at::Tensor>& exp_avgs,
                 const std::vector<at::Tensor>& exp_avg_sqs, const std::vector<at::Tensor>& steps,
                 double lr, double beta1, double beta2, double weight_decay, double eps) {
#ifdef ROPELAB_HAS_FUSED_ADAMW
  at::_fused_adamw_(params, grads, exp_avgs, exp_avg_sqs, {}, steps, lr, beta1, beta2, weight_decay,
                    eps, /*amsgrad=*/false, /*maximize=*/false);
#else
  (void)params, (void)grads, (void)exp_avgs, (void)exp_avg_sqs, (void)steps, (void)lr, (void)beta1,
      (void)beta2, (void)weight_decay, (void)eps;
  throw std::logic_error("compat::fused_adamw: libtorch " TORCH_VERSION " has no fused AdamW");
#endif
}

}  // namespace ropelab::compat
