// dist::World on real c10d (Gloo over 127.0.0.1): two ranks as two threads of this process.
// The whole-program checks (2 processes vs 1, resume, signals, torchrun) are
// tests/e2e/distributed.sh.

#include <cstdlib>
#include <future>
#include <thread>

#include "dist/launch.h"
#include "dist/world.h"
#include "dist_helpers.h"
#include "helpers.h"

namespace ropelab {
namespace {

using dist::free_port;

dist::Env env(int rank, int port, int timeout_ms = 20000) {
  return test::rank_env(rank, 2, port, timeout_ms);
}

// Runs f(world) on rank 0 and rank 1 at once; returns each rank's result.
template <class F>
auto on_two_ranks(F f) {
  int port = free_port();
  auto run = [&](int rank) {
    dist::World w(env(rank, port));
    return f(w);
  };
  auto r1 = std::async(std::launch::async, run, 1);
  auto r0 = run(0);
  return std::make_pair(r0, r1.get());
}

TEST(Distributed, SumsBroadcastsAndGathers) {
  auto [a, b] = on_two_ranks([](const dist::World& w) {
    const double r = w.rank();
    // Two dtypes, and a tensor bigger than a 25 MiB bucket, so buckets are split and flattened.
    auto small = torch::full({3, 4}, r + 1, torch::kFloat32);
    auto big = torch::full({7 * 1024 * 1024}, r + 1, torch::kFloat32);
    auto dbl = torch::full({5}, 10 * (r + 1), torch::kFloat64);
    auto strided = torch::full({4, 6}, r + 1).t();  // not contiguous
    w.sum_in_place({small, big, dbl, strided}, "test sum");
    auto values = w.sum({r, 2.5}, "test values");
    auto from0 = torch::full({6}, r == 0 ? 7.0 : -1.0);
    w.broadcast({from0}, "test broadcast");
    auto gathered = w.gather(
        std::string(static_cast<size_t>(3 + 5 * r), 'a' + static_cast<char>(r)), "test gather");
    w.barrier("test barrier");
    EXPECT_TRUE(small.eq(3).all().item<bool>());
    EXPECT_TRUE(big.eq(3).all().item<bool>());
    EXPECT_TRUE(dbl.eq(30).all().item<bool>());
    EXPECT_TRUE(strided.eq(3).all().item<bool>());
    EXPECT_EQ(values, (std::vector<double>{1.0, 5.0}));
    EXPECT_TRUE(from0.eq(7).all().item<bool>());
    EXPECT_EQ(gathered, (std::vector<std::string>{"aaa", "bbbbbbbb"}));
    return w.rank();
  });
  EXPECT_EQ(a, 0);
  EXPECT_EQ(b, 1);
}

TEST(Distributed, OthersWaitForRankZero) {
  auto [a, b] = on_two_ranks([](const dist::World& w) {
    auto t0 = std::chrono::steady_clock::now();
    if (w.is_main()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(700));  // "preparing data"
      w.mark_done("data");
    } else {
      w.wait_for_main("data", "waiting for rank 0");
    }
    auto waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    // As in training, rank 0 goes on to a collective: it must not tear its store down (the
    // test's World going out of scope) before rank 1 has polled the key. Without this the
    // test raced, and lost under load.
    w.barrier("after the wait");
    return waited;
  });
  EXPECT_GE(b, 0.6);  // rank 1 returned only once rank 0 was done
  EXPECT_LT(a, 5.0);
}

TEST(Distributed, ALostRankIsNamed) {
  int port = free_port();
  std::promise<void> joined;
  auto gone = std::async(std::launch::async, [&] {
    dist::World w(env(1, port));
    joined.set_value();
    // Leaves without taking part in the collective: its connections close, its heartbeat stops.
  });
  dist::World w(env(0, port));
  joined.get_future().wait();
  gone.get();
  try {
    w.sum({1.0}, "the step");
    FAIL() << "a sum with a rank gone succeeded";
  } catch (const dist::PeerLost& e) {
    std::string m = e.what();
    EXPECT_NE(m.find("rank 0 of 2: the step failed"), std::string::npos) << m;
    EXPECT_NE(m.find("rank 1 is gone or hung"), std::string::npos) << m;
  }
}

TEST(Distributed, OneProcessIsTheIdentity) {
  dist::World w;
  EXPECT_FALSE(w.distributed());
  EXPECT_EQ(w.sum({1.5, 2.0}, "x"), (std::vector<double>{1.5, 2.0}));
  auto t = torch::ones({3});
  w.sum_in_place({t}, "x");
  EXPECT_TRUE(t.eq(1).all().item<bool>());
  EXPECT_EQ(w.gather("abc", "x"), std::vector<std::string>{"abc"});
}

TEST(Distributed, LaunchEnvironmentIsValidated) {
  auto with = [](std::vector<std::pair<const char*, const char*>> vars) {
    for (const char* k : {"WORLD_SIZE", "RANK", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                          "MASTER_PORT", "ROPELAB_DIST_TIMEOUT", "TORCHELASTIC_USE_AGENT_STORE"})
      unsetenv(k);
    for (const auto& [k, v] : vars) setenv(k, v, 1);
  };
  auto error_of = [](const char* needle) {
    try {
      dist::env_from_environment();
    } catch (const UserError& e) {
      return std::string(e.what()).find(needle) != std::string::npos;
    }
    return false;
  };
  with({});
  EXPECT_EQ(dist::env_from_environment().size, 1);
  with({{"WORLD_SIZE", "2"}, {"RANK", "1"}});
  EXPECT_TRUE(error_of("MASTER_ADDR is not set"));
  with({{"WORLD_SIZE", "2"}, {"RANK", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}});
  EXPECT_TRUE(error_of("RANK='2' is not an integer in [0, 1]"));
  with({{"WORLD_SIZE", "two"}});
  EXPECT_TRUE(error_of("WORLD_SIZE='two'"));
  with({{"ROPELAB_DIST_TIMEOUT", "soon"}});
  EXPECT_TRUE(error_of("ROPELAB_DIST_TIMEOUT='soon'"));
  with({{"WORLD_SIZE", "4"},
        {"RANK", "3"},
        {"LOCAL_RANK", "1"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"MASTER_ADDR", "node7"},
        {"MASTER_PORT", "29400"},
        {"ROPELAB_DIST_TIMEOUT", "12.5"},
        {"TORCHELASTIC_USE_AGENT_STORE", "True"}});
  auto e = dist::env_from_environment();
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.master_addr, "node7");
  EXPECT_EQ(e.master_port, 29400);
  EXPECT_TRUE(e.agent_store);
  EXPECT_EQ(e.timeout.count(), 12500);
  with({});
}

TEST(Distributed, SlurmStepsGiveTheRanksWithoutTorchrunVariables) {
  const char* slurm[] = {"SLURM_PROCID",
                         "SLURM_NTASKS",
                         "SLURM_LOCALID",
                         "SLURM_STEP_ID",
                         "SLURM_STEP_NUM_TASKS",
                         "SLURM_TASKS_PER_NODE",
                         "SLURM_STEP_TASKS_PER_NODE",
                         "SLURM_NODEID",
                         "SLURM_JOB_NODELIST",
                         "SLURM_NODELIST",
                         "SLURM_JOB_ID",
                         "WORLD_SIZE",
                         "MASTER_ADDR",
                         "MASTER_PORT"};
  auto with = [&](std::vector<std::pair<const char*, const char*>> vars) {
    for (const char* k : slurm) unsetenv(k);
    for (const auto& [k, v] : vars) setenv(k, v, 1);
  };
  EXPECT_EQ(dist::first_slurm_host("node[01-04,07],gpu5"), "node01");
  EXPECT_EQ(dist::first_slurm_host("gpu-a[3,5]"), "gpu-a3");
  EXPECT_EQ(dist::first_slurm_host("n1,n2"), "n1");
  EXPECT_EQ(dist::first_slurm_host("solo"), "solo");
  EXPECT_EQ(dist::slurm_tasks_on_node("2(x3),1", 0), 2);
  EXPECT_EQ(dist::slurm_tasks_on_node("2(x3),1", 2), 2);
  EXPECT_EQ(dist::slurm_tasks_on_node("2(x3),1", 3), 1);
  EXPECT_EQ(dist::slurm_tasks_on_node("2(x3),1", 4), 0);
  EXPECT_EQ(dist::slurm_tasks_on_node("4", 0), 4);
  // srun -N 2 --ntasks-per-node 2: the second node's second task.
  const std::vector<std::pair<const char*, const char*>> step = {
      {"SLURM_STEP_ID", "0"},
      {"SLURM_PROCID", "3"},
      {"SLURM_NTASKS", "4"},
      {"SLURM_LOCALID", "1"},
      {"SLURM_NODEID", "1"},
      {"SLURM_TASKS_PER_NODE", "2(x2)"},
      {"SLURM_JOB_NODELIST", "cn[07-08]"},
      {"SLURM_JOB_ID", "123456"}};
  with(step);
  auto e = dist::env_from_environment();
  EXPECT_EQ(e.size, 4);
  EXPECT_EQ(e.rank, 3);
  EXPECT_EQ(e.local_rank, 1);
  EXPECT_EQ(e.local_size, 2);
  EXPECT_EQ(e.master_addr, "cn07");
  EXPECT_EQ(e.master_port, 29500 + 123456 % 10000);
  // MASTER_ADDR and MASTER_PORT, where set, win; torchrun's WORLD_SIZE makes SLURM's unread.
  auto more = step;
  more.insert(more.end(), {{"MASTER_ADDR", "10.0.0.9"}, {"MASTER_PORT", "29400"}});
  with(more);
  e = dist::env_from_environment();
  EXPECT_EQ(e.master_addr, "10.0.0.9");
  EXPECT_EQ(e.master_port, 29400);
  // A batch script or salloc shell (no job step) is one process, whatever SLURM_NTASKS says.
  auto batch = step;
  batch.erase(batch.begin());
  with(batch);
  EXPECT_EQ(dist::env_from_environment().size, 1);
  with({});
}

}  // namespace
}  // namespace ropelab
