// Ranks of a distributed run as threads of one test process: each a dist::World on real c10d
// (Gloo over 127.0.0.1), joined through a store on a free port.
#pragma once
#include <chrono>
#include <future>
#include <vector>

#include "dist/launch.h"
#include "dist/world.h"

namespace ropelab::test {

// The launch environment of rank `rank` of `size`, all on this machine.
inline dist::Env rank_env(int rank, int size, int port, int timeout_ms = 60000) {
  dist::Env e;
  e.rank = rank;
  e.size = size;
  e.local_size = size;
  e.local_rank = rank;
  e.master_addr = "127.0.0.1";
  e.master_port = port;
  e.timeout = std::chrono::milliseconds(timeout_ms);
  return e;
}

// f(world) on `n` ranks at once (rank 0 on this thread); each rank's result, by rank.
template <class F>
auto on_ranks(int n, F f) {
  const int port = dist::free_port();
  auto run = [&](int rank) {
    dist::World w(rank_env(rank, n, port));
    return f(w);
  };
  std::vector<std::future<decltype(run(0))>> others;
  for (int r = 1; r < n; ++r) others.push_back(std::async(std::launch::async, run, r));
  std::vector<decltype(run(0))> out{run(0)};
  for (auto& o : others) out.push_back(o.get());
  return out;
}

}  // namespace ropelab::test
