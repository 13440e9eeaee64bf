// RoPE settings of the Llama-layout classes (RoFormer Eq. 34 with theta_i = base^(-2i/d), and
// the context extensions of transformers' rope types) in the two layouts of config.json:
//
//   transformers 4   rope_theta (top level) and rope_scaling {rope_type (or type), factor, ...}
//   transformers 5   rope_parameters {rope_type, rope_theta, factor, ...}: one object, or one per
//                    layer type, keyed like layer_types ({"full_attention": {...}, ...})
//
// A config.json may carry both (a v4 checkpoint re-saved, or edited by hand): they must then say
// the same, since transformers 4 reads one and 5 the other; where they disagree the import is
// refused naming both keys. The same holds for the original context length, which v4 reads in
// rope_scaling and v5 at the top level first (Phi-3's original_max_position_embeddings), and for
// LongRoPE's factor, which v4 takes from max_position_embeddings / original length when the
// latter is at the top level and v5 from rope_parameters.factor.
// Export writes one layout: v5's by default, v4's on request (both are read by transformers 5).
#include <spdlog/fmt/fmt.h>

#include <algorithm>
#include <cmath>
#include <optional>

#include "hf/mapping.h"
#include "util/error.h"

namespace ropelab::hf {

namespace {

using nlohmann::json;

// One layout's settings: the base and the scaling object (rope_type and its keys), with the key
// paths they came from.
struct RopeForm {  // NOLINT(bugprone-exception-escape): json's move is noexcept
  std::optional<double> theta;
  std::string theta_key;
  std::optional<double> partial;  // the fraction of each head that turns
  std::string partial_key;
  json scaling;  // null: this layout says nothing about scaling
  std::string scaling_key;
};

[[noreturn]] void refuse_rope(const Source& s, const std::string& key, const json& value,
                              const std::string& why) {
  throw UserError(s.config_path() + ": " + key + " = " + value.dump() +
                  " is not supported: " + why);
}

[[noreturn]] void disagree(const Source& s, const std::string& a, const json& va,
                           const std::string& b, const json& vb, const std::string& how) {
  throw UserError(fmt::format(
      "{}: {} = {} and {} = {} disagree ({}); HINT: remove the one that is wrong, or make them "
      "equal",
      s.config_path(), a, va.dump(), b, vb.dump(), how));
}

double theta_of(const Source& s, const json& v, const std::string& key) {
  if (!v.is_number()) throw UserError(s.config_path() + ": " + key + ": not a number");
  return v.get<double>();
}

// transformers 4's keys: the base under `theta_key` (rope_theta; Gemma 3's sliding layers:
// rope_local_base_freq; GPT-NeoX: rotary_emb_base), the rotating fraction under `partial_key`
// (Phi-3: partial_rotary_factor; GPT-NeoX: rotary_pct; "": none), and rope_scaling where
// `scaling` (Gemma 3's apply to its global layers).
RopeForm read_v4(const Source& s, const std::string& theta_key = "rope_theta", bool scaling = true,
                 const std::string& partial_key = "") {
  RopeForm f;
  if (const json* t = s.use(theta_key)) {
    f.theta = theta_of(s, *t, theta_key);
    f.theta_key = theta_key;
  }
  if (const json* p = partial_key.empty() ? nullptr : s.use(partial_key)) {
    f.partial = theta_of(s, *p, partial_key);
    f.partial_key = partial_key;
  }
  if (const json* r = scaling ? s.use("rope_scaling") : nullptr) {
    if (!r->is_object()) throw UserError(s.config_path() + ": rope_scaling: not an object");
    f.scaling = *r;
    f.scaling_key = "rope_scaling";
  }
  return f;
}

// rope_parameters nested per layer type: every key a layer type of layer_types, every value an
// object (transformers 5's test for the nested form).
bool nested(const json& rp, const json* layer_types) {
  if (layer_types == nullptr || !layer_types->is_array() || rp.empty()) return false;
  const auto items = rp.items();
  return std::all_of(items.begin(), items.end(), [&](const auto& kv) {
    return kv.value().is_object() && std::find(layer_types->begin(), layer_types->end(),
                                               json(kv.key())) != layer_types->end();
  });
}

// transformers 5's rope_parameters: one object, or one per layer type. With `layer_type` (a
// class that reads them per type: Gemma 3), that type's entry, which must be nested; a missing
// entry is the class's default ({rope_type: default}, the base from the v4 key or the default).
RopeForm read_v5(const Source& s, const std::string& layer_type = "") {
  RopeForm f;
  const json* rp = s.use("rope_parameters");
  if (rp == nullptr) return f;
  if (!rp->is_object()) throw UserError(s.config_path() + ": rope_parameters: not an object");
  json one = *rp;
  std::string key = "rope_parameters";
  if (!layer_type.empty()) {
    for (const auto& [name, entry] : rp->items())
      if ((name != "full_attention" && name != "sliding_attention") || !entry.is_object())
        refuse_rope(s, "rope_parameters", *rp,
                    s.architecture() +
                        " reads one object per layer type (full_attention, sliding_attention)");
    if (!rp->contains(layer_type)) return f;
    one = (*rp)[layer_type];
    key = "rope_parameters." + layer_type;
  } else if (const json* types = s.use("layer_types"); nested(*rp, types)) {
    // One setting for every layer type the layers use: ropelab's imported classes have one RoPE.
    std::string first;
    for (const auto& t : *types) {
      const auto name = t.get<std::string>();
      if (!rp->contains(name))
        throw UserError(s.config_path() + ": rope_parameters: no entry for layer type " + name +
                        " (layer_types names it)");
      if (first.empty()) {
        first = name;
      } else if ((*rp)[name] != (*rp)[first]) {
        refuse_rope(s, "rope_parameters", *rp,
                    "its settings for layer types " + first + " and " + name +
                        " differ, and this class has one RoPE for every layer");
      }
    }
    one = (*rp)[first];
    key = "rope_parameters." + first;
  }
  if (auto it = one.find("rope_theta"); it != one.end() && !it->is_null()) {
    f.theta = theta_of(s, *it, key + ".rope_theta");
    f.theta_key = key + ".rope_theta";
  }
  if (auto it = one.find("partial_rotary_factor"); it != one.end() && !it->is_null()) {
    f.partial = theta_of(s, *it, key + ".partial_rotary_factor");
    f.partial_key = key + ".partial_rotary_factor";
  }
  one.erase("rope_theta");
  one.erase("partial_rotary_factor");
  // transformers 5 reads a missing rope_type as the legacy "type", else "default".
  if (!one.contains("rope_type")) one["rope_type"] = one.value("type", json("default"));
  one.erase("type");
  f.scaling = one;
  f.scaling_key = key;
  return f;
}

// A scaling object's keys as model.position.scaling overrides; `key` is its path in config.json.
class ScalingReader {
 public:
  ScalingReader(const Source& s, const json& r, std::string key, int64_t max_pos)
      : s_(s), r_(r), key_(std::move(key)), max_pos_(max_pos) {}

  std::vector<std::string> overrides() {
    const char* type_key = r_.contains("rope_type") ? "rope_type" : "type";
    if (!r_.contains(type_key) || !r_[type_key].is_string())
      throw UserError(s_.config_path() + ": " + key_ +
                      ".rope_type: missing (a string such as \"linear\" or \"yarn\")");
    used_ = {"rope_type", "type"};
    const std::string type = r_[type_key].get<std::string>();
    std::vector<std::string> ov = by_type(type);
    for (const auto& [k, v] : r_.items())
      if (used_.count(k) == 0 && !v.is_null())
        refuse_rope(s_, key_ + "." + k, v,
                    "it has no counterpart in ropelab's " + type + " scaling");
    return ov;
  }

 private:
  static constexpr const char* kP = "model.position.scaling.";

  std::optional<double> maybe(const char* key) {
    used_.insert(key);
    if (!r_.contains(key) || r_[key].is_null()) return std::nullopt;
    if (!r_[key].is_number())
      throw UserError(s_.config_path() + ": " + key_ + "." + key + ": not a number");
    return r_[key].get<double>();
  }
  double number(const char* key, double fallback) { return maybe(key).value_or(fallback); }
  std::string list(const char* key) {
    used_.insert(key);
    if (!r_.contains(key) || !r_[key].is_array())
      throw UserError(s_.config_path() + ": " + key_ + "." + key + ": missing (a list of numbers)");
    std::string out = "[";
    for (const auto& x : r_[key]) {
      if (!x.is_number())
        throw UserError(s_.config_path() + ": " + key_ + "." + key + ": not a list of numbers");
      out += (out.size() > 1 ? "," : "") + exact_number(x.get<double>());
    }
    return out + "]";
  }
  // The original context length: in the scaling object, at the top level (Phi-3), or the
  // model's max_position_embeddings; two that differ are refused.
  int64_t original() {
    const auto inner = maybe("original_max_position_embeddings");
    const json* top = s_.use("original_max_position_embeddings");
    if (top != nullptr && !top->is_number_integer())
      throw UserError(s_.config_path() + ": original_max_position_embeddings: not an integer");
    if (inner && top != nullptr && *inner != top->get<double>())
      disagree(s_, key_ + ".original_max_position_embeddings", json(*inner),
               "original_max_position_embeddings", *top,
               "transformers 4 reads the first, 5 the second");
    if (inner) return static_cast<int64_t>(*inner);
    return top != nullptr ? top->get<int64_t>() : max_pos_;
  }
  static std::string f(double v) { return exact_number(v); }

  std::vector<std::string> by_type(const std::string& type) {
    const std::string p = kP;
    if (type == "default") return {};
    if (type == "linear") return {p + "type=linear", p + "factor=" + f(number("factor", 1))};
    if (type == "dynamic") {
      // transformers' dynamic NTK takes max_position_embeddings as the original length.
      const int64_t orig = original();
      if (orig != max_pos_)
        refuse_rope(s_, key_ + ".original_max_position_embeddings", json(orig),
                    "transformers' dynamic scaling takes max_position_embeddings (" +
                        std::to_string(max_pos_) + ") as the original length");
      return {p + "type=dynamic", p + "factor=" + f(number("factor", 1)),
              p + "original_len=" + std::to_string(max_pos_)};
    }
    if (type == "yarn") {
      if (r_.contains("mscale") || r_.contains("mscale_all_dim"))
        refuse_rope(s_, key_, r_, "yarn's mscale / mscale_all_dim (DeepSeek) are not in ropelab");
      used_.insert("truncate");
      if (r_.contains("truncate") && r_["truncate"] != true)
        refuse_rope(s_, key_ + ".truncate", r_["truncate"],
                    "ropelab's yarn truncates (floor, ceil)");
      return {p + "type=yarn",
              p + "factor=" + f(number("factor", 1)),
              p + "original_len=" + std::to_string(original()),
              p + "beta_fast=" + f(number("beta_fast", 32)),
              p + "beta_slow=" + f(number("beta_slow", 1)),
              p + "attention_factor=" + f(number("attention_factor", 0))};
    }
    if (type == "llama3")
      return {p + "type=llama3", p + "factor=" + f(number("factor", 8)),
              p + "original_len=" + std::to_string(original()),
              p + "low_freq_factor=" + f(number("low_freq_factor", 1)),
              p + "high_freq_factor=" + f(number("high_freq_factor", 4))};
    if (type == "longrope") return longrope();
    refuse_rope(s_, key_ + ".rope_type", json(type),
                "ropelab has default, linear, dynamic, yarn, llama3 and longrope");
  }

  std::vector<std::string> longrope() {
    const std::string p = kP;
    const int64_t orig = original();
    // The factor: transformers 4 takes max_position_embeddings / original length when the
    // original is at the top level (Phi-3), 5 takes rope_parameters.factor when given; both
    // fall back to the ratio.
    const double ratio = static_cast<double>(max_pos_) / static_cast<double>(orig);
    const auto given = maybe("factor");
    if (given && s_.present("original_max_position_embeddings") &&
        std::abs(*given - ratio) > 1e-9 * ratio)
      disagree(s_, key_ + ".factor", json(*given),
               "max_position_embeddings / original_max_position_embeddings", json(ratio),
               "transformers 4 reads the second, 5 the first");
    const double factor = given.value_or(ratio);
    return {p + "type=longrope",
            p + "short_factor=" + list("short_factor"),
            p + "long_factor=" + list("long_factor"),
            p + "original_len=" + std::to_string(orig),
            p + "factor=" + f(std::max(1.0, factor)),
            p + "attention_factor=" + f(number("attention_factor", 0))};
  }

  const Source& s_;
  const json& r_;
  std::string key_;
  int64_t max_pos_;
  std::set<std::string> used_;
};

std::vector<std::string> scaling_of(const Source& s, const RopeForm& f, int64_t max_pos) {
  if (f.scaling.is_null()) return {};
  return ScalingReader(s, f.scaling, f.scaling_key, max_pos).overrides();
}

}  // namespace

namespace {
// The rotating fraction as model.position.rotary_dim (nothing for the whole head). transformers
// turns int(head_dim * fraction) channels of each head; ropelab needs an even width.
std::vector<std::string> rotary_dim_of(const Source& s, const RopeForm& v4, const RopeForm& v5,
                                       const RopeClass& c) {
  if (v4.partial && v5.partial && *v4.partial != *v5.partial)
    disagree(s, v4.partial_key, json(*v4.partial), v5.partial_key, json(*v5.partial),
             "transformers 4 reads the first, 5 the second");
  const RopeForm& given = v5.partial ? v5 : v4;
  const double frac = given.partial.value_or(c.default_partial);
  if (frac == 1.0) return {};
  const std::string key = given.partial ? given.partial_key : c.v4_partial_key;
  if (c.head_dim == 0)
    refuse_rope(s, key, json(frac),
                "this class turns the whole head (a partial rotation is not its computation)");
  const auto R = static_cast<int64_t>(static_cast<double>(c.head_dim) * frac);
  if (!(frac > 0 && frac < 1) || R < 2 || R % 2 != 0)
    refuse_rope(s, key, json(frac),
                fmt::format("ropelab turns an even number of channels of each head, and "
                            "int({} * {}) = {}",
                            c.head_dim, exact_number(frac), R));
  return {"model.position.rotary_dim=" + std::to_string(R)};
}

std::vector<std::string> overrides_of(const Source& s, const RopeForm& v4, const RopeForm& v5,
                                      int64_t max_pos, const RopeClass& c) {
  if (v4.theta && v5.theta && *v4.theta != *v5.theta)
    disagree(s, v4.theta_key, json(*v4.theta), v5.theta_key, json(*v5.theta),
             "transformers 4 reads the first, 5 the second");
  const double theta = v5.theta.value_or(v4.theta.value_or(c.default_base));
  const auto a = scaling_of(s, v4, max_pos), b = scaling_of(s, v5, max_pos);
  if (!v4.scaling.is_null() && !v5.scaling.is_null() && a != b)
    disagree(s, v4.scaling_key, v4.scaling, v5.scaling_key, s.config().at("rope_parameters"),
             "transformers 4 reads the first, 5 the second");
  std::vector<std::string> ov = {"model.position.base=" + exact_number(theta)};
  for (const auto& o : v5.scaling.is_null() ? a : b) ov.push_back(o);
  for (auto& o : rotary_dim_of(s, v4, v5, c)) ov.push_back(std::move(o));
  return ov;
}
}  // namespace

std::vector<std::string> rope_overrides(const Source& s, int64_t max_pos, const RopeClass& c) {
  return overrides_of(s, read_v4(s, c.v4_theta_key, true, c.v4_partial_key), read_v5(s), max_pos,
                      c);
}

std::vector<std::string> layer_type_rope_overrides(const Source& s, int64_t max_pos,
                                                   const LayerTypeRope& t) {
  RopeClass c;
  c.default_base = t.default_base;
  return overrides_of(s, read_v4(s, t.v4_theta_key, t.v4_scaling), read_v5(s, t.layer_type),
                      max_pos, c);
}

void put_rope(const config::RopeConfig& r, HfConfigForm form, nlohmann::json& j) {
  json rs;  // the scaling's keys (null: none)
  std::visit(
      [&](const auto& sc) {
        using T = std::decay_t<decltype(sc)>;
        auto extended = [&](double factor, int64_t original) {
          return static_cast<int64_t>(std::llround(factor * static_cast<double>(original)));
        };
        if constexpr (std::is_same_v<T, config::LinearScaling>) {
          rs = {{"rope_type", "linear"}, {"factor", sc.factor}};
        } else if constexpr (std::is_same_v<T, config::DynamicNtkScaling>) {
          rs = {{"rope_type", "dynamic"}, {"factor", sc.factor}};
          j["max_position_embeddings"] = sc.original_len;  // dynamic's original length
        } else if constexpr (std::is_same_v<T, config::YarnScaling>) {
          rs = {{"rope_type", "yarn"},
                {"factor", sc.factor},
                {"original_max_position_embeddings", sc.original_len},
                {"beta_fast", sc.beta_fast},
                {"beta_slow", sc.beta_slow}};
          if (sc.attention_factor > 0) rs["attention_factor"] = sc.attention_factor;
          j["max_position_embeddings"] = extended(sc.factor, sc.original_len);
        } else if constexpr (std::is_same_v<T, config::Llama3Scaling>) {
          rs = {{"rope_type", "llama3"},
                {"factor", sc.factor},
                {"low_freq_factor", sc.low_freq_factor},
                {"high_freq_factor", sc.high_freq_factor},
                {"original_max_position_embeddings", sc.original_len}};
        } else if constexpr (std::is_same_v<T, config::LongRopeScaling>) {
          rs = {{"rope_type", "longrope"},
                {"short_factor", sc.short_factor},
                {"long_factor", sc.long_factor}};
          if (sc.attention_factor > 0) rs["attention_factor"] = sc.attention_factor;
          // v4 takes the factor from max_position_embeddings / the top-level original length;
          // v5 reads both inside rope_parameters.
          if (form == HfConfigForm::kV4) {
            j["original_max_position_embeddings"] = sc.original_len;
          } else {
            rs["original_max_position_embeddings"] = sc.original_len;
            rs["factor"] = sc.factor;
          }
          j["max_position_embeddings"] = extended(sc.factor, sc.original_len);
        }
      },
      r.scaling.opts);
  if (form == HfConfigForm::kV4) {
    j["rope_theta"] = r.base;
    j["rope_scaling"] = rs;
  } else {
    if (rs.is_null()) rs = {{"rope_type", "default"}};
    rs["rope_theta"] = r.base;
    j["rope_parameters"] = rs;
  }
}

}  // namespace ropelab::hf
