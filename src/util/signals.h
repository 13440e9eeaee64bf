// Stop requests from signals. SIGINT, SIGTERM or SIGHUP ask every long loop (training,
// evaluation) to finish its current unit of work and leave cleanly; a second Ctrl-C leaves at
// once (130). SIGXFSZ is ignored, so a file-size limit is a write error like a full disk.
#pragma once
#include <stdexcept>
#include <string>

namespace ropelab::signals {

// A command stopped by SIGINT, SIGTERM or SIGHUP before it finished. What it had completed
// is kept (checkpoints, prepared splits); nothing partial was written. The CLI prints the
// message on one line and exits with code 143.
class Interrupted : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Installed first thing in main, so a signal at any moment of any command is handled.
void install_handlers();
// True after SIGINT/SIGTERM/SIGHUP (polled by every long loop).
bool stop_requested();
// Throws Interrupted("<what> stopped by <signal name>; <kept>") after a stop request.
void throw_if_stopped(const std::string& what, const std::string& kept);

}  // namespace ropelab::signals
