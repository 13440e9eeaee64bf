// `ropelab launch`: data-parallel ranks on this machine, the way torchrun --standalone starts
// them, or this machine's share of several (--nnodes, --node-rank, --master-addr,
// --master-port: torchrun's static rendezvous). Each rank is this binary run again with RANK
// (node_rank * nproc + local rank), LOCAL_RANK, WORLD_SIZE (nnodes * nproc), LOCAL_WORLD_SIZE,
// MASTER_ADDR, MASTER_PORT (on one machine a free port unless given) and ROPELAB_DIST_TIMEOUT
// set. SIGINT/SIGTERM/SIGHUP are passed on to every rank (they save one
// checkpoint and stop at the same step). When a rank fails, the others notice on their own and
// say which rank is gone; any still running after the timeout are stopped (SIGTERM, then
// SIGKILL). The exit code is the first failing rank's (128 + N if it died of signal N), else
// 143 if the ranks were stopped by a signal, else 0.
#pragma once
#include <string>
#include <vector>

namespace ropelab::dist {

struct LaunchOptions {
  int nproc = 2;                  // ranks on this machine
  int nnodes = 1, node_rank = 0;  // machines, and this one's number (torchrun's static rendezvous)
  std::string master_addr;        // node 0's address ("": 127.0.0.1, one machine only)
  int port = 0;                   // 0: a free port (one machine only)
  double timeout_s = 300;         // ROPELAB_DIST_TIMEOUT of the ranks
  std::vector<std::string> args;  // the ropelab command line each rank runs, e.g. {"train", ...}
};
int launch(const LaunchOptions& o);

// A TCP port on 127.0.0.1 nobody listens on now (the kernel's choice; a rank binds it soon after).
int free_port();

}  // namespace ropelab::dist
