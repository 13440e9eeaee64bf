// Sharing the CPUs with other processes (dist/cpu_share.h): /proc/stat's busy time of this
// process's CPUs minus its own CPU time is what other processes hold, and the thread count
// follows the CPUs left after two intervals in a row call for it.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "dist/cpu_share.h"

namespace ropelab::dist {
namespace {

TEST(CpuShare, BusyTimeSumsTheListedCpusOnly) {
  const std::string stat =
      "cpu  900 90 900 9000 90 9 9 90 0 0\n"
      "cpu0 100 10 50 1000 7 3 2 40 30 0\n"
      "cpu1 200 20 100 2000 9 1 1 50 0 0\n"
      "cpu12 1000 0 0 0 0 0 0 0 0 0\n"
      "intr 12345 1 2 3\n"
      "ctxt 999\n";
  // user + nice + system + irq + softirq; idle, iowait and steal are not busy
  EXPECT_DOUBLE_EQ(busy_seconds(stat, {0}, 100), (100 + 10 + 50 + 3 + 2) / 100.0);
  EXPECT_DOUBLE_EQ(busy_seconds(stat, {1}, 100), (200 + 20 + 100 + 1 + 1) / 100.0);
  EXPECT_DOUBLE_EQ(busy_seconds(stat, {0, 1}, 100), (165 + 322) / 100.0);
  EXPECT_DOUBLE_EQ(busy_seconds(stat, {12}, 100), 10.0);  // cpu12, not cpu1
  EXPECT_DOUBLE_EQ(busy_seconds(stat, {5}, 100), 0.0);    // no such line
  EXPECT_DOUBLE_EQ(busy_seconds("", {0}, 100), 0.0);
  EXPECT_DOUBLE_EQ(busy_seconds("cpu0 garbage\n", {0}, 100), 0.0);
}

TEST(CpuShare, ThreadsAreTheCpusLeftBetweenOneAndWanted) {
  EXPECT_EQ(threads_for_share(2, 2, 0.0), 2);
  EXPECT_EQ(threads_for_share(2, 2, 0.4), 2);  // a light neighbour: keep the threads
  EXPECT_EQ(threads_for_share(2, 2, 0.6), 1);
  EXPECT_EQ(threads_for_share(2, 2, 1.0), 1);
  EXPECT_EQ(threads_for_share(2, 2, 5.0), 1);  // never fewer than one
  EXPECT_EQ(threads_for_share(2, 2, -0.1), 2);
  EXPECT_EQ(threads_for_share(8, 16, 4.0), 8);  // never more than wanted
  EXPECT_EQ(threads_for_share(16, 16, 4.2), 12);
  EXPECT_EQ(threads_for_share(4, 16, 14.6), 1);
}

// A sampler and clock under the test's control: the other processes' load of each second.
struct FakeMachine {
  double wall = 0, busy = 0, self = 0;
  int samples = 0;
  // One second in which this process used `mine` CPUs and others `others`.
  void second(double mine, double others) {
    wall += 1;
    self += mine;
    busy += mine + others;
  }
  CpuShare share(int wanted, int cpus) {
    return CpuShare(
        wanted, cpus,
        [this] {
          ++samples;
          return CpuSample{busy, self};
        },
        [this] { return wall; }, 1.0);
  }
};

TEST(CpuShare, FollowsTheOthersAfterTwoIntervalsInARow) {
  FakeMachine m;
  CpuShare s = m.share(2, 2);
  ASSERT_TRUE(s.active());
  EXPECT_FALSE(s.poll());  // the first reading
  m.second(2, 0);
  EXPECT_FALSE(s.poll());  // alone
  m.second(1, 1);
  EXPECT_FALSE(s.poll());  // one busy interval is not enough
  m.second(2, 0);
  EXPECT_FALSE(s.poll());  // and a free one in between starts over
  m.second(1, 1);
  EXPECT_FALSE(s.poll());
  m.second(1, 0.9);
  auto down = s.poll();
  ASSERT_TRUE(down);
  EXPECT_EQ(down->threads, 1);
  EXPECT_NEAR(down->others, 0.9, 1e-9);
  EXPECT_EQ(s.threads(), 1);
  m.second(1, 1);
  EXPECT_FALSE(s.poll());  // still shared: stays at 1
  m.second(1, 0);
  EXPECT_FALSE(s.poll());
  m.second(1, 0.1);
  auto up = s.poll();
  ASSERT_TRUE(up);
  EXPECT_EQ(up->threads, 2);
  EXPECT_EQ(s.threads(), 2);
}

TEST(CpuShare, ReadsTheCpusOnlyOnceAnIntervalHasPassed) {
  FakeMachine m;
  CpuShare s = m.share(2, 2);
  for (int i = 0; i < 10; ++i) EXPECT_FALSE(s.poll());  // many short steps at t = 0
  EXPECT_EQ(m.samples, 1);
  m.wall += 0.5;
  EXPECT_FALSE(s.poll());
  EXPECT_EQ(m.samples, 1);
  m.second(2, 0);
  EXPECT_FALSE(s.poll());
  EXPECT_EQ(m.samples, 2);
}

TEST(CpuShare, OneThreadOrNoSamplerIsInactive) {
  FakeMachine m;
  CpuShare one = m.share(1, 2);
  EXPECT_FALSE(one.active());
  m.second(1, 2);
  m.second(1, 2);
  m.second(1, 2);
  EXPECT_FALSE(one.poll());
  EXPECT_EQ(m.samples, 0);
  EXPECT_FALSE(CpuShare(4, 0, nullptr, nullptr).active());
}

// The real clocks: a child process that spins on one CPU is seen as another process's load,
// and the share drops a thread. Takes about 2.5 s.
TEST(CpuShare, SeesAnotherProcessSpinning) {
  cpu_set_t set;
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  const int cpus = CPU_COUNT(&set);
  if (cpus < 2) GTEST_SKIP() << "one CPU: nothing to share";
  CpuShare s = CpuShare::for_this_process(cpus);
  if (!s.active()) GTEST_SKIP() << "no /proc/stat, or a cgroup quota below the affinity mask";
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    volatile unsigned long spin = 0;
    for (;;) spin = spin + 1;
  }
  std::optional<CpuShare::Change> change;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(6);
  while (!change && std::chrono::steady_clock::now() < until) {
    change = s.poll();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  ASSERT_TRUE(change) << "a spinning child was not seen in 6 s";
  EXPECT_GE(change->others, 0.5);
  EXPECT_LT(change->threads, cpus);
}

}  // namespace
}  // namespace ropelab::dist
