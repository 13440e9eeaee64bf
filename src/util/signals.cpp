#include "util/signals.h"

#include <execinfo.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ropelab::signals {

namespace {
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int sig) {
  if (g_stop != 0 && sig == SIGINT) std::_Exit(130);  // a second Ctrl-C: leave at once
  g_stop = sig;
}

#if !defined(__SANITIZE_ADDRESS__)  // the sanitizers' own reports are better: keep their handlers
// ---- the crash report: everything below runs inside a signal handler of a process that may
// have a corrupted heap, so it allocates nothing: plain write(), and backtrace_symbols_fd, which
// writes straight to the file (backtrace itself is primed at install time, so that its first
// call, which loads libgcc, is not made in the handler).

struct Fatal {
  int sig;
  const char* name;
};
constexpr Fatal kFatal[] = {{SIGSEGV, "SIGSEGV"},
                            {SIGBUS, "SIGBUS"},
                            {SIGFPE, "SIGFPE"},
                            {SIGILL, "SIGILL"},
                            {SIGABRT, "SIGABRT"}};
char g_report[512] = "";
char** g_argv = nullptr;

const char* fatal_name(int sig) {
  for (const auto& f : kFatal)
    if (f.sig == sig) return f.name;
  return "a fatal signal";
}

void put(int fd, const char* s) {
  size_t n = std::strlen(s);
  while (n > 0) {
    ssize_t w = write(fd, s, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return;
    s += w;
    n -= static_cast<size_t>(w);
  }
}

extern "C" void on_fatal(int sig) {
  const int saved_errno = errno;
  const char* name = fatal_name(sig);
  // A new file only (never through a link someone left at that name in a shared /tmp).
  int fd = open(g_report, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  put(STDERR_FILENO, "ropelab: internal error: ");
  put(STDERR_FILENO, name);
  put(STDERR_FILENO, " (a bug: please report it)");
  if (fd >= 0) {
    put(STDERR_FILENO, "; details in ");
    put(STDERR_FILENO, g_report);
    put(fd, "ropelab " ROPELAB_VERSION " crashed: ");
    put(fd, name);
    put(fd, "\ncommand:");
    for (char** a = g_argv; a != nullptr && *a != nullptr; ++a) {
      put(fd, " ");
      put(fd, *a);
    }
    put(fd, "\nbacktrace of the thread that crashed (innermost first):\n");
    void* frames[64];
    backtrace_symbols_fd(frames, backtrace(frames, 64), fd);
    close(fd);
  }
  put(STDERR_FILENO, "\n");
  errno = saved_errno;
  // SA_RESETHAND restored the default action: the signal, pending until this handler returns,
  // ends the process as it would have without the report.
  raise(sig);
}
#endif
}  // namespace

void use_signal_stack() {
  stack_t cur = {};
  if (sigaltstack(nullptr, &cur) == 0 && (cur.ss_flags & SS_DISABLE) == 0) return;  // has one
  // Mapped, not allocated: it is never freed (a pool thread keeps it for its life, and a signal
  // may come at any moment of it), and no heap block sits next to a frame written into it.
  constexpr size_t kSize = size_t{64} * 1024;  // an AVX-512 signal frame is ~3 KiB, AMX's ~11 KiB
  void* p = mmap(nullptr, kSize, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return;
  stack_t ss = {};
  ss.ss_sp = p;
  ss.ss_size = kSize;
  if (sigaltstack(&ss, nullptr) != 0) munmap(p, kSize);
}

bool stop_requested() { return g_stop != 0; }

void throw_if_stopped(const std::string& what, const std::string& kept) {
  if (g_stop == 0) return;
  const char* name = g_stop == SIGINT ? "SIGINT" : g_stop == SIGHUP ? "SIGHUP" : "SIGTERM";
  throw Interrupted(what + " stopped by " + name + "; " + kept);
}

void install_handlers() {
  use_signal_stack();
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_ONSTACK;  // never on the interrupted code's stack: see signals.h
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);  // a closed terminal or ssh session: stop like SIGTERM
  // A file-size limit (ulimit -f) then makes write() fail with EFBIG, which takes the same
  // clean error path as a full disk, instead of killing the process in the middle of a save.
  std::signal(SIGXFSZ, SIG_IGN);
}

void install_crash_report(char** argv) {
#if defined(__SANITIZE_ADDRESS__)
  (void)argv;
#else
  g_argv = argv;
  const char* tmp = std::getenv("TMPDIR");
  if (tmp == nullptr || *tmp == '\0') tmp = "/tmp";
  std::snprintf(g_report, sizeof g_report, "%s/ropelab-crash-%ld.txt", tmp,
                static_cast<long>(getpid()));
  void* prime[1];
  backtrace(prime, 1);
  use_signal_stack();  // a thread whose stack overflowed still reports
  struct sigaction sa = {};
  sa.sa_handler = on_fatal;
  sa.sa_flags = SA_RESETHAND | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  for (const auto& f : kFatal) sigaction(f.sig, &sa, nullptr);
#endif
}

}  // namespace ropelab::signals
