// util::parallel_tasks (util/tasks.h): every element once, in pieces of the grain, and the
// pieces taken as the threads are free, so that a slowed thread takes fewer of them.
#include <ATen/Parallel.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include "util/tasks.h"

namespace ropelab::util {
namespace {

// Sets ATen's pool to n threads for the test's scope.
struct Threads {
  int before = at::get_num_threads();
  explicit Threads(int n) { at::set_num_threads(n); }
  ~Threads() { at::set_num_threads(before); }
  Threads(const Threads&) = delete;
  Threads& operator=(const Threads&) = delete;
};

std::vector<std::pair<int64_t, int64_t>> pieces_of(int64_t begin, int64_t end, int64_t grain) {
  std::vector<std::pair<int64_t, int64_t>> pieces;
  std::mutex lock;
  parallel_tasks(begin, end, grain, [&](int64_t b, int64_t e) {
    const std::lock_guard<std::mutex> hold(lock);
    pieces.emplace_back(b, e);
  });
  std::sort(pieces.begin(), pieces.end());
  return pieces;
}

TEST(Tasks, EveryElementOnceInPiecesOfTheGrain) {
  const Threads two(2);
  const auto pieces = pieces_of(3, 1003, 64);
  ASSERT_EQ(pieces.size(), 16U);  // 15 of 64 and the last 40
  int64_t at = 3;
  for (const auto& [b, e] : pieces) {
    EXPECT_EQ(b, at);
    EXPECT_EQ(e - b, std::min<int64_t>(64, 1003 - b));
    at = e;
  }
  EXPECT_EQ(at, 1003);
  EXPECT_TRUE(pieces_of(5, 5, 8).empty());
  EXPECT_EQ(pieces_of(0, 7, 0).size(), 7U);  // a grain below 1 counts as 1
}

TEST(Tasks, OneThreadOrAParallelRegionRunsTheRangeInOneCall) {
  {
    const Threads one(1);
    EXPECT_EQ(pieces_of(0, 100, 10), (std::vector<std::pair<int64_t, int64_t>>{{0, 100}}));
  }
  const Threads two(2);
  std::vector<std::vector<std::pair<int64_t, int64_t>>> inner(2);
  at::parallel_for(0, 2, 1, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) inner[static_cast<size_t>(i)] = pieces_of(0, 100, 10);
  });
  for (const auto& p : inner) EXPECT_EQ(p, (std::vector<std::pair<int64_t, int64_t>>{{0, 100}}));
}

// Thread 0 slowed tenfold (as by a neighbour on its core): it takes a few of the 40 tasks and
// thread 1 the rest, where an equal split (at::parallel_for) gives each 20.
TEST(Tasks, ASlowedThreadTakesFewerTasks) {
  const Threads two(2);
  std::vector<int> taken(2, 0);
  std::mutex lock;
  parallel_tasks(0, 40, 1, [&](int64_t, int64_t) {
    const int t = at::get_thread_num();
    std::this_thread::sleep_for(std::chrono::microseconds(t == 0 ? 5000 : 500));
    const std::lock_guard<std::mutex> hold(lock);
    ++taken[static_cast<size_t>(std::min(t, 1))];
  });
  EXPECT_EQ(taken[0] + taken[1], 40);
  EXPECT_LT(taken[0], 12) << "thread 0 took " << taken[0] << ", thread 1 " << taken[1];
}

}  // namespace
}  // namespace ropelab::util
