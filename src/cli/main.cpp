// The `ropelab` command: subcommands are thin wiring over the library in src/.
//
// Exit codes: 0 success, 2 a problem with the user's input (config, data, arguments),
// 1 an internal error (a bug: please report it; a crash dies of its signal after a one-line
// message and a report file, util/signals.h), 3 a distributed run lost a rank (the message
// names it; that rank's own log says why), 143 stopped by SIGINT, SIGTERM or SIGHUP
// (whatever was complete is kept, nothing partial is written), 130 a second Ctrl-C.
#include <c10/util/Exception.h>
#include <c10/util/Logging.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>

#include "cli/commands.h"
#include "config/loader.h"
#include "dist/world.h"
#include "util/error.h"
#include "util/h5.h"
#include "util/log.h"
#include "util/platform.h"
#include "util/signals.h"

namespace {

std::string first_line(const std::string& s) {
  auto nl = s.find('\n');
  return nl == std::string::npos ? s : s.substr(0, nl);
}

}  // namespace

int main(int argc, char** argv) try {
  ropelab::platform::ensure_fast_blas(argc, argv);  // may re-execute: nothing before it
  ropelab::signals::install_crash_report(argv);
  ropelab::platform::keep_freed_memory();
  ropelab::h5::no_cleanup_at_exit();
  ropelab::signals::install_handlers();
  // Every thread of ATen's pool gets an alternate signal stack now, for every command (a command
  // that changes the thread count does it again): util/signals.h says why.
  ropelab::platform::set_threads(0);
  // libtorch's own log lines (c10d's socket retries, ...) at warning level carry a whole C++
  // stack trace in libtorch 2.x; ropelab reports those failures itself, in one line. Errors
  // still print; ROPELAB_TORCH_WARNINGS=1 keeps the warnings.
  if (std::getenv("ROPELAB_TORCH_WARNINGS") == nullptr)
    FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, 2);  // 2 = ERROR
  ropelab::log::init(std::getenv("ROPELAB_LOG_LEVEL") ? std::getenv("ROPELAB_LOG_LEVEL") : "info");

  CLI::App app{
      "ropelab: train and compare transformers with swappable position encodings\n"
      "(model.position.type: " +
          ropelab::cli::wrapped(
              ropelab::config::joined(
                  ropelab::config::variant_names<ropelab::config::PositionVariant>()),
              80, 22) +
          ";\nRoPE also with linear attention, hybrid NoPE and context extension).\n\n"
          "Typical session:\n"
          "  ropelab prepare configs/clm-small.yaml          # corpus + tokenizer + HDF5 datasets\n"
          "  ropelab train configs/clm-small.yaml model.position.type=rope\n"
          "  ropelab ablate experiments/quickstart.yaml      # train variants, then compare\n\n"
          "Every config key can be overridden as key.path=value; `ropelab config --schema` lists\n"
          "them all with their defaults.",
      "ropelab"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("ropelab ") + ROPELAB_VERSION);
  app.failure_message(CLI::FailureMessage::help);

  ropelab::cli::register_all(app);

  try {
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForAllHelp& e) {
      return app.exit(e);
    } catch (const CLI::CallForVersion& e) {
      return app.exit(e);
    } catch (const CLI::ParseError& e) {
      app.exit(e);
      return 2;
    }
    return ropelab::cli::run_selected(app);
  } catch (const ropelab::config::ConfigError& e) {
    for (const auto& p : e.problems()) std::fprintf(stderr, "error: %s\n", p.str().c_str());
    std::fprintf(stderr, "ropelab: %zu problem(s) in the configuration\n", e.problems().size());
    return 2;
  } catch (const ropelab::dist::PeerLost& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 3;
  } catch (const ropelab::UserError& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 2;
  } catch (const ropelab::signals::Interrupted& e) {
    std::fprintf(stderr, "stopped: %s\n", e.what());
    return 143;
  } catch (const std::filesystem::filesystem_error& e) {
    // A path the user gave that the OS refuses (too long, not a directory, no permission).
    std::fprintf(stderr, "error: %s\n", first_line(e.what()).c_str());
    return 2;
  } catch (const c10::OutOfMemoryError& e) {
    std::fprintf(stderr, "error: out of device memory (%s): lower the batch size\n",
                 first_line(e.what_without_backtrace()).c_str());
    return 2;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "internal error (libtorch): %s\n",
                 first_line(e.what_without_backtrace()).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "internal error: %s\n", first_line(e.what()).c_str());
    return 1;
  }
} catch (const std::exception& e) {
  std::fprintf(stderr, "internal error: %s\n", e.what());
  return 1;
}
