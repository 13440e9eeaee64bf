// The `ropelab` CLI's subcommands: each group registers in its own file (cli/*_commands.cpp,
// over cli/command.h). Each subcommand parses its options into a struct and calls one library
// function; there is no logic here.
#pragma once
#include <CLI/CLI.hpp>

#include <string>

namespace ropelab::cli {

void register_all(CLI::App& app);
// Runs the subcommand the user chose; returns the process exit code.
int run_selected(CLI::App& app);
// `text` broken into lines of at most `width` characters at spaces, the first line `first`
// characters shorter (a paragraph that starts mid-line).
std::string wrapped(const std::string& text, size_t width, size_t first = 4);

}  // namespace ropelab::cli
