// The pieces every subcommand file of cli/ shares: the options the parser fills (one struct:
// CLI11 binds each option to a field), `add` (a subcommand, its options and its action), and
// the parsers of list options. Each *_commands.cpp registers its group of subcommands; the
// actions are thin: they parse and call one library function.
#pragma once
#include <CLI/CLI.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "config/schema.h"
#include "util/error.h"

namespace ropelab::cli {

// What several commands share: the positional file, key.path=value overrides, --out, and
// --latest. Each command file keeps its own options beside its commands.
struct Opts {
  std::string file;
  std::vector<std::string> overrides;
  std::string out;
  bool use_latest = false;
};
extern Opts g;  // filled by the parser of the subcommand the user chose

// Registers subcommand `name`: `options` declares its options on it, `action` runs it.
void add(CLI::App& app, const std::string& name, const std::string& help,
         const std::function<void(CLI::App&)>& options, std::function<int()> action);
// The positional config file and key.path=value overrides of most subcommands.
void add_config_and_overrides(CLI::App& sub);
// A comma-separated list of sequence lengths (each >= 2); UserError naming `what` otherwise.
std::vector<int64_t> parse_lengths(const std::string& s, const std::string& what = "--lengths");

// The groups of subcommands, one file each.
void register_training(CLI::App& app);      // train_commands.cpp
void register_evaluation(CLI::App& app);    // eval_commands.cpp
void register_translation(CLI::App& app);   // translation_commands.cpp
void register_models(CLI::App& app);        // model_commands.cpp
void register_speed(CLI::App& app);         // speed_commands.cpp
void register_long_context(CLI::App& app);  // long_context_commands.cpp

}  // namespace ropelab::cli
