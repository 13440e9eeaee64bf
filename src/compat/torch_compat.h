// The libtorch compatibility unit: the only code that names a libtorch version. ropelab builds
// against Debian 12's libtorch 1.13, Debian 13's 2.6 and the libtorch inside a PyTorch 2.x wheel
// (CPU or CUDA); what differs between them is handled here and in compat/c10d.h, and
// tests/unit/compat_test.cpp checks each difference on the libtorch at hand.
//
//   autocast   1.13 to 2.3: per-backend setters (set_cpu_enabled, set_autocast_cpu_dtype, ...);
//              2.4 on: device-type setters (set_autocast_enabled(type), set_autocast_dtype(type))
//   c10d       1.13: ProcessGroupGloo/NCCL derive from c10d::ProcessGroup;
//              2.x: they derive from c10d::Backend (compat/c10d.h)
//   optim      1.13: Optimizer::state() is keyed by the address of a parameter's TensorImpl
//              printed as a string (c10::guts::to_string, gone in 2.x); 2.x: by the address
//   headers    Debian 13's libtorch-dev 2.6 has no <torch/linalg.h>: call the ATen functions
//              through <torch/types.h> (torch::linalg_solve_triangular, ...)
//   sdpa       scaled_dot_product_attention with an explicit scale: 2.1 on (flash, memory-
//              efficient and cuDNN kernels on CUDA); 1.13 has none
//   adamw      the multi-tensor fused AdamW kernel (at::_fused_adamw_): 2.1 on
#pragma once
#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <sstream>
#include <string>
#include <type_traits>

namespace ropelab::compat {

// "1.13.1", "2.6.0", ... (the headers ropelab was compiled against).
std::string libtorch_version();
// The major and minor version as one number: 113, 206, 211, ...
int libtorch_version_number();

// Switches bf16 autocast on or off for `type` (CPU or CUDA) and sets its dtype to bf16 when on.
void set_bf16_autocast(c10::DeviceType type, bool on);
// Whether autocast is on for `type`, and with which dtype (for the tests).
bool autocast_enabled(c10::DeviceType type);
c10::ScalarType autocast_dtype(c10::DeviceType type);

// Whether this libtorch has scaled_dot_product_attention with a scale argument (2.1 on).
bool has_sdpa();
// softmax(q k^T * scale + mask) v through libtorch's fused attention (the backend it picks:
// flash, memory-efficient, cuDNN or its math fallback), with dropout on the device's generator.
// `mask` is additive (undefined: none) and may not be combined with `causal`. q, k and v share
// one dtype; q and k may be wider than v. Throws when has_sdpa() is false.
at::Tensor sdpa(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                const at::Tensor& mask, double dropout, bool causal, double scale);
// The SDPA backend libtorch picks for these inputs: "flash", "efficient", "cudnn", "math",
// "none" (no fused kernel fits), or "" where this libtorch has no SDPA.
std::string sdpa_backend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                         const at::Tensor& mask, bool causal, double scale);

// Whether this libtorch has the multi-tensor fused AdamW kernel (at::_fused_adamw_, 2.1 on).
bool has_fused_adamw();
// One AdamW step (decoupled decay) over lists of same-device float tensors with the fused kernel:
// params, grads, first and second moments, and each parameter's step count *after* this step
// (one float scalar tensor on the device per parameter). Throws when has_fused_adamw() is false.
void fused_adamw(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& grads,
                 const std::vector<at::Tensor>& exp_avgs,
                 const std::vector<at::Tensor>& exp_avg_sqs, const std::vector<at::Tensor>& steps,
                 double lr, double beta1, double beta2, double weight_decay, double eps);

// The key of a parameter's entry in an optimizer's state map (`state`: Optimizer::state(), or
// state_ in a subclass), from the parameter's unsafeGetTensorImpl().
template <class Map>
typename Map::key_type optimizer_state_key(const Map& /*state*/, const void* tensor_impl) {
  if constexpr (std::is_same_v<typename Map::key_type, std::string>) {
    std::ostringstream os;  // what c10::guts::to_string(TensorImpl*) wrote
    os << tensor_impl;
    return os.str();
  } else {
    return const_cast<void*>(tensor_impl);
  }
}

}  // namespace ropelab::compat
