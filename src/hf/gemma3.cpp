// Gemma 3 (Team Gemma 2025, arXiv:2503.19786), text only: Gemma3ForCausalLM onto ropelab's
// decoder, a CLM run. Its layers differ from Llama's (hf/llama.cpp) in:
//   - four norms a layer: x + post(f(pre(x))) for attention and FFN (model.norm sandwich);
//   - RMSNorm with (1 + w) as the gain (model.norm_type rmsnorm_offset), the QK-norm's too;
//   - QK-norm over each head (model.attention.qk_norm), an explicit head_dim (default 256);
//   - scores divided by sqrt(query_pre_attn_scalar) (model.attention.scale_dim), not sqrt(head);
//   - the FFN down(gelu_tanh(gate(x)) * up(x)) (model.activation geglu_tanh; "gelu": geglu);
//   - embeddings times sqrt(hidden_size) (model.scale_embeddings), the output layer tied;
//   - sliding-window layers (window sliding_window, default 4096) between global ones, from
//     layer_types or sliding_window_pattern (every N-th layer global, default 6), with RoPE
//     of their own: base rope_local_base_freq (default 10000) and no scaling, while the global
//     layers take rope_theta (default 1e6) and rope_scaling. transformers 5 keeps both in
//     rope_parameters, one entry per layer type. ropelab: model.position is the global RoPE
//     (what eval --rope-scaling extends), and model.layout has the kinds full_attention and
//     sliding_attention, the latter {window, position: the local RoPE}.
// Names:
//   model.layers.i.input_layernorm / post_attention_layernorm   ...layers.i.norm1 / post_norm1
//   model.layers.i.pre_feedforward_layernorm / post_feedforward_layernorm   norm2 / post_norm2
//   the rest as Llama's (q/k/v/o_proj, q_norm, k_norm, gate/up/down_proj, model.norm).
// Refused, naming the key: attention or final logit soft-capping, bidirectional attention
// (EmbeddingGemma), attention biases, and Gemma3ForConditionalGeneration's vision tower.
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <algorithm>

#include "config/layout.h"
#include "config/loader.h"
#include "hf/family.h"
#include "hf/mapping.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"

namespace ropelab::hf {

namespace {

// Each layer's type, "full_attention" or "sliding_attention": layer_types, else every
// sliding_window_pattern-th layer (1-based) global.
std::vector<std::string> gemma3_types(const Source& s, int64_t L) {
  std::vector<std::string> types;
  const int64_t every = s.get_int("sliding_window_pattern", 6);
  if (const nlohmann::json* given = s.use("layer_types")) {
    if (!given->is_array() || static_cast<int64_t>(given->size()) != L)
      s.unsupported("layer_types", "expected one entry per layer (num_hidden_layers)");
    for (const auto& t : *given) {
      if (t != "full_attention" && t != "sliding_attention")
        s.unsupported("layer_types", "Gemma 3's layers are full_attention or sliding_attention");
      types.push_back(t.get<std::string>());
    }
    return types;
  }
  if (every < 1) s.unsupported("sliding_window_pattern", "expected a positive period");
  for (int64_t i = 0; i < L; ++i)
    types.push_back((i + 1) % every != 0 ? "sliding_attention" : "full_attention");
  return types;
}

// The shortest prefix of `kinds` that repeats to give them all (model.layout.pattern).
std::vector<std::string> shortest_period(const std::vector<std::string>& kinds) {
  for (size_t p = 1; p < kinds.size(); ++p) {
    bool repeats = true;
    for (size_t i = p; i < kinds.size() && repeats; ++i) repeats = kinds[i] == kinds[i % p];
    if (repeats) return {kinds.begin(), kinds.begin() + static_cast<std::ptrdiff_t>(p)};
  }
  return kinds;
}

// The layers' kinds and RoPE as overrides: model.position is the global layers' RoPE; a
// sliding layer is the kind sliding_attention with its window and its own RoPE.
std::vector<std::string> gemma3_layout(Source& s, int64_t L, int64_t P) {
  const auto types = gemma3_types(s, L);
  auto global = layer_type_rope_overrides(s, P, {"full_attention", "rope_theta", true, 1e6});
  auto local =
      layer_type_rope_overrides(s, P, {"sliding_attention", "rope_local_base_freq", false, 1e4});
  std::vector<std::string> o = std::move(global);
  // Read (and so accounted for) even where no layer slides and it is unused.
  const nlohmann::json* w = s.use("sliding_window");  // absent: transformers' default, 4096
  if (std::find(types.begin(), types.end(), "sliding_attention") == types.end()) return o;
  const int64_t window = !s.config().contains("sliding_window")   ? 4096
                         : w != nullptr && w->is_number_integer() ? w->get<int64_t>()
                                                                  : 0;
  if (window < 1) s.unsupported("sliding_window", "the sliding layers need a positive window");
  o.push_back("model.layout.kinds.sliding_attention.window=" + std::to_string(window));
  for (auto& x : under_kind(local, "sliding_attention")) o.push_back(std::move(x));
  if (std::find(types.begin(), types.end(), "full_attention") != types.end()) {
    o.push_back("model.layout.kinds.full_attention={}");
    std::string pattern;
    for (const auto& t : shortest_period(types)) pattern += (pattern.empty() ? "" : ", ") + t;
    o.push_back("model.layout.pattern=[" + pattern + "]");
  }
  return o;
}

// What Gemma 3 has that ropelab does not compute: each refused naming its key.
void refuse_gemma3_extras(const Source& s) {
  for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
    if (s.use(key) != nullptr)
      s.unsupported(key, "ropelab has no tanh soft-capping of logits (Gemma 2's)");
  if (s.get_bool("use_bidirectional_attention", false))
    s.unsupported("use_bidirectional_attention",
                  "ropelab's decoders are causal (an encoder has no Gemma 3 import)");
  if (s.get_bool("attention_bias", false))
    s.unsupported("attention_bias", "model.bias has no biases on q, k, v and o alone");
}

void take_gemma3_layer(Source& s, int64_t i, int64_t D, int64_t N, int64_t Nkv, int64_t H,
                       int64_t F, std::map<std::string, at::Tensor>& w) {
  const std::string f = fmt::format("model.layers.{}.", i);
  const std::string t = fmt::format("backbone.decoder.layers.{}.", i);
  const std::pair<const char*, std::vector<int64_t>> attn[] = {
      {"q_proj", {N * H, D}}, {"k_proj", {Nkv * H, D}}, {"v_proj", {Nkv * H, D}},
      {"o_proj", {D, N * H}}, {"q_norm", {H}},          {"k_norm", {H}}};
  for (const auto& [name, shape] : attn)
    w[t + "self_attn." + name + ".weight"] = s.take(f + "self_attn." + name + ".weight", shape);
  const std::pair<const char*, const char*> ffn[] = {
      {"gate_proj", "gate"}, {"up_proj", "fc1"}, {"down_proj", "fc2"}};
  for (const auto& [from, to] : ffn)
    w[t + to + ".weight"] = s.take(f + "mlp." + from + ".weight", std::string(from) == "down_proj"
                                                                      ? std::vector<int64_t>{D, F}
                                                                      : std::vector<int64_t>{F, D});
  const std::pair<const char*, const char*> norms[] = {
      {"input_layernorm", "norm1"},
      {"post_attention_layernorm", "post_norm1"},
      {"pre_feedforward_layernorm", "norm2"},
      {"post_feedforward_layernorm", "post_norm2"}};
  for (const auto& [from, to] : norms) w[t + to + ".weight"] = s.take(f + from + ".weight", {D});
}

}  // namespace

static Mapped map_gemma3(Source& s) {
  const int64_t V = s.get_int("vocab_size", 262208), D = s.get_int("hidden_size", 2304),
                L = s.get_int("num_hidden_layers", 26), N = s.get_int("num_attention_heads", 8),
                F = s.get_int("intermediate_size", 9216),
                P = s.get_int("max_position_embeddings", 131072);
  const int64_t Nkv = s.get_int("num_key_value_heads", 4), H = s.get_int("head_dim", 256);
  if (V < tokenizers::Special::kCount) s.unsupported("vocab_size", "too small");
  if (Nkv <= 0 || N <= 0 || N % Nkv != 0)
    s.unsupported("num_key_value_heads", "it does not divide num_attention_heads");
  if (H <= 0 || H % 2 != 0) s.unsupported("head_dim", "RoPE needs a positive, even head dimension");
  const std::string act = s.get_string("hidden_activation", "gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh" && act != "gelu_new" && act != "gelu")
    s.unsupported("hidden_activation", "ropelab has gelu_pytorch_tanh (= gelu_new) and gelu");
  const double scale_dim = s.get_double("query_pre_attn_scalar", 256);
  if (scale_dim <= 0) s.unsupported("query_pre_attn_scalar", "expected a positive number");
  refuse_gemma3_extras(s);
  const bool tied = s.get_bool("tie_word_embeddings", true);

  Mapped m;
  m.vocab = V;
  auto tok = tokenizer_of(s, V);
  std::string shared;
  m.vocab_order = tokenizers::special_first_order(
      V,
      llama_specials(s, V, tok.unk, shared,
                     {{"pad_token_id", 0}, {"eos_token_id", 1}, {"bos_token_id", 2}}),
      tok.fillers);
  m.overrides = decoder_overrides(P, D, L, N, Nkv, H);
  m.overrides.insert(
      m.overrides.end(),
      {
          "model.attention.qk_norm=true",
          "model.attention.qk_norm_over=head",
          "model.attention.scale_dim=" +
              exact_number(scale_dim == static_cast<double>(H) ? 0 : scale_dim),
          "model.d_ff=" + std::to_string(F),
          "model.norm=sandwich",
          "model.norm_type=rmsnorm_offset",
          "model.norm_eps=" + exact_number(s.get_double("rms_norm_eps", 1e-6)),
          std::string("model.activation=") + (act == "gelu" ? "geglu" : "geglu_tanh"),
          "model.bias=none",
          "model.attention.dropout=" + exact_number(s.get_double("attention_dropout", 0.0)),
          "model.init_std=" + exact_number(s.get_double("initializer_range", 0.02)),
          std::string("model.tie_embeddings=") + (tied ? "true" : "false"),
          "model.scale_embeddings=true",
          "model.position.type=rope",
          "model.position.pairing=half",
      });
  for (auto& o : gemma3_layout(s, L, P)) m.overrides.push_back(std::move(o));
  for (auto& o : tok.overrides) m.overrides.push_back(std::move(o));
  m.note = tok.note;
  if (!shared.empty()) m.note += (m.note.empty() ? "" : "; ") + shared;

  auto order = torch::tensor(m.vocab_order, torch::kLong);
  auto& w = m.weights;
  w["backbone.tok_emb.weight"] = s.take("model.embed_tokens.weight", {V, D}).index_select(0, order);
  for (int64_t i = 0; i < L; ++i) take_gemma3_layer(s, i, D, N, Nkv, H, F, w);
  w["backbone.decoder.final_norm.weight"] = s.take("model.norm.weight", {D});
  if (tied)
    s.skip("lm_head.weight");
  else
    w["head.proj.weight"] = s.take("lm_head.weight", {V, D}).index_select(0, order);
  return m;
}

// ---- export

namespace {

// The run's layer kinds as Gemma 3's: types per layer, the window, the local RoPE ("" or why
// Gemma 3 cannot say them).
struct Gemma3Layout {
  std::vector<std::string> types;
  int64_t window = 0;
  const config::RopeConfig* local = nullptr;
};

// Whether layout kind `name` has model.position's settings, key for key.
bool same_as_model_position(const std::map<std::string, std::string>& flat,
                            const std::string& name) {
  const std::string model_pos = "model.position.", K = "model.layout.kinds." + name + ".position.";
  return std::all_of(flat.begin(), flat.end(), [&](const auto& kv) {
    if (kv.first.rfind(model_pos, 0) != 0) return true;
    auto it = flat.find(K + kv.first.substr(model_pos.size()));
    return it != flat.end() && it->second == kv.second;
  });
}

std::string gemma3_layout_of(const config::Config& c, Gemma3Layout& g) {
  const auto& m = c.model;
  const auto& kinds = m.layout.kinds;
  if (kinds.empty()) {
    g.types.assign(static_cast<size_t>(m.n_layers), "full_attention");
    return "";
  }
  const auto flat = config::flat_keys(c);
  for (const auto& [name, kind] : kinds) {
    const std::string K = "model.layout.kinds." + name;
    if (name != "full_attention" && name != "sliding_attention")
      return "a layer kind Gemma 3 does not name (" + K + ": full_attention or sliding_attention)";
    if (kind.chunk.has) return "chunked attention (" + K + ".chunk)";
    if (kind.temperature.scale != 0) return "a query temperature (" + K + ".temperature)";
    if ((name == "sliding_attention") != kind.window.has)
      return "a window on full_attention or none on sliding_attention (" + K + ".window)";
    const auto* r = std::get_if<config::RopeConfig>(&kind.position.opts);
    if (r == nullptr || r->pairing != config::RopePairing::kHalf || r->rotary_dim != 0 ||
        r->fraction != 1.0 || r->nope_every != 0 || !r->nope_layers.empty())
      return "positions other than whole half-split RoPE (" + K + ".position)";
    if (name == "sliding_attention") {
      g.window = kind.window.value;
      g.local = r;
      if (!std::holds_alternative<config::NoScaling>(r->scaling.opts))
        return "a context extension on the sliding layers (" + K + ".position.scaling)";
    } else if (!same_as_model_position(flat, name)) {
      return "global layers whose RoPE is not model.position (" + K + ".position)";
    }
  }
  for (const auto& kind : config::layer_kinds(m.layout, m.n_layers)) g.types.push_back(kind);
  return "";
}

}  // namespace

static std::string gemma3_mismatch(const config::Config& c) {
  const auto& m = c.model;
  using namespace config;
  if (m.arch != Arch::kDecoder) return "the model is not a decoder";
  if (!std::holds_alternative<ClmTaskConfig>(c.task.opts))
    return std::string("task ") + c.task.type() + " has no such class";
  if (m.norm != Norm::kSandwich) return "two norms a layer (Gemma 3 has four: model.norm sandwich)";
  if (m.norm_type != NormType::kRmsNormOffset) return "norms other than RMSNorm with (1 + gain)";
  if (!m.attention.qk_norm || m.attention.qk_norm_over != QkNormOver::kHead)
    return "no QK-norm over each head";
  if (m.activation != Activation::kGegluTanh && m.activation != Activation::kGeglu)
    return "a feed-forward other than GEGLU";
  if (m.bias != LinearBias::kNone) return "biases";
  if (!m.scale_embeddings) return "unscaled embeddings";
  if (m.attention.kernel != AttentionKernel::kSoftmax) return "linear attention";
  const auto* r = std::get_if<RopeConfig>(&m.position.opts);
  if (r == nullptr || r->pairing != RopePairing::kHalf || r->rotary_dim != 0 ||
      r->fraction != 1.0 || r->nope_every != 0 || !r->nope_layers.empty())
    return "positions other than whole half-split RoPE";
  if (std::holds_alternative<NtkScaling>(r->scaling.opts))
    return "static NTK scaling (transformers has no such rope_type)";
  Gemma3Layout g;
  return gemma3_layout_of(c, g);
}

static Exported export_gemma3(const ExportSource& s) {
  const auto& c = *s.config;
  const auto& m = c.model;
  const auto& global = std::get<config::RopeConfig>(m.position.opts);
  Gemma3Layout g;
  gemma3_layout_of(c, g);
  const int64_t H = config::head_dim_of(m);
  const nlohmann::json& o = s.origin;
  auto kept = [&](const char* key, const nlohmann::json& fallback) {
    return o.is_object() && o.contains(key) ? o[key] : fallback;
  };
  Exported e;
  auto& j = e.config;
  j["architectures"] = {"Gemma3ForCausalLM"};
  j["model_type"] = "gemma3_text";
  put_decoder_keys(s, j);
  // The imported spelling where it computes the same (gelu_new is gelu_pytorch_tanh).
  const bool tanh = m.activation == config::Activation::kGegluTanh;
  const auto act = kept("hidden_activation", "");
  j["hidden_activation"] = tanh ? (act == "gelu_new" ? act : "gelu_pytorch_tanh") : "gelu";
  j["attention_bias"] = false;
  const double sd = m.attention.scale_dim > 0 ? m.attention.scale_dim : static_cast<double>(H);
  j["query_pre_attn_scalar"] =
      sd == std::floor(sd) ? nlohmann::json(static_cast<int64_t>(sd)) : nlohmann::json(sd);
  j["sliding_window"] = g.window > 0 ? nlohmann::json(g.window) : kept("sliding_window", 4096);
  // layer_types, or the checkpoint's sliding_window_pattern alone where it says the same.
  const bool by_pattern = o.is_object() && o.contains("sliding_window_pattern");
  if (by_pattern) j["sliding_window_pattern"] = o["sliding_window_pattern"];
  bool pattern_says =
      by_pattern && !o.contains("layer_types") && o["sliding_window_pattern"].is_number_integer();
  for (size_t i = 0; pattern_says && i < g.types.size(); ++i) {
    const int64_t every = o["sliding_window_pattern"].get<int64_t>();
    pattern_says = every >= 1 && (g.types[i] == "sliding_attention") ==
                                     ((static_cast<int64_t>(i) + 1) % every != 0);
  }
  if (!pattern_says) j["layer_types"] = g.types;
  j["final_logit_softcapping"] = nullptr;
  j["attn_logit_softcapping"] = nullptr;
  // RoPE: the global layers' as a Llama's; the sliding layers' base beside it (v4), or both
  // in rope_parameters by layer type (v5).
  config::RopeConfig local = g.local != nullptr ? *g.local : config::RopeConfig{};
  if (g.local == nullptr) local.base = kept("rope_local_base_freq", 10000.0).get<double>();
  if (s.form == HfConfigForm::kV4) {
    put_rope(global, s.form, j);
    j["rope_local_base_freq"] = local.base;
  } else {
    nlohmann::json a, b;
    put_rope(global, s.form, a);
    put_rope(local, s.form, b);
    for (const auto& [k, v] : a.items())
      if (k != "rope_parameters") j[k] = v;
    j["rope_parameters"] = {{"full_attention", a["rope_parameters"]},
                            {"sliding_attention", b["rope_parameters"]}};
  }

  auto put = [&](const std::string& name, const at::Tensor& t) { e.tensors.emplace_back(name, t); };
  put("model.embed_tokens.weight", s.rows(s.at("backbone.tok_emb.weight")));
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string t = fmt::format("model.layers.{}.", i);
    const std::string f = fmt::format("backbone.decoder.layers.{}.", i);
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj", "q_norm", "k_norm"})
      put(t + "self_attn." + p + ".weight", s.at(f + "self_attn." + p + ".weight"));
    put(t + "mlp.gate_proj.weight", s.at(f + "gate.weight"));
    put(t + "mlp.up_proj.weight", s.at(f + "fc1.weight"));
    put(t + "mlp.down_proj.weight", s.at(f + "fc2.weight"));
    put(t + "input_layernorm.weight", s.at(f + "norm1.weight"));
    put(t + "post_attention_layernorm.weight", s.at(f + "post_norm1.weight"));
    put(t + "pre_feedforward_layernorm.weight", s.at(f + "norm2.weight"));
    put(t + "post_feedforward_layernorm.weight", s.at(f + "post_norm2.weight"));
  }
  put("model.norm.weight", s.at("backbone.decoder.final_norm.weight"));
  if (!m.tie_embeddings) put("lm_head.weight", s.rows(s.at("head.proj.weight")));
  return e;
}

// Gemma 3's multimodal model: its vision tower is not imported (the text model is).
static void refuse_gemma3(const Source& s) {
  const std::string& a = s.architecture();
  if (a == "Gemma3ForConditionalGeneration" || s.present("vision_config"))
    s.unsupported(s.present("vision_config") ? "vision_config" : "architectures",
                  a + " has a vision tower, which ropelab does not import; a text-only "
                      "Gemma3ForCausalLM checkpoint (text_config's keys, language_model's "
                      "tensors) imports");
}

const Family& gemma3_family() {
  static const Family f{
      "Gemma 3",
      config::Arch::kDecoder,
      {
          "Gemma3ForCausalLM",
      },
      "Gemma3ForCausalLM",
      map_gemma3,
      gemma3_mismatch,
      export_gemma3,
      refuse_gemma3,
  };
  return f;
}

}  // namespace ropelab::hf
