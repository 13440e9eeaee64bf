#include "compat/torch_compat.h"

#include <ATen/autocast_mode.h>
#include <torch/version.h>

namespace ropelab::compat {

// libtorch 2.4 replaced the per-backend autocast setters with device-type ones.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 4)
#define ROPELAB_AUTOCAST_BY_DEVICE_TYPE 1
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

}  // namespace ropelab::compat
