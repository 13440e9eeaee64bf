// A run's TensorBoard event files (see tensorboard.h).
#include "run/tensorboard.h"

#include <yaml-cpp/yaml.h>

#include <cstdlib>
#include <filesystem>

#include "util/fs.h"

namespace ropelab::run {

namespace stdfs = std::filesystem;

namespace {

tb::HParam scalar_value(const std::string& text) {
  if (text == "true") return true;
  if (text == "false") return false;
  char* end = nullptr;
  double d = std::strtod(text.c_str(), &end);
  if (!text.empty() && end == text.c_str() + text.size()) return d;
  return text;
}

void flatten_yaml(const YAML::Node& n, const std::string& key,
                  std::map<std::string, tb::HParam>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) {
      const auto k = kv.first.as<std::string>();
      flatten_yaml(kv.second, key.empty() ? k : key + "." + k, out);
    }
  } else if (n.IsScalar()) {
    out[key] = scalar_value(n.Scalar());
  } else if (n.IsSequence()) {
    YAML::Emitter e;
    e << YAML::Flow << n;
    out[key] = std::string(e.c_str());
  }
}

// The name of a list item in a tag: its "length" or "name" field, else its index.
std::string item_name(const nlohmann::json& item, size_t i) {
  for (const char* k : {"length", "name"}) {
    if (!item.is_object() || !item.contains(k)) continue;
    const auto& v = item[k];
    if (v.is_number_integer()) return std::string(k) + "=" + std::to_string(v.get<int64_t>());
    if (v.is_string()) return v.get<std::string>();
  }
  return std::to_string(i);
}

void write_numbers(tb::EventWriter& w, const std::string& tag, const nlohmann::json& j,
                   int64_t step) {
  if (j.is_number() && !j.is_number_unsigned()) {
    w.scalar(tag, step, j.get<double>());
  } else if (j.is_number_unsigned()) {
    w.scalar(tag, step, static_cast<double>(j.get<uint64_t>()));
  } else if (j.is_boolean()) {
    w.scalar(tag, step, j.get<bool>() ? 1.0 : 0.0);
  } else if (j.is_object()) {
    for (const auto& [k, v] : j.items())
      if (k != "step") write_numbers(w, tag + "/" + k, v, step);  // the step is the events'

  } else if (j.is_array()) {
    for (size_t i = 0; i < j.size(); ++i)
      write_numbers(w, tag + "/" + item_name(j[i], i), j[i], step);
  }
}

}  // namespace

std::string tensorboard_dir(const std::string& run_dir) {
  return (stdfs::path(run_dir) / "tensorboard").string();
}

std::map<std::string, tb::HParam> hparams_of(const std::string& config_yaml) {
  std::map<std::string, tb::HParam> out;
  flatten_yaml(YAML::Load(config_yaml), "", out);
  return out;
}

void write_run_header(tb::EventWriter& w, const std::string& config_yaml, int64_t step) {
  w.session_start(step);
  // Markdown: four spaces make the YAML a code block.
  std::string md;
  size_t start = 0;
  while (start < config_yaml.size()) {
    size_t end = config_yaml.find('\n', start);
    if (end == std::string::npos) end = config_yaml.size();
    md += "    " + config_yaml.substr(start, end - start) + "\n";
    start = end + 1;
  }
  w.text("config", step, md);
  w.hparams(hparams_of(config_yaml), "");
}

void write_results(tb::EventWriter& w, const std::string& prefix, const nlohmann::json& j,
                   int64_t step) {
  write_numbers(w, prefix, j, step);
  w.text(prefix, step, "```json\n" + j.dump(1) + "\n```\n");
}

void append_results(const std::string& run_dir, const std::string& prefix, const nlohmann::json& j,
                    int64_t step) {
  const std::string dir = tensorboard_dir(run_dir);
  if (!stdfs::is_directory(dir)) return;
  tb::EventWriter w(dir);
  write_results(w, prefix, j, step);
}

}  // namespace ropelab::run
