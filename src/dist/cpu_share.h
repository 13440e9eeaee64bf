// Sharing the CPUs with other processes (BENCHMARKS.md, "Sharing a machine").
//
// libgomp's workers spin after each parallel region, which is what makes a process alone fast.
// When two processes' threads together outnumber the cores, a spinning worker holds the core
// that the thread it waits for needs: each of two trainings on 2 cores kept 0.23 of its speed
// alone. CpuShare watches, between training steps, how many of this process's CPUs other
// processes keep busy: the busy time of the affinity mask's CPUs in /proc/stat minus this
// process's own CPU time, over the wall time. While they hold some, the trainer runs on the CPUs
// left (never fewer than 1 thread); once they are free again it goes back to its thread count.
// No thread then waits for a core that another process holds, and a process alone keeps its
// threads and its spin. A change needs two intervals in a row that call for it.
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ropelab::dist {

// The busy seconds of the given CPUs in a /proc/stat text: over their "cpuN" lines, user + nice
// + system + irq + softirq ticks (idle, iowait and steal are not busy; guest time is inside
// user), divided by ticks_per_s. A CPU without a line counts 0.
double busy_seconds(const std::string& proc_stat, const std::vector<int>& cpus, double ticks_per_s);

// The threads to run while `others` of `cpus` CPUs are busy with other processes (a mean over
// an interval): the CPUs left, rounded to the nearest, between 1 and `wanted`.
int threads_for_share(int wanted, int cpus, double others);

// One reading of the CPU clocks CpuShare compares: the watched CPUs' busy seconds and this
// process's CPU seconds (all its threads).
struct CpuSample {
  double busy_s = 0;
  double self_s = 0;
};

class CpuShare {
 public:
  using Sampler = std::function<CpuSample()>;
  using Clock = std::function<double()>;  // wall seconds, monotonic
  // A thread count to change to, and the CPUs other processes kept busy when it was decided.
  struct Change {
    int threads = 1;
    double others = 0;
  };
  // wanted: the run's thread count; cpus: how many CPUs the sampler watches (for_this_process:
  // /proc/stat's lines of the affinity mask, and CLOCK_PROCESS_CPUTIME_ID); clock: the wall time
  // that poll() reads every call (the sampler only once an interval has passed).
  CpuShare(int wanted, int cpus, Sampler sampler, Clock clock, double interval_s = 1.0);
  // Watching this process's own CPUs, or inactive (never changes anything) where that does not
  // apply: one thread wanted, no /proc/stat, or a cgroup CPU quota tighter than the affinity
  // mask (the mask's CPUs are then shared by design, and their load is not a neighbour's).
  static CpuShare for_this_process(int wanted);

  bool active() const { return active_; }
  int threads() const { return current_; }
  // Call between steps: once interval_s has passed since the last reading, reads the clocks, and
  // returns the new thread count when this interval and the one before both call for it.
  std::optional<Change> poll();

 private:
  bool active_ = false;
  int wanted_ = 1, cpus_ = 1, current_ = 1;
  Sampler sampler_;
  Clock clock_;
  double interval_s_ = 1.0;
  std::optional<CpuSample> last_;
  double last_wall_ = 0;
  int pending_ = 0;  // the count the last interval called for, if it differs from current_
};

}  // namespace ropelab::dist
