#include "dist/world.h"

#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <torch/torch.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <thread>

#include "compat/c10d.h"
#include "util/signals.h"

namespace ropelab::dist {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

namespace {

constexpr milliseconds kBeat{500};      // heartbeat period
constexpr milliseconds kSilence{2500};  // a heartbeat unchanged this long: gone
constexpr int64_t kBucketBytes = int64_t{25} * 1024 * 1024;  // DDP's default bucket size
constexpr const char* kFailedKey = "failed";  // what a launcher reports of a rank that ended

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

const char* getenv_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0' ? v : fallback;
}

int env_int(const char* name, int fallback, int lo, int hi) {
  const char* v = getenv_or(name, nullptr);
  if (v == nullptr) return fallback;
  char* end = nullptr;
  long x = std::strtol(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi)
    throw UserError(
        fmt::format("environment: {}='{}' is not an integer in [{}, {}]", name, v, lo, hi));
  return static_cast<int>(x);
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

// Under an srun job step (SLURM_STEP_ID set) and without torchrun's variables: the ranks from
// SLURM_PROCID, SLURM_NTASKS (the step's SLURM_STEP_NUM_TASKS where srun ran fewer),
// SLURM_LOCALID and this node's count of SLURM_STEP_TASKS_PER_NODE (else
// SLURM_TASKS_PER_NODE); the store on the first host of SLURM_JOB_NODELIST, port MASTER_PORT
// or 29500 + SLURM_JOB_ID mod 10000. A batch script or salloc shell (no step) is one process.
bool slurm_env(Env& e) {
  if (getenv_or("WORLD_SIZE", nullptr) != nullptr ||
      getenv_or("SLURM_PROCID", nullptr) == nullptr ||
      getenv_or("SLURM_STEP_ID", nullptr) == nullptr)
    return false;
  e.size = env_int("SLURM_STEP_NUM_TASKS", env_int("SLURM_NTASKS", 1, 1, 1 << 20), 1, 1 << 20);
  e.rank = env_int("SLURM_PROCID", 0, 0, e.size - 1);
  const char* per_node =
      getenv_or("SLURM_STEP_TASKS_PER_NODE", getenv_or("SLURM_TASKS_PER_NODE", nullptr));
  const int node = env_int("SLURM_NODEID", 0, 0, 1 << 20);
  e.local_size = per_node != nullptr ? slurm_tasks_on_node(per_node, node) : 0;
  if (e.local_size < 1 || e.local_size > e.size)
    throw UserError(fmt::format("environment: SLURM_TASKS_PER_NODE='{}' gives node {} no tasks",
                                per_node == nullptr ? "" : per_node, node));
  e.local_rank = env_int("SLURM_LOCALID", 0, 0, e.local_size - 1);
  if (e.size > 1) {
    const char* nodes = getenv_or("SLURM_JOB_NODELIST", getenv_or("SLURM_NODELIST", nullptr));
    e.master_addr = getenv_or("MASTER_ADDR", nullptr) != nullptr ? getenv_or("MASTER_ADDR", "")
                    : nodes != nullptr                           ? first_slurm_host(nodes)
                                                                 : "127.0.0.1";
    e.master_port =
        env_int("MASTER_PORT", 29500 + env_int("SLURM_JOB_ID", 0, 0, 1 << 30) % 10000, 1, 65535);
  }
  return true;
}

}  // namespace

namespace {
// Whether something listens at ADDR:PORT (a TCP connect within 1 s): the store client would
// otherwise retry, and log, for its whole timeout.
bool listening(const std::string& addr, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(addr.c_str(), std::to_string(port).c_str(), &hints, &res) != 0) return false;
  bool ok = false;
  for (addrinfo* a = res; a != nullptr && !ok; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK, a->ai_protocol);
    if (fd < 0) continue;
    if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      ok = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int err = 0;
      socklen_t len = sizeof err;
      ok = poll(&p, 1, 1000) == 1 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 &&
           err == 0;
    }
    close(fd);
  }
  freeaddrinfo(res);
  return ok;
}
}  // namespace

void report_failure(const std::string& addr, int port, const std::string& what, double wait_s) {
  // The store may not be up yet (node 0 starting later): wait for it, up to wait_s.
  const auto until = Clock::now() + milliseconds(static_cast<int64_t>(wait_s * 1000));
  while (!listening(addr, port)) {
    if (Clock::now() >= until) return;
    std::this_thread::sleep_for(milliseconds(250));
  }
  try {
    auto s = c10::make_intrusive<c10d::PrefixStore>(
        "ropelab",
        compat::make_tcp_store(addr, static_cast<uint16_t>(port), false, milliseconds(2000)));
    compat::store_set(*s, kFailedKey, what);
  } catch (const std::exception&) {
    // No store (rank 0 is the one that ended, or never started): the others' timeout is the bound.
  }
}

std::string first_slurm_host(const std::string& list) {
  const size_t stop = list.find_first_of(",[");
  if (stop == std::string::npos || list[stop] == ',') return list.substr(0, stop);
  const size_t end = list.find_first_of("-,]", stop + 1);
  return list.substr(0, stop) + list.substr(stop + 1, end - stop - 1);
}

int slurm_tasks_on_node(const std::string& spec, int node) {
  // "2(x3),1": 2 tasks on each of 3 nodes, then 1.
  std::stringstream in(spec);
  for (std::string part; std::getline(in, part, ',');) {
    char* end = nullptr;
    const long n = std::strtol(part.c_str(), &end, 10);
    long repeat = 1;
    if (*end == '(') repeat = std::strtol(end + 2, &end, 10);
    if (n < 1 || repeat < 1) return 0;
    if (node < repeat) return static_cast<int>(n);
    node -= static_cast<int>(repeat);
  }
  return 0;
}

Env env_from_environment() {
  Env e;
  const bool slurm = slurm_env(e);
  if (!slurm) {
    e.size = env_int("WORLD_SIZE", 1, 1, 1 << 20);
    e.rank = env_int("RANK", 0, 0, e.size - 1);
    e.local_size = env_int("LOCAL_WORLD_SIZE", 1, 1, e.size);
    e.local_rank = env_int("LOCAL_RANK", 0, 0, e.local_size - 1);
  }
  e.one_rank_group = e.size == 1 && std::string(getenv_or("ROPELAB_ONE_RANK_GROUP", "")) == "1";
  if (e.grouped() && !slurm) {
    for (const char* v : {"MASTER_ADDR", "MASTER_PORT"})
      if (getenv_or(v, nullptr) == nullptr)
        throw UserError(fmt::format(
            "environment: WORLD_SIZE={} asks for a distributed run, but {} is not set (torchrun "
            "sets it; or use `ropelab launch`)",
            e.size, v));
    e.master_addr = getenv_or("MASTER_ADDR", "");
    e.master_port = env_int("MASTER_PORT", 0, 1, 65535);
  }
  e.agent_store = std::string(getenv_or("TORCHELASTIC_USE_AGENT_STORE", "")) == "True";
  e.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0, 0, 1 << 20);
  if (const char* t = getenv_or("ROPELAB_DIST_TIMEOUT", nullptr)) {
    char* end = nullptr;
    double s = std::strtod(t, &end);
    if (*end != '\0' || !(s > 0) || s > 1e6)
      throw UserError(
          fmt::format("environment: ROPELAB_DIST_TIMEOUT='{}' is not a number of seconds > 0", t));
    e.timeout = milliseconds(static_cast<int64_t>(s * 1000));
  }
  return e;
}

namespace {
// A store client (or, for rank 0, the server) under ropelab's prefix, and torchrun's agent's.
c10::intrusive_ptr<c10d::Store> connect_store(const Env& env, bool server, milliseconds timeout) {
  auto s = compat::make_tcp_store(env.master_addr, static_cast<uint16_t>(env.master_port), server,
                                  timeout);
  if (env.agent_store)
    s = c10::make_intrusive<c10d::PrefixStore>(
        "/worker/attempt_" + std::to_string(env.restart_count), s);
  return c10::make_intrusive<c10d::PrefixStore>("ropelab", s);
}
}  // namespace

struct World::Impl {
  Env env;
  c10::intrusive_ptr<c10d::Store> store;  // the main thread's client (prefixed)
  c10::intrusive_ptr<compat::Group> pg;
  std::string backend = "gloo";
  torch::Device dev = torch::kCPU;  // where scalar collectives run (NCCL: the GPU)
  std::thread beat;
  std::atomic<bool> stopping{false};
  mutable int64_t sequence = 0;      // of mark_done / wait_for_main keys
  mutable int64_t sequence_p2p = 0;  // of exchanges: their tags

  // A store client of its own (the TCPStore client is not shared between threads).
  c10::intrusive_ptr<c10d::Store> connect(bool server, milliseconds timeout) const {
    return connect_store(env, server, timeout);
  }

  static std::string key_of(int rank) { return "beat/" + std::to_string(rank); }

  // Ranks whose heartbeat did not change over kSilence; throws when the store is unreachable.
  std::vector<int> silent_ranks() const {
    auto s = connect(false, milliseconds(3000));
    auto read = [&] {
      std::vector<std::string> v(static_cast<size_t>(env.size));
      for (int r = 0; r < env.size; ++r)
        if (r != env.rank && s->check({key_of(r)})) {
          auto b = s->get(key_of(r));
          v[static_cast<size_t>(r)].assign(b.begin(), b.end());
        }
      return v;
    };
    auto before = read();
    std::this_thread::sleep_for(kSilence);
    auto after = read();
    std::vector<int> out;
    for (int r = 0; r < env.size; ++r)
      if (r != env.rank && before[static_cast<size_t>(r)] == after[static_cast<size_t>(r)])
        out.push_back(r);
    return out;
  }

  // The error of a failed collective: which rank is gone, if one is.
  PeerLost lost(const char* what, const std::string& why) const {
    std::string head =
        fmt::format("distributed run, rank {} of {}: {} failed: ", env.rank, env.size, what);
    std::vector<int> silent;
    try {
      silent = silent_ranks();
    } catch (const std::exception&) {
      return PeerLost(head +
                      (env.agent_store
                           ? "the torchrun agent's store is unreachable"
                           : "rank 0 is gone (it serves the store, which is unreachable)") +
                      "; stopping. See that rank's log for why it ended");
    }
    if (silent.empty())
      return PeerLost(head +
                      fmt::format("every rank is alive but one did not answer within {} s (a hung "
                                  "rank, or ranks out of step: {}); stopping. "
                                  "HINT: ROPELAB_DIST_TIMEOUT raises the limit",
                                  env.timeout.count() / 1000.0, first_line(why)));
    std::string ranks;
    for (int r : silent) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
    return PeerLost(head + fmt::format("rank {} {} gone or hung (killed, crashed, stopped by its "
                                       "own error, or frozen: see its log); stopping",
                                       ranks, silent.size() == 1 ? "is" : "are"));
  }

  template <class F>
  void guarded(const char* what, F&& f) const {
    try {
      f();
    } catch (const UserError&) {
      throw;  // PeerLost, or a problem this rank found
    } catch (const signals::Interrupted&) {
      throw;
    } catch (const std::exception& e) {
      throw lost(what, e.what());
    }
  }

  // Tensors in buckets of one dtype and device, at most kBucketBytes each (a larger tensor is
  // a bucket of its own); `op` runs on each bucket's flattened copy, then it is copied back.
  template <class Op>
  void bucketed(const std::vector<at::Tensor>& ts, Op&& op) const {
    std::map<std::pair<int, std::string>, std::vector<at::Tensor>> groups;
    for (const auto& t : ts)
      if (t.defined() && t.numel() > 0)
        groups[{static_cast<int>(t.scalar_type()), t.device().str()}].push_back(t);
    for (auto& [key, group] : groups) {
      std::vector<at::Tensor> bucket;
      int64_t bytes = 0;
      auto flush = [&] {
        if (bucket.empty()) return;
        std::vector<at::Tensor> flat_parts;
        flat_parts.reserve(bucket.size());
        for (const auto& t : bucket) flat_parts.push_back(t.reshape(-1));
        std::vector<at::Tensor> io{torch::cat(flat_parts)};
        op(io);
        int64_t off = 0;
        for (auto& t : bucket) {
          t.copy_(io[0].narrow(0, off, t.numel()).view_as(t));
          off += t.numel();
        }
        bucket.clear();
        bytes = 0;
      };
      for (const auto& t : group) {
        int64_t b = t.numel() * static_cast<int64_t>(t.element_size());
        if (!bucket.empty() && bytes + b > kBucketBytes) flush();
        bucket.push_back(t);
        bytes += b;
      }
      flush();
    }
  }
};

namespace {
// Joining can block past its timeout: when rank 0 dies half-way through the handshake, a
// store or Gloo read may wait with no deadline (seen under load: rank 1 waited until `launch`
// stopped it 20 s later). The watchdog ends the rank as a failed join would (exit 3, one line)
// if joining has not finished `limit` after it began.
[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "error: %s\n", message.c_str());
  std::fflush(stderr);
  std::_Exit(3);
}

class JoinWatchdog {
 public:
  JoinWatchdog(std::string message, milliseconds limit)
      : thread_([this, message = std::move(message), limit] {
          std::unique_lock<std::mutex> lock(mutex_);
          if (cv_.wait_for(lock, limit, [this] { return done_; })) return;
          die(message);
        }) {}
  JoinWatchdog(const JoinWatchdog&) = delete;
  JoinWatchdog& operator=(const JoinWatchdog&) = delete;
  ~JoinWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    cv_.notify_all();
    thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool done_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

// A rank that ends before the group forms is reported by its launcher into the store
// (report_failure): a detached thread polls for that every 500 ms while this rank joins, and
// ends this rank naming it. Detached, since a store that accepted and went silent blocks its
// client with no deadline (the watchdog above is the bound then); it stops at `joined`.
void watch_for_failures(const Env& e, const std::shared_ptr<std::atomic<bool>>& joined) {
  std::thread([e, joined] {
    c10::intrusive_ptr<c10d::Store> probe;
    while (!*joined) {
      std::this_thread::sleep_for(milliseconds(500));
      try {
        if (!probe) probe = connect_store(e, false, milliseconds(1000));
        if (*joined || !probe->check({kFailedKey})) continue;
        auto b = probe->get(kFailedKey);
        if (*joined) return;
        die(
            fmt::format("distributed run, rank {} of {}: the group cannot form: {} (its launcher "
                        "reported it); stopping. See that rank's log for why it ended",
                        e.rank, e.size, std::string(b.begin(), b.end())));
      } catch (const std::exception&) {
        probe.reset();  // no store yet (rank 0 starting), or gone: the watchdog is the bound
      }
    }
  }).detach();
}
}  // namespace

World::World() : impl_(std::make_unique<Impl>()) {}

World::World(const Env& e) : impl_(std::make_unique<Impl>()) {
  auto& im = *impl_;
  im.env = e;
  rank_ = e.rank, size_ = e.size, local_size_ = e.local_size;
  if (!e.grouped()) return;
  const char* joining = "joining the process group";
  JoinWatchdog watchdog(
      fmt::format("distributed run, rank {} of {}: {} at {}:{} did not finish within {} s (a "
                  "rank died while joining?)",
                  e.rank, e.size, joining, e.master_addr, e.master_port,
                  e.timeout.count() / 1000.0 + 5),
      e.timeout + milliseconds(5000));
  auto joined = std::make_shared<std::atomic<bool>>(false);
  struct Joined {  // the failure watch ends with the join, however it ends
    std::shared_ptr<std::atomic<bool>> flag;
    ~Joined() { *flag = true; }
  } joined_guard{joined};
  watch_for_failures(e, joined);
  const bool nccl = compat::kHaveNccl && e.cuda;
  if (!nccl && !compat::kHaveGloo)
    throw UserError(
        "distributed run: this build has no Gloo (its libtorch came without Gloo's headers), so "
        "only GPU ranks on NCCL run (run.device=cuda); install Gloo's headers (Debian: "
        "libgloo-dev) and rebuild "
        "for CPU ranks");
  try {
    im.store = im.connect(e.rank == 0 && !e.agent_store, e.timeout);
    if (nccl) {
      im.dev = torch::Device(torch::kCUDA, static_cast<c10::DeviceIndex>(e.local_rank));
      im.pg = compat::make_nccl_group(im.store, e.rank, e.size, e.timeout);
      im.backend = "nccl";
    } else {
#ifndef ROPELAB_WITHOUT_GLOO
      std::vector<std::shared_ptr<::gloo::transport::Device>> devices;
      // Which network interface Gloo uses: GLOO_SOCKET_IFNAME (as in PyTorch), else loopback
      // for a one-machine run, else the address this machine's hostname resolves to.
      if (const char* ifname = getenv_or("GLOO_SOCKET_IFNAME", nullptr)) {
        std::string names = ifname;
        for (size_t p = 0; p <= names.size();) {
          size_t q = std::min(names.find(',', p), names.size());
          if (q > p)
            devices.push_back(
                c10d::ProcessGroupGloo::createDeviceForInterface(names.substr(p, q - p)));
          p = q + 1;
        }
      } else if (is_loopback(e.master_addr)) {
        devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
      } else {
        devices.push_back(c10d::ProcessGroupGloo::createDefaultDevice());
      }
      im.pg = compat::make_gloo_group(im.store, e.rank, e.size, e.timeout, std::move(devices),
                                      /*threads=*/2);
#endif
    }
  } catch (const std::exception& ex) {
    throw PeerLost(fmt::format("distributed run, rank {} of {}: {} at {}:{} failed within {} s: {}",
                               e.rank, e.size, joining, e.master_addr, e.master_port,
                               e.timeout.count() / 1000.0, first_line(ex.what())));
  }
  // The heartbeat: a thread with its own store client.
  im.beat = std::thread([&im] {
    try {
      auto s = im.connect(false, milliseconds(5000));
      for (int64_t n = 1; !im.stopping; ++n) {
        compat::store_set(*s, Impl::key_of(im.env.rank), std::to_string(n));
        for (auto t = Clock::now(); !im.stopping && Clock::now() - t < kBeat;)
          std::this_thread::sleep_for(milliseconds(20));
      }
    } catch (const std::exception&) {
      // The store is gone (rank 0 ended): nothing to beat into. A collective reports it.
    }
  });
  grouped_ = true;
  barrier(joining);
  spdlog::info("distributed: rank {} of {} ({}, {} on this machine), store {}:{}{}", e.rank, e.size,
               im.backend, e.local_size, e.master_addr, e.master_port,
               e.agent_store ? " (torchrun agent)" : "");
}

World::~World() {
  impl_->stopping = true;
  if (impl_->beat.joinable()) impl_->beat.join();
}

const char* World::backend() const { return !grouped_ ? "none" : impl_->backend.c_str(); }

void World::barrier(const char* what) const {
  if (!grouped_) return;
  impl_->guarded(what, [&] { impl_->pg->barrier()->wait(); });
}

void World::broadcast(const std::vector<at::Tensor>& ts, const char* what) const {
  if (!grouped_) return;
  torch::NoGradGuard ng;
  impl_->guarded(what, [&] {
    impl_->bucketed(ts, [&](std::vector<at::Tensor>& io) { impl_->pg->broadcast(io)->wait(); });
  });
}

void World::sum_in_place(const std::vector<at::Tensor>& ts, const char* what) const {
  if (!grouped_) return;
  torch::NoGradGuard ng;
  impl_->guarded(what, [&] {
    impl_->bucketed(ts, [&](std::vector<at::Tensor>& io) { impl_->pg->allreduce(io)->wait(); });
  });
}

std::vector<double> World::sum(std::vector<double> v, const char* what) const {
  if (!grouped_ || v.empty()) return v;
  auto t = torch::from_blob(v.data(), {static_cast<int64_t>(v.size())}, torch::kFloat64)
               .to(impl_->dev, /*non_blocking=*/false, /*copy=*/true);
  sum_in_place({t}, what);
  t = t.cpu();
  std::copy(t.data_ptr<double>(), t.data_ptr<double>() + t.numel(), v.begin());
  return v;
}

std::vector<std::string> World::gather(const std::string& bytes, const char* what) const {
  if (!grouped_) return {bytes};
  std::vector<std::string> out(static_cast<size_t>(size_));
  impl_->guarded(what, [&] {
    auto opts = torch::TensorOptions().device(impl_->dev);
    // Lengths first, then every rank's bytes padded to the longest.
    std::vector<std::vector<at::Tensor>> lens(1);
    for (int r = 0; r < size_; ++r) lens[0].push_back(torch::zeros({1}, opts.dtype(torch::kInt64)));
    std::vector<at::Tensor> mine{
        torch::full({1}, static_cast<int64_t>(bytes.size()), opts.dtype(torch::kInt64))};
    impl_->pg->allgather(lens, mine)->wait();
    int64_t longest = 1;
    std::vector<int64_t> n(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      longest = std::max(longest, n[static_cast<size_t>(r)] =
                                      lens[0][static_cast<size_t>(r)].cpu().item<int64_t>());
    auto padded = torch::zeros({longest}, torch::kUInt8);
    std::memcpy(padded.data_ptr<uint8_t>(), bytes.data(), bytes.size());
    std::vector<at::Tensor> in{padded.to(impl_->dev)};
    std::vector<std::vector<at::Tensor>> all(1);
    for (int r = 0; r < size_; ++r)
      all[0].push_back(torch::zeros({longest}, opts.dtype(torch::kUInt8)));
    impl_->pg->allgather(all, in)->wait();
    for (int r = 0; r < size_; ++r) {
      auto t = all[0][static_cast<size_t>(r)].cpu();
      const auto* p = reinterpret_cast<const char*>(t.data_ptr<uint8_t>());
      out[static_cast<size_t>(r)].assign(p, p + n[static_cast<size_t>(r)]);
    }
  });
  return out;
}

struct Transfer::Impl {
  const World::Impl* world = nullptr;
  std::string what;
  std::vector<std::function<void()>> waits;  // each half's wait
  std::vector<at::Tensor> keep;              // alive until the transport is done with them
};

Transfer::Transfer() = default;
Transfer::~Transfer() {
  if (!impl_) return;
  try {
    wait();
  } catch (const std::exception&) {
    // Already failing elsewhere: the buffers were only kept for the transport.
  }
}
Transfer::Transfer(Transfer&&) noexcept = default;
Transfer& Transfer::operator=(Transfer&& o) noexcept {
  if (this != &o) {
    Transfer old(std::move(*this));
    impl_ = std::move(o.impl_);
  }
  return *this;
}

void Transfer::wait() {
  if (!impl_) return;
  auto im = std::move(impl_);
  if (im->world == nullptr) return;
  im->world->guarded(im->what.c_str(), [&] {
    for (auto& w : im->waits) w();
  });
}

Transfer World::exchange(const at::Tensor& send, int to, const at::Tensor& recv, int from,
                         const char* what) const {
  Transfer t;
  if (!grouped_) {
    TORCH_CHECK(to <= 0 && from <= 0 && (to == -1) == (from == -1),
                "World::exchange: one process sends only to itself");
    if (to == 0) recv.copy_(send);
    return t;
  }
  t.impl_ = std::make_unique<Transfer::Impl>();
  t.impl_->world = impl_.get();
  t.impl_->what = what;
  const int tag = static_cast<int>(impl_->sequence_p2p++ % (1 << 24));
  const auto timeout = impl_->env.timeout;
  impl_->guarded(what, [&] {
    if (to >= 0) {
      std::vector<at::Tensor> io{send};
      auto work = impl_->pg->send(io, to, tag);
      t.impl_->waits.emplace_back([work, timeout] { work->wait(timeout); });
      t.impl_->keep.push_back(send);
    }
    if (from >= 0) {
      std::vector<at::Tensor> io{recv};
      auto work = impl_->pg->recv(io, from, tag);
      t.impl_->waits.emplace_back([work, timeout] { work->wait(timeout); });
      t.impl_->keep.push_back(recv);
    }
  });
  return t;
}

void World::mark_done(const std::string& key) const {
  if (!grouped_) return;
  std::string k = "done/" + key + "/" + std::to_string(impl_->sequence++);
  impl_->guarded("telling the other ranks", [&] { compat::store_set(*impl_->store, k, "1"); });
}

void World::wait_for_main(const std::string& key, const char* what) const {
  if (!grouped_) return;
  std::string k = "done/" + key + "/" + std::to_string(impl_->sequence++);
  std::string last_beat;
  auto changed = Clock::now();
  impl_->guarded(what, [&] {
    for (;;) {
      if (impl_->store->check({k})) return;
      if (signals::stop_requested())
        throw signals::Interrupted(fmt::format("rank {}: {}: stopped by a signal", rank_, what));
      std::string beat;
      if (impl_->store->check({Impl::key_of(0)})) {
        auto b = impl_->store->get(Impl::key_of(0));
        beat.assign(b.begin(), b.end());
      }
      if (beat != last_beat) last_beat = beat, changed = Clock::now();
      if (Clock::now() - changed > kSilence + kBeat)
        throw PeerLost(
            fmt::format("distributed run, rank {} of {}: {} failed: rank 0 is gone "
                        "(killed, crashed, or stopped by its own error: see its log)",
                        rank_, size_, what));
      std::this_thread::sleep_for(milliseconds(100));
    }
  });
}

namespace {
std::unique_ptr<World>& the_world() {
  static std::unique_ptr<World> w = std::make_unique<World>();
  return w;
}
}  // namespace

const World& world() { return *the_world(); }

void init(const Env& e) {
  if (!the_world()->distributed() && e.grouped()) the_world() = std::make_unique<World>(e);
}

}  // namespace ropelab::dist
