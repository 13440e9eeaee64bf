// Strict YAML reader, dumper and schema printer over the visit() lists in schema.h.
#include "config/loader.h"

#include "config/layout.h"

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

std::string did_you_mean(const std::string& word, const std::vector<std::string>& options) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const auto& o : options) {
    size_t d = edit_distance(word, o);
    if (d < best_d) best_d = d, best = o;
  }
  return best.empty() ? "" : "did you mean '" + best + "'? ";
}

std::string join(const std::vector<std::string>& v, const char* sep = ", ") {
  std::string s;
  for (const auto& x : v) s += (s.empty() ? "" : sep) + x;
  return s;
}

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

template <class T, class = void>
struct is_visitable : std::false_type {};
template <class T>
struct is_visitable<
    T, std::void_t<decltype(std::declval<T&>().template visit<int>(std::declval<int&>()))>>
    : std::true_type {};
// (visit<int> is never instantiated: decltype only looks at the declaration.)

template <class T, class = void>
struct has_original_len : std::false_type {};
template <class T>
struct has_original_len<T, std::void_t<decltype(std::declval<T&>().original_len)>>
    : std::true_type {};

template <class T>
struct is_vector : std::false_type {};
template <class T>
struct is_vector<std::vector<T>> : std::true_type {};

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
// Writer: emits every field (defaults included) in visit order.

std::string format_double(double v) {
  char buf[64];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  std::string s(buf, p);
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";
  return s;
}

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

Loc where(const Ctx& ctx, const std::string& key) {
  // Where the key was last set (a list's item: where the list was); a key left at its default
  // points at the file the user named.
  auto it = ctx.set_at.find(key);
  if (it == ctx.set_at.end() && !key.empty() && key.back() == ']')
    it = ctx.set_at.find(key.substr(0, key.rfind('[')));
  return it != ctx.set_at.end() ? it->second : ctx.top;
}

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

std::string resolve_relative(const std::string& base_file, const std::string& p) {
  if (p.empty() || stdfs::path(p).is_absolute()) return p;
  return (stdfs::path(base_file).parent_path() / p).lexically_normal().string();
}

}  // namespace

std::vector<Override> overrides_from_args(const std::vector<std::string>& args) {
  std::vector<Override> out;
  out.reserve(args.size());
  for (const auto& a : args) out.push_back(Override{a, "command line"});
  return out;
}

namespace {
// `0 = task.seq_len` defaults of a position section, resolved once so the run's saved
// config.yaml states the value.
void fill_in_lengths(PositionConfig& position, const Config& c) {
  std::visit(
      [&](auto& pos) {
        using P = std::decay_t<decltype(pos)>;
        if constexpr (std::is_same_v<P, RopeConfig>) {
          std::visit(
              [&](auto& m) {
                if constexpr (has_original_len<std::decay_t<decltype(m)>>::value)
                  if (m.original_len == 0) m.original_len = c.task.seq_len;
              },
              pos.scaling.opts);
        }
        if constexpr (std::is_same_v<P, FireConfig>) {
          if (pos.threshold == 0) pos.threshold = static_cast<double>(c.task.seq_len);
        }
        if constexpr (std::is_same_v<P, CopeConfig>) {
          if (pos.npos_max == 0) pos.npos_max = c.task.seq_len;
        }
      },
      position.opts);
}

void fill_in_lengths(Config& c) {
  fill_in_lengths(c.model.position, c);
  for (auto& [name, kind] : c.model.layout.kinds) fill_in_lengths(kind.position, c);
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

Config load_config(const std::string& path, const std::vector<Override>& overrides) {
  Ctx ctx;
  Config c = load_any<Config>(path, overrides, ctx);
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

namespace {
Config run_config(const Experiment& exp, const Variant& variant, const Variant* task,
                  const Variant* setting, int64_t seed, const std::string& name) {
  std::vector<Override> ov;
  for (const auto& s : exp.set) ov.push_back(Override{s, exp.name + ": set"});
  if (task != nullptr)
    for (const auto& s : task->set) ov.push_back(Override{s, exp.name + ": task " + task->name});
  for (const auto& s : variant.set)
    ov.push_back(Override{s, exp.name + ": variant " + variant.name});
  if (setting != nullptr)
    for (const auto& s : setting->set)
      ov.push_back(Override{s, exp.name + ": setting " + setting->name});
  if (seed != 0) ov.push_back(Override{"run.seed=" + std::to_string(seed), "experiment"});
  ov.push_back(Override{"run.name=" + name, "experiment"});
  ov.push_back(
      Override{"run.out_dir=" + (stdfs::path(exp.out_dir) / exp.name).string(), "experiment"});
  return load_config(exp.base, ov);
}
}  // namespace

Config experiment_variant_config(const Experiment& exp, const Variant& variant) {
  const Variant* task = exp.tasks.empty() ? nullptr : &exp.tasks[0];
  return run_config(exp, variant, task, nullptr, 0, variant.name);
}

std::vector<ExperimentRun> experiment_runs(const Experiment& exp) {
  std::vector<ExperimentRun> out;
  std::vector<const Variant*> settings;
  for (const auto& s : exp.settings) settings.push_back(&s);
  if (settings.empty()) settings.push_back(nullptr);
  std::vector<const Variant*> tasks;
  for (const auto& t : exp.tasks) tasks.push_back(&t);
  if (tasks.empty()) tasks.push_back(nullptr);
  std::vector<int64_t> seeds = exp.seeds.empty() ? std::vector<int64_t>{0} : exp.seeds;
  for (const Variant* t : tasks)
    for (const auto& v : exp.variants)
      for (const Variant* s : settings)
        for (int64_t seed : seeds) {
          std::string name = (t ? t->name + "." : "") + v.name + (s ? "." + s->name : "") +
                             (seed != 0 ? ".seed" + std::to_string(seed) : "");
          ExperimentRun r{t ? t->name : "", v.name, s ? s->name : "", seed, name, "", {}};
          try {
            r.config = run_config(exp, v, t, s, seed, name);
          } catch (const ConfigError& err) {
            const auto& ps = err.problems();
            if (!std::all_of(ps.begin(), ps.end(),
                             [](const Problem& p) { return p.not_applicable; })) {
              std::vector<Problem> named;
              for (const auto& p : ps)
                named.push_back({p.loc, p.key, "run '" + name + "': " + p.key + ": " + p.message});
              throw ConfigError(named);
            }
            for (const auto& p : ps)
              r.not_applicable += (r.not_applicable.empty() ? "" : "; ") + p.key + ": " + p.message;
          }
          out.push_back(std::move(r));
        }
  return out;
}

Experiment load_experiment(const std::string& path) {
  Ctx ctx;
  Experiment e = load_any<Experiment>(path, {}, ctx);
  if (!ctx.problems.empty()) throw ConfigError(ctx.problems);
  e.base = resolve_relative(path, e.base);
  std::set<std::string> names;
  for (size_t i = 0; i < e.variants.size(); ++i) {
    const auto& v = e.variants[i];
    std::string key = "variants[" + std::to_string(i) + "].name";
    if (!names.insert(v.name).second)
      ctx.add(where(ctx, key), key, "duplicate variant name '" + v.name + "'");
    if (v.name.empty() || v.name.find('/') != std::string::npos)
      ctx.add(where(ctx, key), key, "variant names must be non-empty and contain no '/'");
  }
  if (e.variants.empty()) ctx.add(where(ctx, "variants"), "variants", "needs at least one variant");
  std::vector<std::string> variant_names;
  for (const auto& v : e.variants) variant_names.push_back(v.name);
  if (!e.baseline.empty() &&
      std::find(variant_names.begin(), variant_names.end(), e.baseline) == variant_names.end())
    ctx.add(where(ctx, "baseline"), "baseline",
            "'" + e.baseline + "' is not one of the variants; " +
                did_you_mean(e.baseline, variant_names));
  std::set<std::string> setting_names;
  for (size_t i = 0; i < e.settings.size(); ++i) {
    const auto& s = e.settings[i];
    std::string key = "settings[" + std::to_string(i) + "].name";
    if (!setting_names.insert(s.name).second)
      ctx.add(where(ctx, key), key, "duplicate setting name '" + s.name + "'");
    if (s.name.empty() || s.name.find_first_of("/.") != std::string::npos)
      ctx.add(where(ctx, key), key, "setting names must be non-empty and contain no '/' or '.'");
  }
  std::set<std::string> task_names;
  for (size_t i = 0; i < e.tasks.size(); ++i) {
    const auto& t = e.tasks[i];
    std::string key = "tasks[" + std::to_string(i) + "].name";
    if (!task_names.insert(t.name).second)
      ctx.add(where(ctx, key), key, "duplicate task name '" + t.name + "'");
    if (t.name.empty() || t.name.find_first_of("/.") != std::string::npos)
      ctx.add(where(ctx, key), key, "task names must be non-empty and contain no '/' or '.'");
  }
  std::set<int64_t> seed_set;
  for (int64_t s : e.seeds)
    if (s <= 0 || !seed_set.insert(s).second)
      ctx.add(where(ctx, "seeds"), "seeds", "seeds must be positive and distinct");
  if (ctx.problems.empty()) {
    for (size_t i = 0; i < e.variants.size(); ++i) {
      try {
        experiment_variant_config(e, e.variants[i]);
      } catch (const ConfigError& err) {
        std::string key = "variants[" + std::to_string(i) + "]";
        for (const auto& p : err.problems())
          if (!p.not_applicable)
            ctx.add(where(ctx, key), key, "variant '" + e.variants[i].name + "': " + p.str());
      }
    }
    for (size_t i = 1; i < e.tasks.size() && ctx.problems.empty(); ++i) {
      try {
        run_config(e, e.variants[0], &e.tasks[i], nullptr, 0, e.variants[0].name);
      } catch (const ConfigError& err) {
        std::string key = "tasks[" + std::to_string(i) + "]";
        for (const auto& p : err.problems())
          if (!p.not_applicable)
            ctx.add(where(ctx, key), key, "task '" + e.tasks[i].name + "': " + p.str());
      }
    }
    const Variant* task0 = e.tasks.empty() ? nullptr : &e.tasks[0];
    for (size_t i = 0; i < e.settings.size() && ctx.problems.empty(); ++i) {
      try {
        run_config(e, e.variants[0], task0, &e.settings[i], 0, e.variants[0].name);
      } catch (const ConfigError& err) {
        std::string key = "settings[" + std::to_string(i) + "]";
        for (const auto& p : err.problems())
          if (!p.not_applicable)
            ctx.add(where(ctx, key), key, "setting '" + e.settings[i].name + "': " + p.str());
      }
    }
  }
  if (ctx.problems.empty()) {
    // Every combination, so a task x variant x setting that only fails together is caught
    // before any training starts too; not-applicable ones become n/a cells.
    try {
      auto runs = experiment_runs(e);
      if (std::all_of(runs.begin(), runs.end(),
                      [](const ExperimentRun& r) { return !r.not_applicable.empty(); }))
        ctx.add(where(ctx, "variants"), "variants",
                "no run of this experiment is possible: " + runs.at(0).not_applicable);
    } catch (const ConfigError& err) {
      for (const auto& p : err.problems()) ctx.add(where(ctx, "variants"), "variants", p.message);
    }
  }
  if (!ctx.problems.empty()) throw ConfigError(ctx.problems);
  return e;
}

namespace {
void flatten(const YAML::Node& n, const std::string& prefix,
             std::map<std::string, std::string>& out) {
  if (n.IsMap()) {
    for (const auto& kv : n) flatten(kv.second, prefix + kv.first.Scalar() + ".", out);
  } else {
    YAML::Emitter e;
    e << YAML::Flow << n;
    out[prefix.substr(0, prefix.size() - 1)] = e.c_str();
  }
}
}  // namespace

std::map<std::string, std::string> flat_keys(const Config& c) {
  std::map<std::string, std::string> out;
  flatten(YAML::Load(dump(c)), "", out);
  return out;
}

std::string dump(const Config& c) {
  YAML::Emitter out;
  Writer w(out);
  out << YAML::BeginMap;
  const_cast<Config&>(c).visit(w);  // NOLINT: the writer only reads
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

std::string dump(const Experiment& e) {
  YAML::Emitter out;
  Writer w(out);
  out << YAML::BeginMap;
  const_cast<Experiment&>(e).visit(w);  // NOLINT: the writer only reads
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

namespace {
template <class T>
std::string commented(T& x) {
  YAML::Emitter o;
  Writer w(o, /*comments=*/true);
  o << YAML::BeginMap;
  x.visit(w);
  o << YAML::EndMap;
  return o.c_str();
}
}  // namespace

std::string schema() {
  Config c;
  YAML::Emitter out;
  Writer w(out, /*comments=*/true);
  out << YAML::BeginMap;
  c.visit(w);
  out << YAML::EndMap;
  std::string s = out.c_str();
  s += "\n\n# Position module options, by model.position.type:\n";
  for (const auto& n : variant_names<PositionVariant>()) {
    PositionConfig p;
    select_variant(p.opts, n);
    s += "# --- " + n + "\n" + commented(p) + "\n";
  }
  s += "\n# A layer kind's options, under model.layout.kinds.<name> (its position section as "
       "above):\n";
  {
    LayerKindConfig k;
    s += commented(k) + "\n";
  }
  s += "\n# RoPE context-extension options, by model.position.scaling.type:\n";
  for (const auto& n : variant_names<RopeScalingVariant>()) {
    RopeScalingConfig r;
    select_variant(r.opts, n);
    s += "# --- " + n + "\n" + commented(r) + "\n";
  }
  s += "\n# Task options, by task.type:\n";
  for (const auto& n : variant_names<TaskVariant>()) {
    TaskConfig t;
    select_variant(t.opts, n);
    s += "# --- " + n + "\n" + commented(t) + "\n";
  }
  return s;
}

bool valid_device(const std::string& d) {
  if (d == "auto" || d == "cpu" || d == "cuda") return true;
  if (d.rfind("cuda:", 0) != 0 || d.size() == 5) return false;
  return std::all_of(d.begin() + 5, d.end(),
                     [](char ch) { return std::isdigit(static_cast<unsigned char>(ch)) != 0; });
}

// RoPE's own checks beyond ranges: hybrid NoPE layers, p-RoPE, and the scaling method.
template <class Bad>
void check_rope(const RopeConfig& pos, const std::string& sec, const ModelConfig& m,
                int64_t head_dim, const Bad& bad) {
  int64_t layers = std::max(m.n_layers, m.arch == Arch::kEncDec ? m.n_decoder_layers : 0);
  for (int64_t l : pos.nope_layers)
    if (l >= layers)
      bad(sec + ".nope_layers", "layer " + std::to_string(l) + " does not exist (the " +
                                    "model has " + std::to_string(layers) +
                                    " layers, numbered from 0)");
  if (pos.nope_every == 1)
    bad(sec + ".nope_every",
        "nope_every 1 leaves every layer without positions; use " + sec + ".type=none");
  int64_t rd = pos.rotary_dim == 0 ? head_dim : pos.rotary_dim;
  const bool linear = m.attention.kernel == AttentionKernel::kLinear;
  // With linear attention in Eq. 19 mode the rotation acts on the feature maps, not the head.
  int64_t rotated = rd;
  if (linear && m.attention.rope_mode == RopeMode::kEq19)
    rotated = m.attention.feature_map == FeatureMap::kFavor ? m.attention.num_features : head_dim;
  if (pos.fraction < 1.0 && std::llround(pos.fraction * static_cast<double>(rotated / 2)) == 0)
    bad(sec + ".fraction", "fraction " + format_double(pos.fraction) + " of " +
                               std::to_string(rotated / 2) + " rotated pairs rotates none; use " +
                               sec + ".type=none");
  const std::string key = sec + ".scaling.";
  std::visit(
      [&](const auto& s) {
        using S = std::decay_t<decltype(s)>;
        double af = 1.0;
        if constexpr (std::is_same_v<S, YarnScaling>) {
          af = s.attention_factor > 0 ? s.attention_factor : 0.1 * std::log(s.factor) + 1.0;
          if (s.beta_fast <= s.beta_slow)
            bad(key + "beta_fast", "beta_fast (" + format_double(s.beta_fast) +
                                       ") must exceed beta_slow (" + format_double(s.beta_slow) +
                                       ")");
        }
        if constexpr (std::is_same_v<S, Llama3Scaling>) {
          if (s.high_freq_factor <= s.low_freq_factor)
            bad(key + "high_freq_factor", "high_freq_factor (" + format_double(s.high_freq_factor) +
                                              ") must exceed low_freq_factor (" +
                                              format_double(s.low_freq_factor) + ")");
        }
        if constexpr (std::is_same_v<S, LongRopeScaling>) {
          af = s.attention_factor > 0 ? s.attention_factor : (s.factor > 1.0 ? 2.0 : 1.0);
          for (const auto* f : {&s.short_factor, &s.long_factor}) {
            const char* name = f == &s.short_factor ? "short_factor" : "long_factor";
            if (static_cast<int64_t>(f->size()) != rotated / 2)
              bad(key + name, "needs one factor per rotated pair: " + std::to_string(rotated / 2) +
                                  " (got " + std::to_string(f->size()) + ")");
          }
        }
        if (af != 1.0 && linear)
          bad(key + "attention_factor",
              std::string(S::kName) +
                  "'s attention factor is a softmax temperature, and linear attention has no "
                  "softmax; set " +
                  key + "attention_factor=1");
      },
      pos.scaling.opts);
}

namespace {

// The problems validate() finds: bad(key, message), or a combination this model cannot run.
struct ProblemList {
  mutable std::vector<Problem> list;  // check_rope reports through a const reference
  void operator()(const std::string& key, const std::string& msg) const {
    list.push_back(Problem{Loc{}, key, msg});
  }
  void not_applicable(const std::string& key, const std::string& msg) const {
    list.push_back(Problem{Loc{}, key, msg, /*not_applicable=*/true});
  }
};

// What each position family needs of the model and the task (its traits, and its own checks):
// `position` is model.position or a layout kind's, and sec its key.
void check_positions(const Config& c, const PositionConfig& position, const std::string& sec,
                     int64_t head_dim, ProblemList& bad) {
  const auto& m = c.model;
  const bool linear = m.attention.kernel == AttentionKernel::kLinear;
  std::visit(
      [&](const auto& pos) {
        using P = std::decay_t<decltype(pos)>;
        if constexpr (P::kBiasesScores) {
          if (linear)
            bad(sec + ".type", std::string(P::kName) +
                                   " adds a bias to attention scores, which linear "
                                   "attention never forms; use softmax attention or "
                                   "another position module");
        }
        if constexpr (P::kSoftmaxOnly) {
          if (linear)
            bad(sec + ".type", std::string(P::kName) +
                                   " needs softmax attention (linear attention's "
                                   "feature maps cannot carry its transform of q and "
                                   "k); use softmax attention or another position "
                                   "module");
        }
        if constexpr (P::kCausalOnly) {
          if (m.arch != Arch::kDecoder)
            bad(sec + ".type",
                std::string(P::kName) +
                    " is defined for causal self-attention (it counts or gates from each key up "
                    "to its query); use model.arch=decoder or another position module");
        }
        if constexpr (std::is_same_v<P, NoPositionConfig>) {
          if (m.arch != Arch::kDecoder && !pos.encoder_ok)
            bad(sec + ".type",
                "an encoder with no position signal sees a bag of words (it cannot learn word "
                "order; MLM stalls); set " +
                    sec + ".encoder_ok=true to train it anyway");
        }
        if constexpr (std::is_same_v<P, RopeConfig>) {
          check_rope(pos, sec, m, head_dim, bad);
          int64_t rd = pos.rotary_dim == 0 ? head_dim : pos.rotary_dim;
          if (rd > head_dim)
            bad(sec + ".rotary_dim", "rotary_dim (" + std::to_string(rd) +
                                         ") exceeds the head dimension (" +
                                         std::to_string(head_dim) + ")");
          else if (rd % 2 != 0)
            bad(pos.rotary_dim == 0 ? std::string("model.n_heads") : sec + ".rotary_dim",
                "RoPE rotates pairs of channels: the rotary dimension (" + std::to_string(rd) +
                    ") must be even");
        }
        if constexpr (std::is_same_v<P, FoxConfig>) {
          if (pos.rope && head_dim % 2 != 0)
            bad("model.n_heads", "fox with rope rotates pairs of channels: the head dimension (" +
                                     std::to_string(head_dim) + ") must be even");
        }
        if constexpr (std::is_same_v<P, ComropeConfig>) {
          if (pos.block % 2 != 0 || head_dim % pos.block != 0)
            bad(sec + ".block", "block (" + std::to_string(pos.block) +
                                    ") must be even and divide the head dimension (" +
                                    std::to_string(head_dim) + ")");
        }
        if constexpr (std::is_same_v<P, MropeConfig>) {
          if (head_dim % 4 != 0)
            bad("model.n_heads",
                "mrope gives each of its two coordinates whole pairs of "
                "channels: the head dimension (" +
                    std::to_string(head_dim) + ") must be a multiple of 4");
        }
        if constexpr (std::is_same_v<P, XposConfig>) {
          if (head_dim % 2 != 0)
            bad("model.n_heads", "xPos rotates pairs of channels: the head dimension (" +
                                     std::to_string(head_dim) + ") must be even");
        }
        if constexpr (std::is_same_v<P, LearnedConfig>) {
          if (c.task.seq_len > pos.max_len)
            bad.not_applicable("task.seq_len", "seq_len (" + std::to_string(c.task.seq_len) +
                                                   ") exceeds the learned position table (" + sec +
                                                   ".max_len = " + std::to_string(pos.max_len) +
                                                   ")");
        }
      },
      position.opts);
}

// The task against the architecture and the data, and the schedule against the steps.
void check_task(const Config& c, ProblemList& bad) {
  const auto& m = c.model;
  std::visit(
      [&](const auto& task) {
        using T = std::decay_t<decltype(task)>;
        if (m.arch != T::kArch)
          bad("model.arch", std::string("task ") + T::kName + " needs arch " + to_string(T::kArch) +
                                " (got " + to_string(m.arch) + ")");
        DataKind kind = kind_of(c.data.source);
        if (kind != T::kData)
          bad("data.source", std::string("task ") + T::kName + " needs " + to_string(T::kData) +
                                 " data; data.source '" + to_string(c.data.source) + "' gives " +
                                 to_string(kind) + " data");
        if constexpr (std::is_same_v<T, TranslationTaskConfig>) {
          if (task.best_by == BestBy::kBleu && task.valid_bleu_sentences == 0)
            bad("task.best_by", "best_by bleu needs task.valid_bleu_sentences > 0");
        }
        if constexpr (std::is_same_v<T, MlmTaskConfig>) {
          if (task.mask_token_frac + task.random_token_frac > 1.0 + 1e-9)
            bad("task.random_token_frac", "mask_token_frac + random_token_frac must be <= 1");
        }
      },
      c.task.opts);
  if (c.train.schedule.warmup > c.train.max_steps &&
      c.train.schedule.type != ScheduleType::kConstant)
    bad("train.schedule.warmup", "warmup (" + std::to_string(c.train.schedule.warmup) +
                                     ") is longer than max_steps (" +
                                     std::to_string(c.train.max_steps) + ")");
}

// A described TSV layout (data.tsv), and ranking data against the rank task.
void check_tsv(const Config& c, ProblemList& bad) {
  const DataSource src = c.data.source;
  const TsvLayoutConfig& tsv = c.data.tsv;
  const bool described = !tsv.a.empty();
  if (src == DataSource::kGlue && c.data.glue_task.empty() && !described)
    bad("data.glue_task",
        "data.source glue needs data.glue_task (e.g. MRPC) or a layout in data.tsv");
  if (described && src != DataSource::kGlue)
    bad("data.tsv.a", "a described TSV layout needs data.source glue");
  if (described && !c.data.glue_task.empty())
    bad("data.glue_task", "give data.glue_task or a layout in data.tsv, not both");
  if (!described && (!tsv.b.empty() || !tsv.c.empty() || !tsv.label.empty()))
    bad("data.tsv.a", "a described TSV layout needs data.tsv.a (the first text's column)");
  if (described && tsv.label.empty()) bad("data.tsv.label", "name the label column");
  if (described && tsv.regression == !tsv.labels.empty())
    bad("data.tsv.labels", "give the class names (labels) or regression: true, not both");
  if (described && !tsv.c.empty() && (tsv.b.empty() || tsv.labels.size() != 2 || tsv.regression))
    bad("data.tsv.c",
        "a ranking layout needs columns a, b and c and two labels (b closer, c closer)");
  if (described && (tsv.name.empty() || tsv.name.find_first_of("/\\") != std::string::npos))
    bad("data.tsv.name", "the name must be non-empty and contain no path separator");
  {
    const bool ranking = src == DataSource::kBibleRank || (described && !tsv.c.empty());
    const bool rank_task = std::holds_alternative<RankTaskConfig>(c.task.opts);
    if (kind_of(src) == DataKind::kGlue && ranking != rank_task)
      bad("task.type", rank_task ? "task rank needs ranking data (data.source bible-rank, or a "
                                   "data.tsv layout with a c column)"
                                 : "ranking data (a, b, c) needs task.type rank");
  }
}

// The tokenizer against the data, and the run's device and name.
void check_tokenizer_and_run(const Config& c, ProblemList& bad) {
  const DataSource src = c.data.source;
  if (src == DataSource::kBytes && c.data.tokenizer.type != TokenizerType::kByte)
    bad("data.tokenizer.type", "data.source bytes needs the byte tokenizer");
  const TokenizerConfig& tk = c.data.tokenizer;
  if (!tk.joint && kind_of(src) != DataKind::kParallel)
    bad("data.tokenizer.joint", "separate vocabularies (joint: false) need parallel data");
  if (!tk.joint && tk.type != TokenizerType::kSpm)
    bad("data.tokenizer.joint", "separate vocabularies (joint: false) need the spm tokenizer");
  if (tk.joint && !tk.target_model.empty())
    bad("data.tokenizer.target_model", "target_model needs joint: false");
  if (!tk.joint && tk.model.empty() != tk.target_model.empty())
    bad(tk.model.empty() ? "data.tokenizer.model" : "data.tokenizer.target_model",
        "with joint: false, give both model (source side) and target_model, or neither");
  // The synthetic sources' size bounds are the generator's: data::plan() checks them.
  if (tk.type == TokenizerType::kWordPiece && tk.model.empty())
    bad("data.tokenizer.model", "the wordpiece tokenizer needs its vocab.txt as model");
  if (tk.type == TokenizerType::kBpe && tk.model.empty())
    bad("data.tokenizer.model", "the bpe tokenizer needs its tokenizer.json as model");
  if (!tk.vocab_order.empty() && tk.type != TokenizerType::kSpm && tk.type != TokenizerType::kBpe)
    bad("data.tokenizer.vocab_order", "a vocabulary order is for the spm and bpe tokenizers");
  if (!tk.vocab_order.empty() && tk.type == TokenizerType::kSpm && tk.model.empty())
    bad("data.tokenizer.vocab_order", "re-numbering needs an existing SentencePiece model");
  if (kind_of(src) != DataKind::kSynthetic && tk.type == TokenizerType::kSynthetic) {
    bad("data.tokenizer.type", "the synthetic vocabulary is for the synthetic-* sources");
  }
  if (!is_builtin(src) && kind_of(src) != DataKind::kSynthetic && c.data.train.empty())
    bad("data.train", std::string("data.source '") + to_string(src) + "' needs data.train");
  if (!valid_device(c.run.device))
    bad("run.device", "'" + c.run.device + "' is not a device (auto, cpu, cuda or cuda:N)");
  if (c.run.name.empty() || c.run.name.find('/') != std::string::npos)
    bad("run.name", "must be non-empty and contain no '/'");
}

// Per-document positions (task.packing documents): relative families need nothing, absolute
// input-side ones are re-indexed; FIRE and M-RoPE on a grid read absolute positions inside
// attention, which restarting would change.
void check_packing(const Config& c, ProblemList& bad) {
  bool documents = false;
  std::visit(
      [&](const auto& t) {
        if constexpr (std::is_same_v<std::decay_t<decltype(t)>, ClmTaskConfig> ||
                      std::is_same_v<std::decay_t<decltype(t)>, MlmTaskConfig>)
          documents = t.packing == Packing::kDocuments;
      },
      c.task.opts);
  if (!documents) return;
  std::vector<const PositionConfig*> positions{&c.model.position};
  for (const auto& [name, kind] : c.model.layout.kinds) positions.push_back(&kind.position);
  for (const auto* p : positions) {
    const auto* grid = std::get_if<MropeConfig>(&p->opts);
    if (std::holds_alternative<FireConfig>(p->opts) || (grid != nullptr && grid->grid_width > 0)) {
      bad("task.packing", std::string(p->type()) +
                              " reads each query's absolute position inside attention; "
                              "per-document positions are not implemented for it (use "
                              "task.packing=joined)");
      return;
    }
  }
}

}  // namespace

std::vector<Problem> validate(const Config& c) {
  ProblemList bad;
  const auto& m = c.model;
  if (m.head_dim == 0 && m.d_model % m.n_heads != 0) {
    bad("model.n_heads", "n_heads (" + std::to_string(m.n_heads) + ") must divide d_model (" +
                             std::to_string(m.d_model) + ")");
    return bad.list;  // the head dimension is meaningless: checks below would only add noise
  }
  if (m.embedding_size > 0 && m.embedding_size != m.d_model) {
    if (m.arch != Arch::kEncoder)
      bad("model.embedding_size", "an embedding width other than d_model is for encoders");
    else if (m.position.type() == std::string("learned") ||
             m.position.type() == std::string("sinusoidal"))
      bad("model.embedding_size", std::string("position ") + m.position.type() +
                                      " adds d_model-wide vectors to the embeddings; use a "
                                      "position module inside attention (rope, t5, ...)");
  }
  if (m.n_kv_heads > 0 && m.n_heads % m.n_kv_heads != 0)
    bad("model.n_kv_heads", "n_kv_heads (" + std::to_string(m.n_kv_heads) +
                                ") must divide n_heads (" + std::to_string(m.n_heads) + ")");
  const int64_t head_dim = head_dim_of(m);
  check_positions(c, m.position, "model.position", head_dim, bad);
  check_packing(c, bad);
  for (const auto& [key, message] : layout_problems(m)) bad(key, message);
  for (const auto& [name, kind] : m.layout.kinds)
    check_positions(c, kind.position, "model.layout.kinds." + name + ".position", head_dim, bad);
  if (m.attention.kernel == AttentionKernel::kLinear) {
    const char* what = m.attention.sinks           ? "sinks"
                       : m.attention.qk_norm       ? "qk_norm"
                       : m.attention.ssmax > 0     ? "ssmax"
                       : m.attention.scale_dim > 0 ? "scale_dim"
                                                   : nullptr;
    if (what != nullptr)
      bad(std::string("model.attention.") + what,
          std::string(what) +
              " is a switch of softmax attention; linear attention has no "
              "softmax (use model.attention.kernel=softmax)");
  }
  check_task(c, bad);
  check_tsv(c, bad);
  check_tokenizer_and_run(c, bad);
  return bad.list;
}

}  // namespace ropelab::config
