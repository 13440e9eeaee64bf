// Stop requests from signals. SIGINT, SIGTERM or SIGHUP ask every long loop (training,
// evaluation) to finish its current unit of work and leave cleanly; a second Ctrl-C leaves at
// once (130). SIGXFSZ is ignored, so a file-size limit is a write error like a full disk.
// A crash (SIGSEGV, SIGBUS, SIGFPE, SIGILL, or SIGABRT, e.g. from glibc's heap checks) is a bug:
// the crash report says so in one line and writes the backtrace to a file to attach to a report.
//
// Every handler runs on an alternate signal stack (SA_ONSTACK), and every thread that runs
// kernels has one (use_signal_stack). oneDNN's JIT float32 GEMM kernels (before oneDNN 3.11.2:
// Debian 12's 2.6 and Debian 13's 3.x among them; uxlfoundation/oneDNN#4845) point the stack
// pointer at a heap workspace while they run, so a handler run on the interrupted stack writes
// its frame into the heap: glibc then aborts ("corrupted size vs. prev_size while consolidating")
// at a later free. A Ctrl-C or SIGTERM in a training step did this at random.
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
// The crash report, installed first thing in main (argv is kept for the report). On a fatal
// signal: "ropelab: internal error: SIGSEGV (a bug: please report it); details in PATH" on
// stderr, and PATH = $TMPDIR/ropelab-crash-<pid>.txt (TMPDIR unset: /tmp) holds the version, the
// command line and the backtrace of the thread that crashed (frames in ropelab itself as
// "ropelab(+0xOFFSET)": `addr2line -Cfe build/bin/ropelab 0xOFFSET` names them; the file is
// created new, readable by its owner only, and left out if that name exists). The process
// then dies of the same signal, as it would have without the report (exit status 128 + signal,
// a core dump where enabled).
void install_crash_report(char** argv);
// Gives the calling thread an alternate signal stack (64 KiB, never freed) unless it has one
// (its own, or a sanitizer's). install_handlers does it for its thread, and
// platform::set_threads for every thread of ATen's pool, the threads oneDNN runs on.
void use_signal_stack();
// True after SIGINT/SIGTERM/SIGHUP (polled by every long loop).
bool stop_requested();
// Throws Interrupted("<what> stopped by <signal name>; <kept>") after a stop request.
void throw_if_stopped(const std::string& what, const std::string& kept);

}  // namespace ropelab::signals
