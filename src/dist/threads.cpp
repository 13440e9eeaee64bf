#include "dist/threads.h"

#include <sched.h>
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>

#include "dist/world.h"
#include "util/platform.h"

namespace ropelab::dist {

namespace {

std::string read_line(const std::string& path) {
  std::ifstream f(path);
  std::string line;
  std::getline(f, line);
  return line;
}

// The tightest cpu.max from this process's cgroup (v2, /proc/self/cgroup's "0::PATH") up to
// the root, or cgroup v1's cpu.cfs_quota_us / cpu.cfs_period_us.
std::optional<int> cgroup_quota() {
  std::optional<int> best;
  auto take = [&](std::optional<int> q) {
    if (q && (!best || *q < *best)) best = q;
  };
  std::ifstream cg("/proc/self/cgroup");
  for (std::string line; std::getline(cg, line);) {
    if (line.rfind("0::", 0) != 0) continue;
    std::string path = line.substr(3);
    while (true) {
      take(cpus_of_cpu_max(read_line("/sys/fs/cgroup" + path + "/cpu.max")));
      if (path.empty() || path == "/") break;
      path = path.substr(0, path.rfind('/'));
    }
  }
  const std::string quota = read_line("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
                    period = read_line("/sys/fs/cgroup/cpu/cpu.cfs_period_us");
  if (!quota.empty() && !period.empty() && quota != "-1")
    take(cpus_of_cpu_max(quota + " " + period));
  return best;
}

}  // namespace

std::optional<int> cpus_of_cpu_max(const std::string& text) {
  std::istringstream in(text);
  std::string quota;
  double period = 0;
  if (!(in >> quota >> period) || quota == "max" || period <= 0) return std::nullopt;
  double q = 0;
  try {
    q = std::stod(quota);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  if (q <= 0) return std::nullopt;
  return std::max(1, static_cast<int>(std::ceil(q / period - 1e-9)));
}

CpuBudget usable_cpus() {
  CpuBudget b{static_cast<int>(std::max(1u, std::thread::hardware_concurrency())),
              "the machine's cores"};
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
    b = {CPU_COUNT(&set), "the affinity mask"};
  if (auto q = cgroup_quota(); q && *q < b.cpus) b = {*q, "the cgroup CPU quota (cpu.max)"};
  return b;
}

ThreadChoice choose_threads(int64_t requested) {
  if (requested > 0)
    return {static_cast<int>(requested), "run.threads = " + std::to_string(requested)};
  const CpuBudget b = usable_cpus();
  // An srun task has CPUs of its own (--cpus-per-task): not shared with the node's other tasks.
  const char* step = std::getenv("SLURM_STEP_ID");
  const char* per_task = std::getenv("SLURM_CPUS_PER_TASK");
  if (step != nullptr && per_task != nullptr && std::getenv("WORLD_SIZE") == nullptr) {
    const int n = std::atoi(per_task);
    if (n > 0)
      return {std::min(n, b.cpus), fmt::format("SLURM_CPUS_PER_TASK = {}, {} CPU{} of {}", n,
                                               b.cpus, b.cpus == 1 ? "" : "s", b.source)};
  }
  const int ranks = world().local_size();
  return {std::max(1, b.cpus / ranks),
          fmt::format("{} CPU{} of {} / {} local rank{}", b.cpus, b.cpus == 1 ? "" : "s", b.source,
                      ranks, ranks == 1 ? "" : "s")};
}

int apply_thread_policy(int64_t requested) {
  const int n = choose_threads(requested).threads;
  platform::set_threads(n);
  return n;
}

}  // namespace ropelab::dist
