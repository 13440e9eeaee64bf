// One writer per directory: an OS lock on <dir>/.lock that the kernel releases when its process
// dies, plus the lock file's text, which names the holder for the message a second writer gets.
//
//   <dir>/.lock   {"host": ..., "pid": ..., "command": "ropelab train tiny.yaml", "since": <unix
//   s>}
//
// Writers (train, eval writing into a run, probe, average, export, ablate) take it exclusively
// with flock(2): a second writer fails at once with one line naming the host, pid, command and
// how long ago the lock was taken (exit 2). A lock whose process died is free to the kernel;
// its text is still there, and the next writer takes it over with a warning. A clean release
// empties the text. Readers (compare, plots) take it shared for the moment they read metrics.h5,
// so a writer never starts under them; while a writer holds it, readers read the line-buffered
// metrics.jsonl instead of an HDF5 file in the middle of a write.
//
// flock works across the machines of an NFSv4 mount (Linux maps it onto byte-range locks).
// Where the file system has no locks at all (ENOLCK, EOPNOTSUPP), the text alone guards: a live
// holder on this host, or any holder on another host, is refused; a dead one on this host is
// taken over. That fallback is racy (two writers starting in the same millisecond) and says so
// in a warning.
#pragma once
#include <optional>
#include <string>

namespace ropelab::fs {

// What the lock file says about its holder.
struct LockHolder {
  std::string host, command;
  long pid = 0;
  double since = 0;  // unix seconds
  // "pid 123 on host h (ropelab train x.yaml), locked 3 min ago"
  std::string describe() const;
};

class DirLock {
 public:
  enum class Wait { kNo, kYes };
  // Takes <dir>/.lock (creating the file; `dir` must exist), or throws UserError("<dir>: in use by
  // ...; HINT: ..."). `what` is the operation the message names ("train", "prepare", ...);
  // `hint`, if any, is a way round the lock that the message adds. Wait::kYes waits for the
  // holder to finish instead (logging once whom it waits for); a stop signal while waiting throws
  // signals::Interrupted.
  static DirLock acquire(const std::string& dir, const std::string& what, Wait wait = Wait::kNo,
                         const std::string& hint = "");
  DirLock() = default;
  DirLock(DirLock&& o) noexcept;
  DirLock& operator=(DirLock&& o) noexcept;
  DirLock(const DirLock&) = delete;
  DirLock& operator=(const DirLock&) = delete;
  ~DirLock();  // empties the lock file's text, then releases the lock
  bool held() const { return fd_ >= 0; }
  void release();

 private:
  int fd_ = -1;
  std::string path_;
};

// A reader's shared hold on <dir>/.lock: `writer` is set (and nothing is held) while a writer
// holds the lock; otherwise a writer cannot start until this is released. No lock file: nothing
// to hold (a directory no ropelab writer has locked).
class ReadLock {
 public:
  explicit ReadLock(const std::string& dir);
  ReadLock(const ReadLock&) = delete;
  ReadLock& operator=(const ReadLock&) = delete;
  ~ReadLock();
  const std::optional<LockHolder>& writer() const { return writer_; }

 private:
  int fd_ = -1;
  std::optional<LockHolder> writer_;
};

// The holder of <dir>/.lock now, if a writer holds it.
std::optional<LockHolder> lock_holder(const std::string& dir);

}  // namespace ropelab::fs
