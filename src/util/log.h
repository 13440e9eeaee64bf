// Logging: spdlog to stderr, plus a log file per run (add_log_file).
#pragma once
#include <spdlog/spdlog.h>

#include <string>

namespace ropelab::log {

// Sets up the "ropelab" default logger on stderr. Level: "debug", "info", "warn", "error".
void init(const std::string& level = "info");
// A rank of a distributed run: every line says "[rank N]"; ranks other than 0 show warnings
// and errors only (rank 0 reports progress for all).
void set_rank(int rank);
// Adds a file sink (appending) so everything logged from now on is also in `path`.
void add_log_file(const std::string& path);
// Removes file sinks (called when a run ends so the next run in the process gets its own).
void drop_log_files();

}  // namespace ropelab::log
