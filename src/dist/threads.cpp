#include "dist/threads.h"

#include <algorithm>
#include <thread>

#include "dist/world.h"
#include "util/platform.h"

namespace ropelab::dist {

int apply_thread_policy(int64_t requested) {
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const int n =
      requested > 0 ? static_cast<int>(requested) : std::max(1, cores / world().local_size());
  platform::set_threads(n);
  return n;
}

}  // namespace ropelab::dist
