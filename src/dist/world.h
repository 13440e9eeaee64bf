// Data parallelism on PyTorch's c10d: ProcessGroupGloo on the CPU, ProcessGroupNCCL where the
// libtorch was built with it (CUDA builds). libtorch has no C++ DistributedDataParallel, so the
// trainer does what it does by hand (train/trainer.cpp): parameters broadcast from rank 0 at
// start, gradients summed in flattened buckets after backward.
//
// One World per process, joined from the launch environment that torchrun and SLURM wrappers
// set: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT. Rank 0 serves
// the TCPStore on MASTER_ADDR:MASTER_PORT, unless torchrun's agent already serves it
// (TORCHELASTIC_USE_AGENT_STORE=True: every rank is a client, under the prefix
// /worker/attempt_<TORCHELASTIC_RESTART_COUNT>). Without WORLD_SIZE (or with 1) the world is one
// process: every collective returns its input and no c10d object exists.
//
// Failure: every collective completes on all ranks, or throws PeerLost on every surviving rank
// within the timeout (ROPELAB_DIST_TIMEOUT seconds, default 300). Each rank beats a heartbeat
// into the store once a second, so the error names the rank that stopped beating (killed,
// crashed, or exited on its own error) rather than only "connection closed".
#pragma once
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include <ATen/core/Tensor.h>

#include "util/error.h"

namespace ropelab::dist {

// A peer of a distributed run is gone or did not answer in time (the CLI exits with code 3).
class PeerLost : public UserError {
 public:
  using UserError::UserError;
};

struct Env {
  int rank = 0, size = 1;              // RANK, WORLD_SIZE
  int local_rank = 0, local_size = 1;  // LOCAL_RANK, LOCAL_WORLD_SIZE (this machine's ranks)
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool agent_store = false;  // TORCHELASTIC_USE_AGENT_STORE=True
  int restart_count = 0;     // TORCHELASTIC_RESTART_COUNT
  std::chrono::milliseconds timeout{300000};
  bool cuda = false;  // the run's tensors are on a GPU: NCCL where libtorch has it, else Gloo
  // ROPELAB_ONE_RANK_GROUP=1 (set by `ropelab launch --nproc 1`): a process group of one rank,
  // so that a one-GPU machine runs the data-parallel path (NCCL) end to end.
  bool one_rank_group = false;
  bool grouped() const { return size > 1 || one_rank_group; }
};
// The launch variables of this process, validated: a malformed one is a UserError naming it.
// torchrun's (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), else,
// inside an srun job step, SLURM's (SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, the first host
// of SLURM_JOB_NODELIST).
Env env_from_environment();
// What a launcher tells the other ranks of one that ended (`what`, e.g. "rank 3 exited with code
// 2"): the store at ADDR:PORT gets it, and a rank still joining the group stops within a second
// naming it. Best effort: it waits up to `wait_s` for the store to listen, then gives up.
void report_failure(const std::string& addr, int port, const std::string& what, double wait_s);
// The first host of a SLURM node list: "node[01-04,07],gpu5" -> "node01".
std::string first_slurm_host(const std::string& list);
// The tasks on node `node` (0-based) of a SLURM tasks-per-node spec, "2(x3),1"; 0 if none.
int slurm_tasks_on_node(const std::string& spec, int node);

// A point-to-point transfer in flight (World::exchange). Destroying one that was not waited for
// waits for it, quietly: its buffers stay alive until the transport is done with them.
class Transfer {
 public:
  Transfer();
  ~Transfer();
  Transfer(Transfer&&) noexcept;
  Transfer& operator=(Transfer&&) noexcept;
  // Completes both halves; a lost peer throws PeerLost naming it. Idempotent.
  void wait();

 private:
  friend class World;
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

class World {
 public:
  World();  // one process
  // Joins the group (every rank must call it; returns once all have joined, or throws).
  explicit World(const Env& e);
  ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  int local_size() const { return local_size_; }
  bool is_main() const { return rank_ == 0; }
  // Whether this process is in a process group (more than one rank, or a group of one).
  bool distributed() const { return grouped_; }
  const char* backend() const;

  // Collectives: every rank calls the same ones in the same order. `what` names the point of
  // the program in the error a lost peer gives.
  void barrier(const char* what) const;
  // Rank 0's values into every rank's tensors, in place (flattened buckets per dtype).
  void broadcast(const std::vector<at::Tensor>& ts, const char* what) const;
  // Every rank's tensors summed, in place (flattened buckets of about 25 MiB per dtype).
  void sum_in_place(const std::vector<at::Tensor>& ts, const char* what) const;
  std::vector<double> sum(std::vector<double> v, const char* what) const;
  // Every rank's bytes, indexed by rank.
  std::vector<std::string> gather(const std::string& bytes, const char* what) const;

  // Sends `send` to rank `to` and receives into `recv` from rank `from`, both at once and
  // without waiting (ring attention passes keys around a ring of ranks this way, computing
  // while they travel). Either half is skipped when its rank is -1. Every rank of the world
  // calls exchange the same number of times, in the same order: the calls are numbered, and a
  // send meets the receive of the same number. `send` and `recv` are contiguous; `send` must
  // not change until the transfer is waited for. In one process, `to` and `from` are 0 or -1
  // and a send to itself is a copy.
  Transfer exchange(const at::Tensor& send, int to, const at::Tensor& recv, int from,
                    const char* what) const;

  // Rank 0 marks `key` done; the other ranks wait for it without the collective timeout, for
  // as long as rank 0 is alive (data preparation can take long; a dead rank 0 is an error).
  void mark_done(const std::string& key) const;
  void wait_for_main(const std::string& key, const char* what) const;

 private:
  friend class Transfer;
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int rank_ = 0, size_ = 1, local_size_ = 1;
  bool grouped_ = false;
};

// The process's world (one process until init is called).
const World& world();
// Joins the world `e` describes, once per process (a no-op for one process).
void init(const Env& e);

}  // namespace ropelab::dist
