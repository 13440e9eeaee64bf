#include "train/config_history.h"

#include <spdlog/fmt/fmt.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <ctime>
#include <filesystem>
#include <set>

#include "util/error.h"
#include "util/fs.h"

namespace ropelab::train {

namespace {

const char* const kFile = "config_history.yaml";

std::string history_path(const std::string& run_dir) {
  return (std::filesystem::path(run_dir) / kFile).string();
}

// The keys that may take any new value on resume (train.max_steps may only grow).
const std::vector<std::string>& any_value() {
  static const std::vector<std::string> keys = {
      "train.eval_every", "train.log_every", "train.checkpoint_every",
      "train.keep_last",  "run.threads",     "run.share_cpus",
      "run.device"};
  return keys;
}

bool may_change(const std::string& key, const std::string& before, const std::string& after) {
  const auto& any = any_value();
  if (std::find(any.begin(), any.end(), key) != any.end()) return true;
  if (key == "train.max_steps") {  // more steps only: fewer would end a run past its end
    try {
      return std::stoll(after) >= std::stoll(before);
    } catch (const std::exception&) {
      return false;
    }
  }
  return false;
}

std::string utc_now() {
  std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

}  // namespace

std::string ConfigChange::str() const { return key + ": " + old_value + " -> " + new_value; }

std::string mutable_keys() {
  std::string out = "more train.max_steps";
  const auto& any = any_value();
  for (size_t i = 0; i < any.size(); ++i) out += (i + 1 == any.size() ? " and " : ", ") + any[i];
  return out;
}

std::vector<ConfigChange> config_changes(const std::map<std::string, std::string>& before,
                                         const std::map<std::string, std::string>& after) {
  std::vector<ConfigChange> out;
  std::set<std::string> keys;
  for (const auto& [k, v] : before) keys.insert(k);
  for (const auto& [k, v] : after) keys.insert(k);
  for (const auto& k : keys) {
    if (k == "run.name" || k == "run.out_dir") continue;
    auto b = before.find(k);
    auto a = after.find(k);
    std::string old_value = b == before.end() ? "(absent)" : b->second;
    std::string new_value = a == after.end() ? "(absent)" : a->second;
    if (old_value == new_value) continue;
    out.push_back({k, old_value, new_value, may_change(k, old_value, new_value)});
  }
  return out;
}

void record_config_changes(const std::string& run_dir, int64_t step,
                           const std::vector<ConfigChange>& changes, const std::string& why) {
  if (changes.empty()) return;
  const std::string path = history_path(run_dir);
  YAML::Node list(YAML::NodeType::Sequence);
  if (fs::exists(path)) {
    try {
      list = YAML::LoadFile(path);
    } catch (const YAML::Exception& e) {
      throw UserError(path + ": unreadable (" + e.msg + "); nothing was changed");
    }
    if (!list.IsSequence()) throw UserError(path + ": not a list of changes; nothing was changed");
  }
  const std::string when = utc_now();
  for (const auto& c : changes) {
    YAML::Node n;
    n["step"] = step;
    n["key"] = c.key;
    n["old"] = c.old_value;
    n["new"] = c.new_value;
    n["why"] = why;
    n["time"] = when;
    list.push_back(n);
  }
  YAML::Emitter out;
  out << list;
  fs::write_file_atomic(path,
                        "# Config changes accepted when this run was resumed (ropelab train);\n"
                        "# config.yaml holds the newest values.\n" +
                            std::string(out.c_str()) + "\n");
}

std::vector<std::string> read_config_history(const std::string& run_dir) {
  const std::string path = history_path(run_dir);
  std::vector<std::string> out;
  if (!fs::exists(path)) return out;
  try {
    auto list = YAML::LoadFile(path);
    for (const auto& n : list)
      out.push_back(fmt::format("step {}: {}: {} -> {}", n["step"].as<int64_t>(),
                                n["key"].as<std::string>(), n["old"].as<std::string>(),
                                n["new"].as<std::string>()));
  } catch (const YAML::Exception& e) {
    throw UserError(path + ": unreadable (" + e.msg + ")");
  }
  return out;
}

}  // namespace ropelab::train
