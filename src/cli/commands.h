// The `ropelab` CLI's subcommands: each group registers in its own file (cli/*_commands.cpp,
// over cli/command.h). Each subcommand parses its options into a struct and calls one library
// function; there is no logic here.
#pragma once
#include <CLI/CLI.hpp>

namespace ropelab::cli {

void register_all(CLI::App& app);
// Runs the subcommand the user chose; returns the process exit code.
int run_selected(CLI::App& app);

}  // namespace ropelab::cli
