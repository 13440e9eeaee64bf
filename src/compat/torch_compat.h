// The libtorch compatibility unit: the only code that names a libtorch version. ropelab builds
// against Debian 12's libtorch 1.13, Debian 13's 2.6 and the libtorch inside a PyTorch 2.x wheel
// (CPU or CUDA); what differs between them is handled here and in compat/c10d.h, and
// tests/unit/compat_test.cpp checks each difference on the libtorch at hand.
//
//   autocast   1.13 to 2.3: per-backend setters (set_cpu_enabled, set_autocast_cpu_dtype, ...);
//              2.4 on: device-type setters (set_autocast_enabled(type), set_autocast_dtype(type))
//   c10d       1.13: ProcessGroupGloo/NCCL derive from c10d::ProcessGroup;
//              2.x: they derive from c10d::Backend (compat/c10d.h)
#pragma once
#include <c10/core/Device.h>

#include <string>

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

}  // namespace ropelab::compat
