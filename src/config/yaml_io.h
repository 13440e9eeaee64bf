// What the config files' readers, writer, schema printer and experiment reader share (config/
// loader.cpp, writer.cpp, schema_print.cpp, experiments.cpp). Not for use outside src/config.
#pragma once
#include <yaml-cpp/yaml.h>

#include <map>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "config/loader.h"

namespace ropelab::config::io {

// The names joined by `sep`.
std::string join(const std::vector<std::string>& v, const char* sep = ", ");
// "did you mean 'X'? " for the option nearest to `word` (by edit distance), or "".
std::string did_you_mean(const std::string& word, const std::vector<std::string>& options);

template <class T, class = void>
struct is_visitable : std::false_type {};
template <class T>
struct is_visitable<
    T, std::void_t<decltype(std::declval<T&>().template visit<int>(std::declval<int&>()))>>
    : std::true_type {};
// (visit<int> is never instantiated: decltype only looks at the declaration.)

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

// Shared state of one load: problems found, where each key was last set, required keys.
struct Ctx {
  std::vector<Problem> problems;
  std::map<std::string, Loc> set_at;
  std::set<std::string> required;
  bool unreadable = false;  // a file could not be read or parsed: skip the "missing" checks
  Loc top;                  // the file the user named (for problems with no better place)
  void add(Loc loc, std::string key, std::string msg) {
    problems.push_back(Problem{std::move(loc), std::move(key), std::move(msg)});
  }
};

// Where `key` was last set in this load (its file and line), else the file the user named.
Loc where(const Ctx& ctx, const std::string& key);
// A file loaded with its `inherit` chain and `overrides`, every problem in ctx (not validated).
Config read_config(const std::string& path, const std::vector<Override>& overrides, Ctx& ctx);
Experiment read_experiment(const std::string& path, Ctx& ctx);
// `p` relative to the directory of `base_file` (absolute and empty paths as they are).
std::string resolve_relative(const std::string& base_file, const std::string& p);

// ---------------------------------------------------------------------------------------------
// Writer: emits every field (defaults included) in visit order.

class Writer {
 public:
  explicit Writer(YAML::Emitter& out, bool comments = false) : out_(out), comments_(comments) {}

  template <class T>
  void operator()(const char* key, T& field, const char* help, const Check& check = {}) {
    out_ << YAML::Key << key;
    if constexpr (is_visitable<T>::value) {
      // A section's comment goes on its own line, before its keys.
      if (comments_ && help[0] != '\0') out_ << YAML::Comment(help);
      out_ << YAML::Value;
      write(field);
      return;
    }
    out_ << YAML::Value;
    write(field);
    if (comments_) {
      std::string h = help;
      std::vector<std::string> choices = check.choices;
      if constexpr (std::is_enum_v<T>) choices = enum_names<T>();
      if (!choices.empty() && h.find(join(choices)) == std::string::npos && choices.size() > 1 &&
          choices.size() <= 12)
        h += " [" + join(choices, " | ") + "]";
      if (check.required) h += " (required)";
      if (!h.empty()) out_ << YAML::Comment(h);
    }
  }

 private:
  void write(int64_t v) { out_ << v; }
  void write(double v) { out_ << format_double(v); }
  void write(bool v) { out_ << (v ? "true" : "false"); }
  template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
  void write(E v) {
    out_ << to_string(v);
  }
  void write(const std::string& v) {
    if (v.empty())
      out_ << YAML::DoubleQuoted << v;
    else
      out_ << v;
  }
  template <class T>
  void write(std::vector<T>& v) {
    if (v.empty()) {
      out_ << YAML::Flow << YAML::BeginSeq << YAML::EndSeq;
      return;
    }
    out_ << YAML::BeginSeq;
    for (auto& x : v) write(x);
    out_ << YAML::EndSeq;
  }
  template <class T>
  void write(Maybe<T>& v) {
    if (v.has)
      write(v.value);
    else
      out_ << YAML::Null;
  }
  template <class T>
  void write(std::map<std::string, T>& m) {
    if (m.empty()) {
      out_ << YAML::Flow << YAML::BeginMap << YAML::EndMap;
      return;
    }
    out_ << YAML::BeginMap;
    for (auto& [name, x] : m) {
      out_ << YAML::Key << name << YAML::Value;
      write(x);
    }
    out_ << YAML::EndMap;
  }
  template <class T, std::enable_if_t<is_visitable<T>::value, int> = 0>
  void write(T& v) {
    out_ << YAML::BeginMap;
    v.visit(*this);
    out_ << YAML::EndMap;
  }

  YAML::Emitter& out_;
  bool comments_;
};

}  // namespace ropelab::config::io
