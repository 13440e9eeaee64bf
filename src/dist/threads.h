// The thread policy of a process: run.threads, or 0 for the CPUs this process may use (its
// affinity mask, e.g. `taskset` or a SLURM cpuset, and its cgroup's CPU quota, e.g. a container's
// `--cpus`) shared by the data-parallel ranks on this machine; applied to torch and OpenBLAS.
#pragma once
#include <cstdint>
#include <optional>
#include <string>

namespace ropelab::dist {

// The CPUs this process may use, and what limits them ("the affinity mask", "the cgroup CPU
// quota (cpu.max)", or "the machine's cores" where neither can be read).
struct CpuBudget {
  int cpus = 1;
  std::string source;
};
CpuBudget usable_cpus();

// A cgroup v2 cpu.max ("QUOTA PERIOD" or "max PERIOD") as whole CPUs, rounded up; nullopt for
// no limit or an unreadable text.
std::optional<int> cpus_of_cpu_max(const std::string& text);

// The threads for `requested` (> 0: that many) and why, e.g. "2 CPUs of the affinity mask / 1
// local rank".
struct ThreadChoice {
  int threads = 1;
  std::string why;
};
ThreadChoice choose_threads(int64_t requested);

// Sets (torch and OpenBLAS) and returns choose_threads(requested).threads.
int apply_thread_policy(int64_t requested);

}  // namespace ropelab::dist
