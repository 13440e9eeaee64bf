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

void install_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
}

}  // namespace ropelab::signals
