#include "dist/cpu_share.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <ctime>
#include <fstream>
#include <sstream>
#include <utility>

#include "dist/threads.h"

namespace ropelab::dist {

double busy_seconds(const std::string& proc_stat, const std::vector<int>& cpus,
                    double ticks_per_s) {
  std::istringstream in(proc_stat);
  double ticks = 0;
  for (std::string line; std::getline(in, line);) {
    // "cpuN user nice system idle iowait irq softirq steal guest guest_nice"; "cpu " is the total
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || line[3] < '0' || line[3] > '9') continue;
    std::istringstream f(line.substr(3));
    int n = -1;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
    if (!(f >> n >> user >> nice >> system >> idle >> iowait >> irq >> softirq)) continue;
    if (std::find(cpus.begin(), cpus.end(), n) == cpus.end()) continue;
    ticks += user + nice + system + irq + softirq;
  }
  return ticks_per_s > 0 ? ticks / ticks_per_s : 0;
}

int threads_for_share(int wanted, int cpus, double others) {
  const double left = static_cast<double>(cpus) - std::max(0.0, others);
  const auto n = static_cast<int>(std::lround(left));
  return std::clamp(n, 1, std::max(1, wanted));
}

CpuShare::CpuShare(int wanted, int cpus, Sampler sampler, Clock clock, double interval_s)
    : active_(wanted > 1 && cpus > 0 && sampler != nullptr && clock != nullptr),
      wanted_(std::max(1, wanted)),
      cpus_(std::max(1, cpus)),
      current_(std::max(1, wanted)),
      sampler_(std::move(sampler)),
      clock_(std::move(clock)),
      interval_s_(interval_s) {}

namespace {

std::string read_all(const char* path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

double clock_s(clockid_t id) {
  timespec ts{};
  clock_gettime(id, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

}  // namespace

CpuShare CpuShare::for_this_process(int wanted) {
  cpu_set_t set;
  CPU_ZERO(&set);
  std::vector<int> mine;
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    for (int c = 0; c < CPU_SETSIZE; ++c)
      if (CPU_ISSET(c, &set)) mine.push_back(c);
  const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
  const bool readable = !mine.empty() && ticks > 0 && !read_all("/proc/stat").empty();
  // A cgroup quota below the mask: the container's CPUs are time slices of the mask's.
  const bool quota = usable_cpus().cpus < static_cast<int>(mine.size());
  if (!readable || quota) return CpuShare(wanted, 0, nullptr, nullptr);
  Sampler sample = [mine, ticks] {
    return CpuSample{busy_seconds(read_all("/proc/stat"), mine, ticks),
                     clock_s(CLOCK_PROCESS_CPUTIME_ID)};
  };
  return CpuShare(wanted, static_cast<int>(mine.size()), std::move(sample),
                  [] { return clock_s(CLOCK_MONOTONIC); });
}

std::optional<CpuShare::Change> CpuShare::poll() {
  if (!active_) return std::nullopt;
  const double t = clock_();
  if (!last_) {
    last_ = sampler_();
    last_wall_ = t;
    return std::nullopt;
  }
  const double wall = t - last_wall_;
  if (wall < interval_s_) return std::nullopt;
  const CpuSample now = sampler_();
  const double others =
      std::max(0.0, (now.busy_s - last_->busy_s) - (now.self_s - last_->self_s)) / wall;
  last_ = now;
  last_wall_ = t;
  const int want = threads_for_share(wanted_, cpus_, others);
  if (want == current_) {
    pending_ = 0;
    return std::nullopt;
  }
  if (want != pending_) {  // the first interval to call for it: wait for a second
    pending_ = want;
    return std::nullopt;
  }
  pending_ = 0;
  current_ = want;
  return Change{want, others};
}

}  // namespace ropelab::dist
