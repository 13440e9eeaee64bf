// Counts the operations that make the host wait for the device, through libtorch's
// RecordFunction observers: reading a tensor's values on the host (item()), operations whose
// output size depends on the values (nonzero, masked_select, unique, boolean-mask indexing), and
// copies between devices (.cpu(), .to(cuda): a blocking copy waits for the device's queue).
// On a GPU each of them stalls the host until the device has caught up (what
// torch.cuda.set_sync_debug_mode reports). On the CPU they cost nothing, so counting them by
// name lets a CPU test assert what a GPU run would do; only the copies, which have no second
// device there, go unseen on a CPU-only machine.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::util {

class HostSyncCounter {
 public:
  // Starts counting, process-wide (one counter at a time), until destroyed.
  HostSyncCounter();
  ~HostSyncCounter();
  HostSyncCounter(const HostSyncCounter&) = delete;
  HostSyncCounter& operator=(const HostSyncCounter&) = delete;

  int64_t count() const;
  // The operations counted, in order ("aten::nonzero", ...): for a test's failure message.
  std::vector<std::string> ops() const;
  // "none", or the count and the operations ("2: aten::nonzero, aten::_local_scalar_dense").
  std::string report() const;
  void reset();

 private:
  uint64_t handle_ = 0;
};

}  // namespace ropelab::util
