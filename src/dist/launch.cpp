#include "dist/launch.h"

#include <algorithm>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstring>
#include <thread>

#include "dist/world.h"
#include "util/error.h"
#include "util/signals.h"

namespace ropelab::dist {

namespace {

using Clock = std::chrono::steady_clock;

std::string describe(int status) {
  if (WIFSIGNALED(status)) {
    int sig = WTERMSIG(status);
    return fmt::format("was killed by signal {} ({})", sig, strsignal(sig));
  }
  return fmt::format("exited with code {}", WEXITSTATUS(status));
}

int exit_code(int status) {
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
}

}  // namespace

int free_port() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw UserError(std::string("launch: no socket: ") + std::strerror(errno));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  bool ok = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0 &&
            getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0;
  close(fd);
  if (!ok) throw UserError(std::string("launch: cannot find a free port: ") + std::strerror(errno));
  return ntohs(a.sin_port);
}

int launch(const LaunchOptions& o) {
  if (o.args.empty())
    throw UserError("launch: give the command the ranks run, e.g. -- train CONFIG");
  // A bench point (the bench's context-parallel figures) runs as ranks too.
  const bool point =
      o.args[0] == "bench" && std::find(o.args.begin(), o.args.end(), "--point") != o.args.end();
  if (o.args[0] != "train" && !point)
    throw UserError("launch: only `train` (and `bench --point`) runs as ranks (got '" + o.args[0] +
                    "')");
  if (o.node_rank >= o.nnodes)
    throw UserError(
        fmt::format("launch: --node-rank {} is not below --nnodes {}", o.node_rank, o.nnodes));
  if (o.nnodes > 1 && (o.port == 0 || o.master_addr.empty()))
    throw UserError(
        "launch: --nnodes > 1 needs --master-addr (node 0's address, which every machine "
        "reaches) and --master-port (the same on every machine)");
  const int port = o.port > 0 ? o.port : free_port();
  const std::string addr = o.master_addr.empty() ? "127.0.0.1" : o.master_addr;
  const int first = o.node_rank * o.nproc, world = o.nnodes * o.nproc;
  spdlog::info("launch: ranks {}..{} of {} (node {} of {}), store {}:{}, timeout {} s: ropelab {}",
               first, first + o.nproc - 1, world, o.node_rank, o.nnodes, addr, port, o.timeout_s,
               fmt::join(o.args, " "));
  std::vector<pid_t> pids(static_cast<size_t>(o.nproc), -1);
  std::vector<std::string> argv_s = {"ropelab"};
  argv_s.insert(argv_s.end(), o.args.begin(), o.args.end());
  std::vector<char*> argv;
  argv.reserve(argv_s.size() + 1);
  for (auto& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (int r = 0; r < o.nproc; ++r) {
    pid_t pid = fork();
    if (pid < 0) throw UserError(std::string("launch: fork failed: ") + std::strerror(errno));
    if (pid == 0) {
      auto set = [](const char* k, const std::string& v) { setenv(k, v.c_str(), 1); };
      set("RANK", std::to_string(first + r));
      set("LOCAL_RANK", std::to_string(r));
      set("WORLD_SIZE", std::to_string(world));
      set("LOCAL_WORLD_SIZE", std::to_string(o.nproc));
      set("MASTER_ADDR", addr);
      set("MASTER_PORT", std::to_string(port));
      set("ROPELAB_DIST_TIMEOUT", fmt::format("{}", o.timeout_s));
      // One rank still forms a process group: the data-parallel path (NCCL on a GPU) runs.
      set("ROPELAB_ONE_RANK_GROUP", world == 1 ? "1" : "0");
      unsetenv("TORCHELASTIC_USE_AGENT_STORE");
      execv("/proc/self/exe", argv.data());
      std::fprintf(stderr, "error: launch: cannot run rank %d: %s\n", r, std::strerror(errno));
      std::_Exit(127);
    }
    pids[static_cast<size_t>(r)] = pid;
    spdlog::info("launch: rank {} is pid {}", first + r, pid);
  }

  int alive = o.nproc, first_failure = 0, stopped_by_signal = 0;
  bool forwarded = false, terminated = false;
  Clock::time_point failed_at{};
  const auto grace = std::chrono::milliseconds(static_cast<int64_t>(o.timeout_s * 1000) + 10000);
  while (alive > 0) {
    if (signals::stop_requested() && !forwarded) {
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGTERM);
      forwarded = true;
    }
    if (first_failure != 0 && !terminated && Clock::now() - failed_at > grace) {
      // The others should have noticed the failure within the timeout; they did not.
      spdlog::error("launch: {} rank(s) still running {} s after a failure: stopping them", alive,
                    o.timeout_s + 10);
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGTERM);
      std::this_thread::sleep_for(std::chrono::seconds(5));
      for (pid_t p : pids)
        if (p > 0) kill(p, SIGKILL);
      terminated = true;
    }
    int status = 0;
    pid_t pid = waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    for (int r = 0; r < o.nproc; ++r) {
      if (pids[static_cast<size_t>(r)] != pid) continue;
      pids[static_cast<size_t>(r)] = -1;
      --alive;
      int code = exit_code(status);
      if (code == 143 || code == 130) {
        stopped_by_signal = code;
      } else if (code != 0) {
        if (first_failure == 0) {
          first_failure = code;
          failed_at = Clock::now();
          spdlog::error("launch: rank {} {}", first + r, describe(status));
          // Rank 0 serves the store: with it gone there is nobody to tell.
          if (first + r != 0)
            report_failure(addr, port, fmt::format("rank {} {}", first + r, describe(status)),
                           o.timeout_s);
        } else {
          spdlog::warn("launch: rank {} {}", first + r, describe(status));
        }
      }
    }
  }
  if (first_failure != 0) return first_failure;
  return stopped_by_signal;
}

}  // namespace ropelab::dist
