#include "util/signals.h"

#include <csignal>
#include <cstdlib>

namespace ropelab::signals {

namespace {
volatile std::sig_atomic_t g_stop = 0;
extern "C" void on_signal(int sig) {
  if (g_stop != 0 && sig == SIGINT) std::_Exit(130);  // a second Ctrl-C: leave at once
  g_stop = sig;
}
}  // namespace

bool stop_requested() { return g_stop != 0; }

void throw_if_stopped(const std::string& what, const std::string& kept) {
  if (g_stop == 0) return;
  const char* name = g_stop == SIGINT ? "SIGINT" : g_stop == SIGHUP ? "SIGHUP" : "SIGTERM";
  throw Interrupted(what + " stopped by " + name + "; " + kept);
}

void install_handlers() {
  struct sigaction sa = {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);  // a closed terminal or ssh session: stop like SIGTERM
  // A file-size limit (ulimit -f) then makes write() fail with EFBIG, which takes the same
  // clean error path as a full disk, instead of killing the process in the middle of a save.
  std::signal(SIGXFSZ, SIG_IGN);
}

}  // namespace ropelab::signals
