// The strict YAML reader over the visit() lists in config/schema.h: files, their `inherit`
// chains and key=value overrides, then load_config's defaults and validation
// (config/validate.cpp). The writer, the schema printer and experiments have files of their own.
#include "config/loader.h"

#include "config/layout.h"
#include "config/yaml_io.h"

#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "util/fs.h"

namespace ropelab::config {

namespace stdfs = std::filesystem;
using io::Ctx;
using io::did_you_mean;
using io::is_vector;
using io::is_visitable;
using io::join;
using io::where;

// ---------------------------------------------------------------------------------------------

std::string Loc::str() const {
  if (line <= 0) return file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(col);
}

std::string Problem::str() const {
  std::string s = loc.str();
  if (!key.empty()) s += (s.empty() ? "" : ": ") + key;
  return s + ": " + message;
}

namespace {
std::string join_problems(const std::vector<Problem>& ps) {
  std::string s;
  for (const auto& p : ps) s += (s.empty() ? "" : "\n") + p.str();
  return s;
}
}  // namespace

ConfigError::ConfigError(std::vector<Problem> problems)
    : UserError(join_problems(problems)), problems_(std::move(problems)) {}

namespace {

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j)
      cur[j] =
          std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] != b[j - 1] ? 1 : 0)});
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

Loc loc_of(const YAML::Node& n, const std::string& file) {
  YAML::Mark m = n.Mark();
  if (m.is_null() || m.line < 0) return Loc{file, 0, 0};
  return Loc{file, m.line + 1, m.column + 1};
}

// Reports duplicate keys anywhere in a document.
void find_duplicates(const YAML::Node& n, const std::string& file, const std::string& prefix,
                     Ctx& ctx) {
  if (n.IsMap()) {
    std::map<std::string, Loc> seen;
    for (auto it = n.begin(); it != n.end(); ++it) {
      std::string k = it->first.Scalar();
      Loc here = loc_of(it->first, file);
      auto [pos, fresh] = seen.emplace(k, here);
      if (!fresh)
        ctx.add(here, prefix + k,
                "duplicate key (first set at line " + std::to_string(pos->second.line) + ")");
      find_duplicates(it->second, file, prefix + k + ".", ctx);
    }
  } else if (n.IsSequence()) {
    for (size_t i = 0; i < n.size(); ++i)
      find_duplicates(
          n[i], file,
          prefix.substr(0, prefix.empty() ? 0 : prefix.size() - 1) + "[" + std::to_string(i) + "].",
          ctx);
  }
}

}  // namespace

namespace io {

std::string did_you_mean(const std::string& word, const std::vector<std::string>& options) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& o : options) {
    size_t d = edit_distance(word, o);
    if (d < best_d) best_d = d, best = o;
  }
  return best.empty() ? "" : "did you mean '" + best + "'? ";
}

std::string join(const std::vector<std::string>& v, const char* sep) {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

}  // namespace io

namespace {

// ---------------------------------------------------------------------------------------------
// Reader: applies one YAML map onto a struct, setting only the keys present.

class Reader {
 public:
  Reader(const YAML::Node& map, std::string file, std::string prefix, Ctx& ctx,
         std::set<std::string> extra_known = {})
      : map_(map),
        file_(std::move(file)),
        prefix_(std::move(prefix)),
        ctx_(ctx),
        known_(std::move(extra_known)) {}

  template <class T>
  void operator()(const char* key, T& field, const char* /*help*/, const Check& check = {}) {
    allowed_.emplace_back(key);
    std::string path = prefix_ + key;
    if (check.required) ctx_.required.insert(path);
    std::optional<YAML::Node> n = find(key);
    if (!n) return;
    if (read(*n, field, path, check)) ctx_.set_at[path] = loc_of(*n, file_);
  }

  // Reports keys of the map that no field claimed.
  void finish() {
    if (!map_.IsMap()) return;
    for (auto it = map_.begin(); it != map_.end(); ++it) {
      std::string k = it->first.Scalar();
      if (known_.count(k) != 0 || std::find(allowed_.begin(), allowed_.end(), k) != allowed_.end())
        continue;
      ctx_.add(loc_of(it->first, file_), prefix_ + k,
               "unknown key; " + did_you_mean(k, allowed_) + "(allowed: " + join(allowed_) + ")");
    }
  }

 private:
  std::optional<YAML::Node> find(const char* key) const {
    std::optional<YAML::Node> found;
    for (auto it = map_.begin(); it != map_.end(); ++it)
      if (it->first.Scalar() == key) found.emplace(it->second);  // last wins; dups reported
    return found;
  }

  bool fail(const YAML::Node& n, const std::string& path, const std::string& msg) {
    ctx_.add(loc_of(n, file_), path, msg);
    return false;
  }

  static std::string shown(const YAML::Node& n) {
    if (n.IsScalar()) return "'" + n.Scalar() + "'";
    if (n.IsMap()) return "a mapping";
    if (n.IsSequence()) return "a list";
    return "nothing";
  }

  bool check_range(const YAML::Node& n, const std::string& path, double v, const Check& c) {
    if (v < c.min || v > c.max) {
      std::ostringstream os;
      os << "value " << n.Scalar() << " is out of range";
      if (std::isfinite(c.min) && std::isfinite(c.max))
        os << " [" << c.min << ", " << c.max << "]";
      else if (std::isfinite(c.min))
        os << " (must be >= " << c.min << ")";
      else
        os << " (must be <= " << c.max << ")";
      return fail(n, path, os.str());
    }
    return true;
  }

  bool read(const YAML::Node& n, int64_t& out, const std::string& path, const Check& c) {
    if (!n.IsScalar()) return fail(n, path, "expected an integer, got " + shown(n));
    const std::string& s = n.Scalar();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) {
      // Accept integral floats written like 1e6.
      char* end = nullptr;
      double d = std::strtod(s.c_str(), &end);
      if (s.empty() || *end != '\0' || d != std::floor(d) || std::abs(d) > 9e15)
        return fail(n, path, "expected an integer, got '" + s + "'");
      v = static_cast<int64_t>(d);
    }
    if (!check_range(n, path, static_cast<double>(v), c)) return false;
    out = v;
    return true;
  }

  bool read(const YAML::Node& n, double& out, const std::string& path, const Check& c) {
    if (!n.IsScalar()) return fail(n, path, "expected a number, got " + shown(n));
    const std::string& s = n.Scalar();
    char* end = nullptr;
    double v = std::strtod(s.c_str(), &end);
    if (s.empty() || *end != '\0' || !std::isfinite(v))
      return fail(n, path, "expected a number, got '" + s + "'");
    if (!check_range(n, path, v, c)) return false;
    out = v;
    return true;
  }

  bool read(const YAML::Node& n, bool& out, const std::string& path, const Check&) {
    if (n.IsScalar()) {
      const std::string& s = n.Scalar();
      if (s == "true" || s == "True") return out = true, true;
      if (s == "false" || s == "False") return out = false, true;
    }
    return fail(n, path, "expected true or false, got " + shown(n));
  }

  bool read(const YAML::Node& n, std::string& out, const std::string& path, const Check& c) {
    if (n.IsNull()) {
      if (!c.choices.empty())
        return fail(n, path, "has no value (one of: " + join(c.choices) + ")");
      out.clear();
      return true;
    }
    if (!n.IsScalar()) return fail(n, path, "expected a string, got " + shown(n));
    const std::string& s = n.Scalar();
    if (!c.choices.empty() && std::find(c.choices.begin(), c.choices.end(), s) == c.choices.end())
      return fail(n, path,
                  "'" + s + "' is not allowed; " + did_you_mean(s, c.choices) +
                      "(one of: " + join(c.choices) + ")");
    out = s;
    return true;
  }

  template <class E, std::enable_if_t<std::is_enum_v<E>, int> = 0>
  bool read(const YAML::Node& n, E& out, const std::string& path, const Check&) {
    auto names = enum_names<E>();
    std::string s;
    Check c;
    c.choices = names;
    if (!read(n, s, path, c)) return false;
    out = static_cast<E>(std::find(names.begin(), names.end(), s) - names.begin());
    return true;
  }

  template <class T>
  bool read(const YAML::Node& n, std::vector<T>& out, const std::string& path, const Check& c) {
    if (n.IsNull()) {
      out.clear();
      return true;
    }
    if (!n.IsSequence()) return fail(n, path, "expected a list, got " + shown(n));
    std::vector<T> items(n.size());
    bool ok = true;
    for (size_t i = 0; i < n.size(); ++i)
      ok = read(n[i], items[i], path + "[" + std::to_string(i) + "]", c) && ok;
    if (ok) out = std::move(items);
    return ok;
  }

  template <class T>
  bool read(const YAML::Node& n, Maybe<T>& out, const std::string& path, const Check& c) {
    if (n.IsNull()) {
      out = {};
      return true;
    }
    T v{};
    if (!read(n, v, path, c)) return false;
    out = Maybe<T>::of(v);
    return true;
  }

  // A mapping of names to sections; a name already there (from an inherited file) is
  // updated, a new one starts from the defaults.
  template <class T>
  bool read(const YAML::Node& n, std::map<std::string, T>& out, const std::string& path,
            const Check& c) {
    if (n.IsNull()) return true;
    if (!n.IsMap()) return fail(n, path, "expected a mapping of names, got " + shown(n));
    bool ok = true;
    for (auto it = n.begin(); it != n.end(); ++it) {
      const std::string name = it->first.Scalar();
      if (!valid_name(name)) {
        ok = fail(it->first, path,
                  "'" + name + "' is not a name (letters, digits, _ and -, not starting with -)");
        continue;
      }
      const std::string sub = path + "." + name;
      T item = out.count(name) != 0 ? out.at(name) : T{};
      if (read(it->second, item, sub, c)) {
        ctx_.set_at[sub] = loc_of(it->second, file_);
        out[name] = std::move(item);
      } else {
        ok = false;
      }
    }
    return ok;
  }

  static bool valid_name(const std::string& k) {
    return !k.empty() && k[0] != '-' && std::all_of(k.begin(), k.end(), [](char ch) {
      return std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-';
    });
  }

  template <class T, std::enable_if_t<is_visitable<T>::value, int> = 0>
  bool read(const YAML::Node& n, T& out, const std::string& path, const Check&) {
    if (n.IsNull()) return true;  // "position:" with nothing under it changes nothing
    if (!n.IsMap()) return fail(n, path, "expected a mapping, got " + shown(n));
    Reader sub(n, file_, path + ".", ctx_);
    out.visit(sub);
    sub.finish();
    return true;
  }

  YAML::Node map_;
  std::string file_, prefix_;
  Ctx& ctx_;
  std::set<std::string> known_;
  std::vector<std::string> allowed_;
};

// Collects the dotted paths of required keys (before any file is read, so a required key in a
// section the file never mentions is still missed).
class RequiredCollector {
 public:
  RequiredCollector(std::set<std::string>& out, std::string prefix)
      : out_(out), prefix_(std::move(prefix)) {}
  template <class T>
  void operator()(const char* key, T& field, const char*, const Check& check = {}) {
    if (check.required) out_.insert(prefix_ + key);
    if constexpr (is_visitable<T>::value) {
      RequiredCollector sub(out_, prefix_ + key + ".");
      field.visit(sub);
    }
  }

 private:
  std::set<std::string>& out_;
  std::string prefix_;
};

// ---------------------------------------------------------------------------------------------

// Configs written before RoPE's context-extension methods had a block of their own said
// `scaling: linear` and `scale: 4` under model.position (every saved run's config.yaml did).
// They still load: a scalar `scaling` names the method, and `scale` becomes its factor.
void migrate_legacy_keys(YAML::Node doc) {
  const YAML::Node& cdoc = doc;
  if (!cdoc["model"] || !cdoc["model"].IsMap()) return;
  YAML::Node pos = doc["model"]["position"];
  const YAML::Node& cpos = pos;
  if (!cpos.IsMap()) return;
  bool scalar = cpos["scaling"] && cpos["scaling"].IsScalar();
  if (!scalar && !cpos["scale"]) return;
  if (cpos["scaling"] && !scalar) return;  // a block and `scale`: the reader reports `scale`
  YAML::Node block(YAML::NodeType::Map);
  std::string type = scalar ? cpos["scaling"].Scalar() : "none";
  block["type"] = type;
  if (type != "none" && cpos["scale"]) block["factor"] = cpos["scale"];
  pos.remove("scale");
  pos["scaling"] = block;
}

YAML::Node parse_file(const std::string& path, Ctx& ctx) {
  std::string text;
  try {
    text = fs::read_file(path);
  } catch (const UserError& e) {
    ctx.add(Loc{path, 0, 0}, "", "cannot read the file");
    ctx.unreadable = true;
    return {};
  }
  try {
    YAML::Node n = YAML::Load(text);
    if (n.IsNull()) return YAML::Node(YAML::NodeType::Map);
    if (!n.IsMap()) {
      ctx.add(loc_of(n, path), "", "the top level must be a mapping of keys to values");
      return {};
    }
    find_duplicates(n, path, "", ctx);
    migrate_legacy_keys(n);
    return n;
  } catch (const YAML::Exception& e) {
    ctx.add(Loc{path, e.mark.line + 1, e.mark.column + 1}, "", "YAML syntax error: " + e.msg);
    ctx.unreadable = true;
    return {};
  }
}

// Applies `path` (after the files it inherits) onto `target`.
template <class T>
void apply_file(const std::string& path, T& target, Ctx& ctx, std::vector<std::string>& stack) {
  std::error_code ec;
  std::string canon = stdfs::weakly_canonical(path, ec).string();
  if (ec) canon = stdfs::path(path).lexically_normal().string();
  if (std::find(stack.begin(), stack.end(), canon) != stack.end()) {
    ctx.add(Loc{path, 0, 0}, "inherit",
            "inheritance cycle: " + join(stack, " -> ") + " -> " + canon);
    return;
  }
  YAML::Node doc = parse_file(path, ctx);
  if (!doc) return;
  stack.push_back(canon);
  if (YAML::Node inh = doc["inherit"]) {
    std::vector<YAML::Node> parents;
    if (inh.IsScalar())
      parents.push_back(inh);
    else if (inh.IsSequence())
      for (const auto& p : inh) parents.push_back(p);
    else
      ctx.add(loc_of(inh, path), "inherit", "expected a file name or a list of file names");
    for (const auto& p : parents) {
      if (!p.IsScalar()) {
        ctx.add(loc_of(p, path), "inherit", "expected a file name");
        continue;
      }
      stdfs::path parent = stdfs::path(path).parent_path() / p.Scalar();
      if (!stdfs::exists(parent, ec)) {
        ctx.add(loc_of(p, path), "inherit",
                "no such file: " + parent.string() + (ec ? " (" + ec.message() + ")" : ""));
        continue;
      }
      apply_file(parent.string(), target, ctx, stack);
    }
  }
  stack.pop_back();
  Reader r(doc, path, "", ctx, {"inherit"});
  target.visit(r);
  r.finish();
}

bool valid_key_path(const std::string& k) {
  if (k.empty() || k.front() == '.' || k.back() == '.' || k.find("..") != std::string::npos)
    return false;
  return std::all_of(k.begin(), k.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '.' || c == '-';
  });
}

template <class T>
void apply_overrides(const std::vector<Override>& overrides, T& target, Ctx& ctx) {
  for (const auto& o : overrides) {
    std::string origin = o.origin + " '" + o.text + "'";
    auto eq = o.text.find('=');
    std::string key = eq == std::string::npos ? "" : o.text.substr(0, eq);
    if (eq == std::string::npos || !valid_key_path(key)) {
      ctx.add(Loc{origin, 0, 0}, "", "expected key.path=value");
      continue;
    }
    YAML::Node value;
    try {
      value = YAML::Load(o.text.substr(eq + 1));
    } catch (const YAML::Exception& e) {
      ctx.add(Loc{origin, 0, 0}, key, "cannot parse the value: " + e.msg);
      continue;
    }
    // Build {a: {b: {c: value}}} and apply it like a file.
    std::vector<std::string> parts;
    std::stringstream ss(key);
    for (std::string part; std::getline(ss, part, '.');) parts.push_back(part);
    YAML::Node root(YAML::NodeType::Map), cur = root;
    for (size_t i = 0; i + 1 < parts.size(); ++i) {
      YAML::Node child(YAML::NodeType::Map);
      cur[parts[i]] = child;
      cur.reset(child);
    }
    cur[parts.back()] = value;
    Reader r(root, origin, "", ctx);
    target.visit(r);
    r.finish();
  }
}

}  // namespace

namespace {
template <class T>
T load_any(const std::string& path, const std::vector<Override>& overrides, Ctx& ctx) {
  T target;
  ctx.top = Loc{path, 0, 0};
  RequiredCollector rc(ctx.required, "");
  target.visit(rc);
  std::error_code ec;
  if (!stdfs::exists(path, ec))
    throw ConfigError(
        {Problem{Loc{path, 0, 0}, "", ec ? "cannot read: " + ec.message() : "no such file"}});
  std::vector<std::string> stack;
  apply_file(path, target, ctx, stack);
  apply_overrides(overrides, target, ctx);
  for (const auto& r : ctx.required)
    if (!ctx.unreadable && ctx.set_at.count(r) == 0)
      ctx.add(where(ctx, r), r, "required key is missing");
  return target;
}
}  // namespace

namespace io {
Loc where(const Ctx& ctx, const std::string& key) {
  // Where the key was last set (a list's item: where the list was); a key left at its default
  // points at the file the user named.
  auto it = ctx.set_at.find(key);
  if (it == ctx.set_at.end() && !key.empty() && key.back() == ']')
    it = ctx.set_at.find(key.substr(0, key.rfind('[')));
  return it != ctx.set_at.end() ? it->second : ctx.top;
}

Config read_config(const std::string& path, const std::vector<Override>& overrides, Ctx& ctx) {
  return load_any<Config>(path, overrides, ctx);
}

Experiment read_experiment(const std::string& path, Ctx& ctx) {
  return load_any<Experiment>(path, {}, ctx);
}

std::string resolve_relative(const std::string& base_file, const std::string& p) {
  if (p.empty() || stdfs::path(p).is_absolute()) return p;
  return (stdfs::path(base_file).parent_path() / p).lexically_normal().string();
}

}  // namespace io

std::vector<Override> overrides_from_args(const std::vector<std::string>& args) {
  std::vector<Override> out;
  out.reserve(args.size());
  for (const auto& a : args) out.push_back(Override{a, "command line"});
  return out;
}

namespace {
void fill_in_lengths(Config& c) {
  // `0 = task.seq_len` defaults of the position sections, resolved once so the run's saved
  // config.yaml states the value.
  c.model.position.fill_in(c.task.seq_len);
  for (auto& [name, kind] : c.model.layout.kinds) kind.position.fill_in(c.task.seq_len);
  // The synthetic-* sources come with their own vocabulary.
  if (kind_of(c.data.source) == DataKind::kSynthetic)
    c.data.tokenizer.type = TokenizerType::kSynthetic;
}
}  // namespace

// A layout kind that gives no position section of its own takes model.position (as it stands
// after every file and override), so that the saved config.yaml states each kind's positions.
void fill_in_layout(Config& c, const Ctx& ctx) {
  for (auto& [name, kind] : c.model.layout.kinds)
    if (ctx.set_at.count("model.layout.kinds." + name + ".position") == 0)
      kind.position = c.model.position;
}

namespace {
// What every load does after reading: the defaults that follow from other keys, then validation.
Config finish_load(Config c, Ctx& ctx) {
  if (ctx.unreadable) throw ConfigError(ctx.problems);
  fill_in_layout(c, ctx);
  fill_in_lengths(c);
  for (auto& p : validate(c)) {
    p.loc = where(ctx, p.key);
    ctx.problems.push_back(p);
  }
  if (!ctx.problems.empty()) throw ConfigError(ctx.problems);
  return c;
}
}  // namespace

Config load_config(const std::string& path, const std::vector<Override>& overrides) {
  Ctx ctx;
  Config c = io::read_config(path, overrides, ctx);
  return finish_load(std::move(c), ctx);
}

Config load_overrides(const std::vector<Override>& overrides) {
  Ctx ctx;
  Config c;
  RequiredCollector rc(ctx.required, "");
  c.visit(rc);
  apply_overrides(overrides, c, ctx);
  for (const auto& r : ctx.required)
    if (!ctx.unreadable && ctx.set_at.count(r) == 0)
      ctx.add(where(ctx, r), r, "required key is missing");
  return finish_load(std::move(c), ctx);
}

}  // namespace ropelab::config
