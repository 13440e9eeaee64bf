// The default thread count (dist/threads.h): the CPUs the process may use, from its affinity
// mask and its cgroup's CPU quota, shared by the local ranks; run.threads overrides it.
#include <gtest/gtest.h>
#include <sched.h>

#include <cstdlib>

#include "dist/threads.h"

namespace ropelab::dist {
namespace {

TEST(Threads, CpuMaxIsWholeCpusRoundedUp) {
  EXPECT_EQ(cpus_of_cpu_max("max 100000"), std::nullopt);
  EXPECT_EQ(cpus_of_cpu_max("200000 100000"), 2);
  EXPECT_EQ(cpus_of_cpu_max("150000 100000"), 2);
  EXPECT_EQ(cpus_of_cpu_max("50000 100000"), 1);
  EXPECT_EQ(cpus_of_cpu_max("400000 100000\n"), 4);
  EXPECT_EQ(cpus_of_cpu_max(""), std::nullopt);
  EXPECT_EQ(cpus_of_cpu_max("garbage"), std::nullopt);
  EXPECT_EQ(cpus_of_cpu_max("-1 100000"), std::nullopt);
}

TEST(Threads, TheDefaultFollowsTheAffinityMask) {
  // As under `taskset -c C`: this thread pinned to one CPU it may use, then restored.
  cpu_set_t saved;
  ASSERT_EQ(sched_getaffinity(0, sizeof(saved), &saved), 0);
  const int allowed = CPU_COUNT(&saved);
  EXPECT_LE(usable_cpus().cpus, allowed);
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  ASSERT_EQ(sched_setaffinity(0, sizeof(one), &one), 0);
  const CpuBudget b = usable_cpus();
  const ThreadChoice c = choose_threads(0), given = choose_threads(3);
  ASSERT_EQ(sched_setaffinity(0, sizeof(saved), &saved), 0);
  EXPECT_EQ(b.cpus, 1);
  EXPECT_EQ(b.source, "the affinity mask");
  EXPECT_EQ(c.threads, 1);
  EXPECT_EQ(c.why, "1 CPU of the affinity mask / 1 local rank");
  EXPECT_EQ(given.threads, 3);
  EXPECT_EQ(given.why, "run.threads = 3");
  EXPECT_EQ(usable_cpus().cpus <= allowed, true);
}

TEST(Threads, AnSrunTaskKeepsItsCpusPerTask) {
  // Each srun task has a cpuset of its own: SLURM_CPUS_PER_TASK, not divided by the node's tasks.
  setenv("SLURM_STEP_ID", "0", 1);
  setenv("SLURM_CPUS_PER_TASK", "1", 1);
  const ThreadChoice c = choose_threads(0);
  unsetenv("SLURM_STEP_ID");
  unsetenv("SLURM_CPUS_PER_TASK");
  EXPECT_EQ(c.threads, 1);
  EXPECT_NE(c.why.find("SLURM_CPUS_PER_TASK = 1"), std::string::npos) << c.why;
}

}  // namespace
}  // namespace ropelab::dist
