// Subcommand table of the `ropelab` CLI. Each subcommand parses its options into a struct and
// calls one library function; there is no logic here.
#pragma once
#include <CLI/CLI.hpp>

namespace ropelab::cli {

void register_all(CLI::App& app);
// Runs the subcommand the user chose; returns the process exit code.
int run_selected(CLI::App& app);

}  // namespace ropelab::cli
