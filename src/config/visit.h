// The machinery of typed configs (config/schema.h): a field's checks (Check), optional values
// (Maybe) and variants chosen by a `type` key. Each config struct lists its fields once, in
// visit(); the reader, the dumper and the schema printer are visitors over that list.
#pragma once
#include <cstdint>
#include <iterator>
#include <limits>
#include <map>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace ropelab::config {

// Checks attached to a field. Ranges are inclusive; `choices` makes a string an enum.
struct Check {
  double min = -std::numeric_limits<double>::infinity();
  double max = std::numeric_limits<double>::infinity();
  std::vector<std::string> choices;
  bool required = false;
};
inline Check at_least(double lo) { return Check{lo, std::numeric_limits<double>::infinity(), {}}; }
inline Check between(double lo, double hi) { return Check{lo, hi, {}}; }
inline Check required(Check c = {}) {
  c.required = true;
  return c;
}

// A value a config may leave out: absent (YAML null, `~`) or a value, which the field's checks
// apply to. The dumper writes `~` for an absent one, so a dumped config loads back the same.
template <class T>
struct Maybe {
  T value{};
  bool has = false;
  T value_or(T fallback) const { return has ? value : fallback; }
  static Maybe of(T v) { return Maybe{v, true}; }
};

// ---------------------------------------------------------------------------------------------
// Variants chosen by a `type` key: a std::variant of config structs, each with a kName. The type
// is stored once, as the variant's index. Reading `type` switches the alternative (to its
// defaults when it changes); the alternative's own keys follow it.

namespace detail {
template <class Variant, size_t I = 0>
void names_of(std::vector<std::string>& out) {
  if constexpr (I < std::variant_size_v<Variant>) {
    out.emplace_back(std::variant_alternative_t<I, Variant>::kName);
    names_of<Variant, I + 1>(out);
  }
}
template <class Variant, size_t I = 0>
bool select(Variant& v, const std::string& name) {
  if constexpr (I < std::variant_size_v<Variant>) {
    using Alt = std::variant_alternative_t<I, Variant>;
    if (name != Alt::kName) return select<Variant, I + 1>(v, name);
    if (v.index() != I) v.template emplace<I>();
    return true;
  }
  return false;
}
}  // namespace detail

template <class Variant>
std::vector<std::string> variant_names() {
  std::vector<std::string> out;
  detail::names_of<Variant>(out);
  return out;
}
template <class Variant>
const char* variant_name(const Variant& v) {
  return std::visit([](const auto& alt) { return std::decay_t<decltype(alt)>::kName; }, v);
}
// "a, b, c": the names joined with commas.
inline std::string joined(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : ", ") + n;
  return out;
}
// Switches `v` to the alternative called `name` (unchanged if it already is; false if none is).
template <class Variant>
bool select_variant(Variant& v, const std::string& name) {
  return detail::select(v, name);
}
// The `type` key and the alternative's keys, for any visitor.
template <class Variant, class V>
void visit_variant(V& v, Variant& var, const char* help, bool is_required = false) {
  std::string type = variant_name(var);
  Check c;
  c.choices = variant_names<Variant>();
  c.required = is_required;
  v("type", type, help, c);
  select_variant(var, type);
  std::visit([&](auto& alt) { alt.visit(v); }, var);
}

}  // namespace ropelab::config
