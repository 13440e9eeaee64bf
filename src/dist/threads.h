// The thread policy of a process: run.threads, or 0 for the machine's cores shared by the
// data-parallel ranks on this machine; applied to torch and OpenBLAS.
#pragma once
#include <cstdint>

namespace ropelab::dist {

// Sets and returns the number of threads: `requested` (> 0), else the cores divided among the
// local ranks (at least 1).
int apply_thread_policy(int64_t requested);

}  // namespace ropelab::dist
