#include "cli/commands.h"

#include <iostream>
#include <map>
#include <sstream>

#include "cli/command.h"
#include "dist/world.h"

namespace ropelab::cli {

Opts g;

namespace {
std::map<CLI::App*, std::function<int()>> g_actions;
}  // namespace

void add(CLI::App& app, const std::string& name, const std::string& help,
         const std::function<void(CLI::App&)>& options, std::function<int()> action) {
  CLI::App* sub = app.add_subcommand(name, help);
  options(*sub);
  g_actions[sub] = std::move(action);
}

// `text` broken into lines of at most `width` characters at spaces (the first line `first`
// characters shorter, for a paragraph that starts mid-line).
std::string wrapped(const std::string& text, size_t width, size_t first) {
  std::string out, line;
  size_t room = width - first;
  std::istringstream words(text);
  for (std::string w; words >> w;) {
    if (!line.empty() && line.size() + 1 + w.size() > room) {
      out += line + "\n";
      line.clear();
      room = width;
    }
    line += (line.empty() ? "" : " ") + w;
  }
  return out + line;
}

void add_config_and_overrides(CLI::App& sub) {
  sub.add_option("config", g.file, "YAML config file")->required();
  sub.add_option("overrides", g.overrides,
                 "key.path=value overrides, applied after the file (e.g. model.d_model=128)");
}

std::vector<int64_t> parse_lengths(const std::string& s, const std::string& what) {
  std::vector<int64_t> out;
  std::stringstream ss(s);
  for (std::string item; std::getline(ss, item, ',');) {
    try {
      size_t used = 0;
      long long v = std::stoll(item, &used);
      if (used != item.size() || v < 2) throw std::invalid_argument(item);
      out.push_back(v);
    } catch (const std::exception&) {
      throw UserError(what + ": '" + item + "' is not a length >= 2 (expected e.g. 128,256,512)");
    }
  }
  return out;
}

void register_all(CLI::App& app) {
  register_training(app);
  register_evaluation(app);
  register_translation(app);
  register_models(app);
  register_speed(app);
  register_long_context(app);
}

int run_selected(CLI::App& app) {
  for (auto& [sub, action] : g_actions) {
    if (!sub->parsed()) continue;
    const bool point = sub->get_name() == "bench" && sub->get_option("--point")->count() > 0;
    if (sub->get_name() != "train" && !point && dist::env_from_environment().size > 1)
      throw UserError("WORLD_SIZE > 1: only `ropelab train` runs data-parallel, not `" +
                      sub->get_name() +
                      "` (run it once, outside torchrun / launch; train prepares the data on "
                      "rank 0 itself)");
    return action();
  }
  std::cerr << app.help();
  return 2;
}

}  // namespace ropelab::cli
