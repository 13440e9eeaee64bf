#include "util/dir_lock.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "util/error.h"
#include "util/fs.h"
#include "util/signals.h"

namespace ropelab::fs {

namespace {

using json = nlohmann::json;
namespace stdfs = std::filesystem;

std::string lock_path(const std::string& dir) { return (stdfs::path(dir) / ".lock").string(); }

double now_s() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string this_host() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "?";
  return buf;
}

// This process's command line, argv[0] as its file name: "ropelab train tiny.yaml".
std::string this_command() {
  std::string raw;
  try {
    raw = read_file("/proc/self/cmdline");
  } catch (const UserError&) {
    return "ropelab";
  }
  std::string out;
  size_t start = 0;
  for (size_t i = 0; i <= raw.size(); ++i) {
    if (i < raw.size() && raw[i] != '\0') continue;
    std::string arg = raw.substr(start, i - start);
    start = i + 1;
    if (arg.empty()) continue;
    if (out.empty()) arg = stdfs::path(arg).filename().string();
    out += (out.empty() ? "" : " ") + arg;
  }
  return out.empty() ? "ropelab" : out;
}

std::string read_fd(int fd) {
  std::string s;
  char buf[4096];
  off_t off = 0;
  for (;;) {
    ssize_t n = pread(fd, buf, sizeof buf, off);
    if (n <= 0) break;
    s.append(buf, static_cast<size_t>(n));
    off += n;
  }
  return s;
}

std::optional<LockHolder> parse_holder(const std::string& text) {
  if (text.find_first_not_of(" \n\t") == std::string::npos) return std::nullopt;
  LockHolder h;
  try {
    auto j = json::parse(text);
    h.host = j.value("host", "?");
    h.pid = j.value("pid", 0L);
    h.command = j.value("command", "?");
    h.since = j.value("since", 0.0);
  } catch (const std::exception&) {
    h.host = "?";
    h.command = "unreadable lock file";
  }
  return h;
}

// A process on this host with that pid exists.
bool alive_here(const LockHolder& h) {
  return h.host == this_host() && h.pid > 0 &&
         (kill(static_cast<pid_t>(h.pid), 0) == 0 || errno == EPERM);
}

bool no_locks_here(int err) {
  return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL;
}

std::string in_use(const std::string& dir, const std::string& what,
                   const std::optional<LockHolder>& h, const std::string& hint) {
  return fmt::format(
      "{}: in use by {}; {} refused (two writers would mix their files). HINT: wait for it to "
      "finish or stop it{}{}",
      dir, h ? h->describe() : std::string("another process (a reader, e.g. compare)"), what,
      h && h->host != this_host() ? fmt::format(" on {}", h->host) : "",
      hint.empty() ? "" : "; " + hint);
}

// The locks this process holds: a nested acquire (ablate trains a run, then evaluates it) shares
// the outer one instead of refusing itself.
struct Held {
  int fd = -1;
  int count = 0;
};
std::map<std::string, Held>& held_locks() {
  static std::map<std::string, Held> m;
  return m;
}
std::mutex& held_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

std::string LockHolder::describe() const {
  double ago = std::max(0.0, now_s() - since);
  std::string when = ago < 120    ? fmt::format("{:.0f} s", ago)
                     : ago < 7200 ? fmt::format("{:.0f} min", ago / 60)
                                  : fmt::format("{:.1f} h", ago / 3600);
  return fmt::format("pid {} on host {} ({}), locked {} ago", pid, host, command, when);
}

DirLock DirLock::acquire(const std::string& dir, const std::string& what, Wait wait,
                         const std::string& hint) {
  if (!stdfs::is_directory(dir)) throw UserError(dir + ": no such directory");
  const std::string path = stdfs::weakly_canonical(lock_path(dir)).string();
  DirLock lock;
  lock.path_ = path;
  {
    std::lock_guard<std::mutex> g(held_mutex());
    auto it = held_locks().find(path);
    if (it != held_locks().end()) {  // this process holds it already (ablate -> train -> eval)
      ++it->second.count;
      lock.fd_ = it->second.fd;
      return lock;
    }
  }
  int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) throw UserError(path + ": cannot open the lock file (" + std::strerror(errno) + ")");
  struct CloseUnlessKept {  // a refused acquire closes its descriptor and leaves the text alone
    int fd;
    bool keep = false;
    ~CloseUnlessKept() {
      if (!keep) ::close(fd);
    }
  } guard{fd};
  bool os_lock = true;
  bool told = false;
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    if (flock(fd, LOCK_EX | LOCK_NB) == 0) break;
    const int err = errno;
    if (no_locks_here(err)) {
      os_lock = false;
      break;
    }
    if (err != EWOULDBLOCK && err != EINTR)
      throw UserError(path + ": cannot lock (" + std::strerror(err) + ")");
    auto holder = parse_holder(read_fd(fd));
    const double waited =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (wait == Wait::kYes) {
      if (!told) {
        spdlog::info("{}: waiting for {} to finish", dir,
                     holder ? holder->describe() : std::string("another process"));
        told = true;
      }
      signals::throw_if_stopped(what + " of " + dir, "nothing was changed");
    } else {
      // A writer's text names a process that still runs: refuse at once. An empty text (or a
      // dead holder's) means a reader holds it shared for a moment: wait a little.
      const bool writer = holder && (alive_here(*holder) || holder->host != this_host());
      if (writer || waited > 3.0) throw UserError(in_use(dir, what, holder, hint));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  auto before = parse_holder(read_fd(fd));
  if (!os_lock) {
    if (before && (alive_here(*before) || before->host != this_host()))
      throw UserError(in_use(dir, what, before, hint) +
                      fmt::format(", or delete {} if it is gone", path));
    spdlog::warn(
        "{}: the file system has no locks; only the lock file's text guards this run "
        "against a second writer",
        dir);
  }
  if (before)
    spdlog::warn("{}: taking over the lock left by {}, which is no longer running", dir,
                 before->describe());
  json j = {{"host", this_host()},
            {"pid", static_cast<long>(getpid())},
            {"command", this_command()},
            {"since", std::floor(now_s())}};
  const std::string text = j.dump() + "\n";
  if (ftruncate(fd, 0) != 0 ||
      pwrite(fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size()))
    throw UserError(path + ": cannot write the lock file (" + std::strerror(errno) + ")");
  fdatasync(fd);
  std::lock_guard<std::mutex> g(held_mutex());
  held_locks()[path] = {fd, 1};
  guard.keep = true;
  lock.fd_ = fd;
  return lock;
}

DirLock::DirLock(DirLock&& o) noexcept : fd_(o.fd_), path_(std::move(o.path_)) { o.fd_ = -1; }

DirLock& DirLock::operator=(DirLock&& o) noexcept {
  if (this != &o) {
    release();
    fd_ = o.fd_;
    path_ = std::move(o.path_);
    o.fd_ = -1;
  }
  return *this;
}

DirLock::~DirLock() { release(); }

void DirLock::release() {
  if (fd_ < 0) return;
  {
    std::lock_guard<std::mutex> g(held_mutex());
    auto it = held_locks().find(path_);
    if (it != held_locks().end() && --it->second.count > 0) {
      fd_ = -1;  // an outer holder in this process keeps it
      return;
    }
    held_locks().erase(path_);
  }
  // Emptied while still held: the next writer sees a clean release, not a dead holder.
  if (ftruncate(fd_, 0) == 0) fdatasync(fd_);
  ::close(fd_);  // releases the flock
  fd_ = -1;
}

ReadLock::ReadLock(const std::string& dir) {
  const std::string path = lock_path(dir);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;  // no writer has ever locked it
  if (flock(fd, LOCK_SH | LOCK_NB) == 0) {
    fd_ = fd;
    return;
  }
  const int err = errno;
  if (no_locks_here(err)) {
    auto h = parse_holder(read_fd(fd));
    if (h && alive_here(*h)) writer_ = h;
  } else {
    writer_ = parse_holder(read_fd(fd));
    if (!writer_) writer_ = LockHolder{"?", "a writer", 0, 0};
  }
  ::close(fd);
}

ReadLock::~ReadLock() {
  if (fd_ >= 0) ::close(fd_);
}

std::optional<LockHolder> lock_holder(const std::string& dir) {
  ReadLock r(dir);
  return r.writer();
}

}  // namespace ropelab::fs
