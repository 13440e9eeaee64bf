// Stop signals (SIGINT, SIGTERM, SIGHUP) that land inside oneDNN's JIT float32 GEMM must not
// damage the heap (util/signals.h: those kernels point the stack pointer at a heap workspace).
#include <dirent.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "util/gemm.h"
#include "util/platform.h"
#include "util/signals.h"

namespace ropelab {
namespace {

std::vector<pid_t> thread_ids() {
  std::vector<pid_t> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d))
      if (e->d_name[0] != '.') ids.push_back(static_cast<pid_t>(std::atoi(e->d_name)));
    closedir(d);
  }
  return ids;
}

// Runs in a child process (a death test): ropelab's handlers, two kernel threads, and a thread
// that sends SIGTERM to every other thread of the process, one after another, without pause,
// for as long as the GEMMs run (about 2 s): every thread is hit inside the kernels thousands of
// times. Exits 0, or dies of glibc's heap check (SIGABRT) or a SIGSEGV.
[[noreturn]] void stop_signals_during_gemm() {
  signals::install_handlers();
  platform::set_threads(2);
  std::atomic<bool> done{false};
  std::atomic<long> sent{0};
  std::thread storm([&] {
    sigset_t own;
    sigemptyset(&own);
    sigaddset(&own, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &own, nullptr);  // not this thread
    const pid_t self = static_cast<pid_t>(syscall(SYS_gettid));
    while (!done.load()) {
      for (pid_t t : thread_ids())
        if (t != self && syscall(SYS_tgkill, getpid(), t, SIGTERM) == 0) sent.fetch_add(1);
    }
  });
  torch::manual_seed(0);
  // Large enough that oneDNN splits each GEMM over both threads; both transpositions.
  const int64_t M = 384, K = 256, N = 512;
  auto a = torch::randn({M, K}), b = torch::randn({K, N}), bt = torch::randn({N, K});
  auto c = torch::empty({M, N}), ref = torch::mm(a, b), ref_t = torch::mm(a, bt.t());
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  bool right = true;
  while (std::chrono::steady_clock::now() < until) {
    for (int i = 0; i < 10; ++i) {
      util::sgemm(false, false, M, N, K, a.data_ptr<float>(), K, b.data_ptr<float>(), N, 0.0F,
                  c.data_ptr<float>(), N);
      right = right && torch::allclose(c, ref, 1e-4, 1e-4);
      util::sgemm(false, true, M, N, K, a.data_ptr<float>(), K, bt.data_ptr<float>(), K, 0.0F,
                  c.data_ptr<float>(), N);
      right = right && torch::allclose(c, ref_t, 1e-4, 1e-4);
      std::vector<float> heap(static_cast<size_t>(1 + i * 37));  // the heap in use meanwhile
      heap.back() = 1.0F;
    }
  }
  done = true;
  storm.join();
  std::_Exit(!right ? 3 : sent.load() < 1000 ? 4 : 0);
}

TEST(SignalsDeathTest, StopSignalsInsideOneDnnGemmLeaveTheHeapIntact) {
  if (!util::fast_sgemm_available()) GTEST_SKIP() << "this libtorch has no oneDNN sgemm";
  GTEST_FLAG_SET(death_test_style, "threadsafe");  // a fresh process: no inherited OpenMP pool
  EXPECT_EXIT(stop_signals_during_gemm(), ::testing::ExitedWithCode(0), "");
}

TEST(Signals, StopHandlersRunOnTheThreadsAlternateStack) {
  signals::install_handlers();
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) {
    struct sigaction sa = {};
    ASSERT_EQ(sigaction(sig, nullptr, &sa), 0);
    EXPECT_NE(sa.sa_flags & SA_ONSTACK, 0) << "signal " << sig;
  }
  stack_t ss = {};
  ASSERT_EQ(sigaltstack(nullptr, &ss), 0);
  EXPECT_EQ(ss.ss_flags & SS_DISABLE, 0);
  EXPECT_GE(ss.ss_size, static_cast<size_t>(64 * 1024));
}

}  // namespace
}  // namespace ropelab
