// Dynamic scheduling of ropelab's own parallel loops (the fused kernels of util/vec_bf16.h and
// util/vec_kernels.h as the model and the loss run them). at::parallel_for cuts [begin, end)
// into one equal part per thread: when one core is slowed (a neighbour on a shared machine, an
// interrupt) the others finish their parts and spin at the barrier until it is done, and the
// step waits for its slowest thread at every kernel. parallel_tasks cuts the range into tasks of
// `grain` elements that the threads take in turn from a shared counter, so a slowed thread
// takes fewer (OpenMP's schedule(dynamic), on ATen's pool).
//
// Only for loops whose tasks write disjoint outputs, each computed the same whichever thread
// takes it: which thread runs which task differs from call to call, the values do not. A sum
// across tasks (a loss, a bias gradient) must be kept per task and added in task order after the
// loop, not per thread.
#pragma once
#include <ATen/Parallel.h>

#include <algorithm>
#include <atomic>
#include <cstdint>

namespace ropelab::util {

// f(b, e) for consecutive pieces [b, e) of [begin, end), `grain` elements each (the last may be
// shorter), taken by ATen's threads as each is free. On one thread, or inside a parallel region,
// one call f(begin, end).
template <class F>
void parallel_tasks(int64_t begin, int64_t end, int64_t grain, const F& f) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t tasks = (end - begin + grain - 1) / grain;
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), tasks);
  if (threads <= 1 || at::in_parallel_region()) {
    f(begin, end);
    return;
  }
  std::atomic<int64_t> next{0};
  at::parallel_for(0, threads, 1, [&](int64_t, int64_t) {
    for (int64_t t = next.fetch_add(1, std::memory_order_relaxed); t < tasks;
         t = next.fetch_add(1, std::memory_order_relaxed))
      f(begin + t * grain, std::min(end, begin + (t + 1) * grain));
  });
}

}  // namespace ropelab::util
