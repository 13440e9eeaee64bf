// Llama-layout decoders (Touvron et al. 2023): LlamaForCausalLM (also SmolLM, TinyLlama),
// MistralForCausalLM and Qwen2ForCausalLM onto ropelab's decoder, a CLM run.
//
// A pre-norm decoder: RMSNorm (model.norm_type rmsnorm, eps rms_norm_eps) before attention and
// before the FFN, a final RMSNorm; grouped-query attention (model.n_kv_heads from
// num_key_value_heads); the SwiGLU FFN down(silu(gate(x)) * up(x)) (model.activation swiglu);
// no biases (Qwen2: on q, k and v only: model.bias qkv); RoPE on pairs (i, i + head/2)
// (model.position.pairing half) with theta_i = rope_theta^(-2i/head); rope_scaling onto
// model.position.scaling (linear, dynamic, yarn, llama3, longrope); the output layer tied to the
// embeddings or its own. Names:
//
//   model.embed_tokens                        backbone.tok_emb        (rows re-numbered)
//   model.layers.i.input_layernorm            backbone.decoder.layers.i.norm1
//   model.layers.i.self_attn.q/k/v/o_proj     ...self_attn.q/k/v/o_proj
//   model.layers.i.post_attention_layernorm   ...norm2
//   model.layers.i.mlp.gate_proj / up_proj / down_proj   ...gate / fc1 / fc2
//   model.norm                                backbone.decoder.final_norm
//   lm_head                                   head.proj (untied; rows re-numbered)
//
// The tokenizer: tokenizer.json when it is a byte-level BPE (text/bpe.h), else tokenizer.model
// (SentencePiece), both re-numbered through RUN/hf/vocab_order.json. Specials the checkpoint
// lacks (pad, cls, sep, mask; unk in a byte-level BPE) take rows past the tokenizer's end, then
// unused special tokens (<|reserved_special_token_k|>), then the lowest free ids.
// Refused, naming the key: another hidden_act, a head_dim other than hidden_size/heads, a
// sliding window (Mistral's sliding_window, Qwen2's use_sliding_window), biases on some
// projections but not others in a way model.bias cannot say, a rope_scaling type or key
// ropelab does not have (mscale, truncate false, ...).
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>

#include "hf/mapping.h"
#include "text/bpe.h"
#include "text/tokenizer.h"
#include "text/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::hf {

namespace {

// config.json's rope_scaling as model.position.scaling overrides.
std::vector<std::string> scaling_overrides(const Source& s, int64_t max_pos) {
  const auto& j = s.json();
  auto it = j.find("rope_scaling");
  if (it == j.end() || it->is_null()) return {};
  const std::string where = s.config_path() + ": rope_scaling";
  if (!it->is_object()) throw UserError(where + ": not an object");
  const nlohmann::json& r = *it;
  const char* type_key = r.contains("rope_type") ? "rope_type" : "type";
  if (!r.contains(type_key) || !r[type_key].is_string())
    throw UserError(where + ".rope_type: missing (a string such as \"linear\" or \"yarn\")");
  const std::string type = r[type_key].get<std::string>();
  std::set<std::string> used = {"rope_type", "type"};
  auto number = [&](const char* key, double fallback) {
    used.insert(key);
    if (!r.contains(key) || r[key].is_null()) return fallback;
    if (!r[key].is_number()) throw UserError(where + "." + key + ": not a number");
    return r[key].get<double>();
  };
  auto list = [&](const char* key) {
    used.insert(key);
    if (!r.contains(key) || !r[key].is_array())
      throw UserError(where + "." + key + ": missing (a list of numbers)");
    std::string out = "[";
    for (const auto& x : r[key]) {
      if (!x.is_number()) throw UserError(where + "." + key + ": not a list of numbers");
      out += (out.size() > 1 ? "," : "") + exact_number(x.get<double>());
    }
    return out + "]";
  };
  const std::string p = "model.position.scaling.";
  // original_max_position_embeddings: in rope_scaling, at the top level (Phi-3), or the
  // model's max_position_embeddings.
  auto original = [&]() -> int64_t {
    used.insert("original_max_position_embeddings");
    if (r.contains("original_max_position_embeddings"))
      return static_cast<int64_t>(number("original_max_position_embeddings", 0));
    return s.get_int("original_max_position_embeddings", max_pos);
  };
  std::vector<std::string> ov;
  if (type == "default") {
    // plain RoPE
  } else if (type == "linear") {
    ov = {p + "type=linear", p + "factor=" + exact_number(number("factor", 1))};
  } else if (type == "dynamic") {
    ov = {p + "type=dynamic", p + "factor=" + exact_number(number("factor", 1)),
          p + "original_len=" + std::to_string(original())};
  } else if (type == "yarn") {
    if (r.contains("mscale") || r.contains("mscale_all_dim"))
      s.unsupported("rope_scaling", "yarn's mscale / mscale_all_dim (DeepSeek) are not in ropelab");
    used.insert("truncate");
    if (r.contains("truncate") && r["truncate"] != true)
      s.unsupported("rope_scaling", "yarn with truncate: false is not in ropelab");
    ov = {p + "type=yarn",
          p + "factor=" + exact_number(number("factor", 1)),
          p + "original_len=" + std::to_string(original()),
          p + "beta_fast=" + exact_number(number("beta_fast", 32)),
          p + "beta_slow=" + exact_number(number("beta_slow", 1)),
          p + "attention_factor=" + exact_number(number("attention_factor", 0))};
  } else if (type == "llama3") {
    ov = {p + "type=llama3", p + "factor=" + exact_number(number("factor", 8)),
          p + "original_len=" + std::to_string(original()),
          p + "low_freq_factor=" + exact_number(number("low_freq_factor", 1)),
          p + "high_freq_factor=" + exact_number(number("high_freq_factor", 4))};
  } else if (type == "longrope") {
    const int64_t orig = original();
    // transformers: factor = max_position_embeddings / original when the original length is
    // given at the top level (Phi-3), else rope_scaling's factor.
    double factor = number("factor", 1);
    if (s.json().contains("original_max_position_embeddings"))
      factor = static_cast<double>(max_pos) / static_cast<double>(orig);
    ov = {p + "type=longrope",
          p + "short_factor=" + list("short_factor"),
          p + "long_factor=" + list("long_factor"),
          p + "original_len=" + std::to_string(orig),
          p + "factor=" + exact_number(std::max(1.0, factor)),
          p + "attention_factor=" + exact_number(number("attention_factor", 0))};
  } else {
    s.unsupported(
        "rope_scaling",
        "rope_type " + type + " is not in ropelab (linear, dynamic, yarn, llama3, longrope)");
  }
  for (const auto& [k, v] : r.items())
    if (used.count(k) == 0 && !v.is_null())
      s.unsupported("rope_scaling", "its key " + k + " has no counterpart in ropelab");
  return ov;
}

// The first id of a config.json token id entry (an int, or a list of them as Llama 3.1's
// eos_token_id), or -1.
int64_t token_id(const Source& s, const char* key) {
  const auto& j = s.json();
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return -1;
  if (it->is_array() && !it->empty() && (*it)[0].is_number_integer())
    return (*it)[0].get<int64_t>();
  if (!it->is_number_integer()) throw UserError(s.config_path() + ": " + key + ": not an id");
  return it->get<int64_t>();
}

// The checkpoint's tokenizer: a byte-level BPE tokenizer.json (Llama 3, Qwen2), else a
// SentencePiece tokenizer.model (Llama 2, Mistral); the ids its specials have, and the ids that
// can stand for the specials it lacks (rows past the tokenizer's end, then its unused special
// tokens).
struct LlamaTokenizer {
  std::vector<std::string> overrides;
  int64_t unk = -1;
  std::vector<int64_t> fillers;
  std::string note;
};

LlamaTokenizer tokenizer_of(const Source& s, int64_t V) {
  LlamaTokenizer t;
  const std::string json = s.dir() + "/tokenizer.json", spm = s.dir() + "/tokenizer.model";
  bool byte_level = false;
  if (std::filesystem::is_regular_file(json)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(fs::read_file(json));
    } catch (const nlohmann::json::exception& e) {
      throw UserError(json + ": not valid JSON (" + e.what() + ")");
    }
    const nlohmann::json model = j.is_object() ? j.value("model", nlohmann::json()) : nullptr;
    byte_level = model.is_object() && model.value("type", std::string()) == "BPE" &&
                 !model.value("byte_fallback", false);
  }
  const std::string order = s.dir() + "/vocab_order.json";  // written by the import
  if (byte_level) {
    text::BpeTokenizer bpe(json);  // refuses what it cannot run, naming the key
    if (bpe.size() > V)
      throw UserError(
          fmt::format("{}: {} ids, more than config.json's vocab_size {}", json, bpe.size(), V));
    for (int64_t i = bpe.size(); i < V; ++i) t.fillers.push_back(i);
    std::vector<int64_t> unused;
    for (const auto& a : bpe.added_tokens())
      if (a.special) unused.push_back(a.id);
    std::sort(unused.begin(), unused.end());
    t.fillers.insert(t.fillers.end(), unused.begin(), unused.end());
    t.overrides = {"data.tokenizer.type=bpe", "data.tokenizer.model=" + json,
                   "data.tokenizer.vocab_order=" + order};
  } else if (std::filesystem::is_regular_file(spm)) {
    std::vector<int64_t> identity(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) identity[static_cast<size_t>(i)] = i;
    text::SpmTokenizer sp(spm, identity);  // refuses a damaged model, naming it
    for (int32_t i = 0; i < std::min<int64_t>(V, 16); ++i)
      if (sp.piece(i) == "<unk>") t.unk = i;
    t.overrides = {"data.tokenizer.type=spm", "data.tokenizer.model=" + spm,
                   "data.tokenizer.vocab_order=" + order};
  } else {
    t.note =
        "no tokenizer.json (byte-level BPE) or tokenizer.model: the run cannot tokenize "
        "text until data.tokenizer names one";
  }
  return t;
}

}  // namespace

bool is_llama(const std::string& a) {
  return a == "LlamaForCausalLM" || a == "MistralForCausalLM" || a == "Qwen2ForCausalLM";
}

Mapped map_llama(Source& s) {
  const int64_t V = s.get_int("vocab_size"), D = s.get_int("hidden_size"),
                L = s.get_int("num_hidden_layers"), N = s.get_int("num_attention_heads"),
                F = s.get_int("intermediate_size"), P = s.get_int("max_position_embeddings");
  const int64_t Nkv = s.get_int("num_key_value_heads", N);
  if (V < text::Special::kCount) s.unsupported("vocab_size", "too small");
  if (N <= 0 || D % N != 0) s.unsupported("num_attention_heads", "it does not divide hidden_size");
  if (Nkv <= 0 || N % Nkv != 0)
    s.unsupported("num_key_value_heads", "it does not divide num_attention_heads");
  const int64_t H = D / N;
  if (s.get_int("head_dim", H) != H)
    s.unsupported("head_dim", "ropelab's head dimension is hidden_size / num_attention_heads");
  if (H % 2 != 0) s.unsupported("num_attention_heads", "RoPE needs an even head dimension");
  if (s.get_string("hidden_act", "silu") != "silu")
    s.unsupported("hidden_act", "the Llama layout's SwiGLU uses silu");
  const std::string arch = s.architecture();
  // Mistral's sliding_window defaults to 4096 in transformers; Qwen2 uses one only when asked.
  if (arch == "MistralForCausalLM") {
    if (!s.json().contains("sliding_window"))
      throw UserError(s.config_path() +
                      ": sliding_window: absent, which transformers reads as Mistral's default of "
                      "4096; ropelab has no sliding-window attention (a checkpoint without one "
                      "says null)");
    if (!s.json()["sliding_window"].is_null())
      s.unsupported("sliding_window", "ropelab has no sliding-window attention");
  }
  if (arch == "Qwen2ForCausalLM" && s.get_bool("use_sliding_window", false))
    s.unsupported("use_sliding_window", "ropelab has no sliding-window attention");
  if (s.get_int("pretraining_tp", 1) < 1) s.unsupported("pretraining_tp", "must be at least 1");
  // Biases: Llama's attention_bias (q, k, v and o) and mlp_bias; Qwen2 always has q, k, v.
  std::string bias;
  const bool attn_bias = s.get_bool("attention_bias", false),
             mlp_bias = s.get_bool("mlp_bias", false);
  if (arch == "Qwen2ForCausalLM")
    bias = "qkv";
  else if (attn_bias && mlp_bias)
    bias = "all";
  else if (!attn_bias && !mlp_bias)
    bias = "none";
  else
    s.unsupported(attn_bias ? "attention_bias" : "mlp_bias",
                  "model.bias has biases on all projections, on none, or on q, k and v only");
  // Llama's default is an untied output layer.
  const bool tied = s.get_bool("tie_word_embeddings", false);

  Mapped m;
  m.vocab = V;
  auto tok = tokenizer_of(s, V);
  m.vocab_order =
      text::special_first_order(V,
                                {token_id(s, "pad_token_id"), tok.unk, token_id(s, "bos_token_id"),
                                 token_id(s, "eos_token_id"), -1, -1, -1},
                                tok.fillers);
  m.overrides = {
      "task.type=clm",
      // The trained context (what --rope-scaling extends); one sequence a batch at that length.
      "task.seq_len=" + std::to_string(P),
      "train.batch_size=1",
      "model.arch=decoder",
      "model.d_model=" + std::to_string(D),
      "model.n_layers=" + std::to_string(L),
      "model.n_heads=" + std::to_string(N),
      "model.n_kv_heads=" + std::to_string(Nkv),
      "model.d_ff=" + std::to_string(F),
      "model.norm=pre",
      "model.norm_type=rmsnorm",
      "model.norm_eps=" + exact_number(s.get_double("rms_norm_eps", 1e-6)),
      "model.activation=swiglu",
      "model.bias=" + bias,
      "model.dropout=0",
      "model.attention.dropout=" + exact_number(s.get_double("attention_dropout", 0.0)),
      "model.init_std=" + exact_number(s.get_double("initializer_range", 0.02)),
      std::string("model.tie_embeddings=") + (tied ? "true" : "false"),
      "model.scale_embeddings=false",
      "model.position.type=rope",
      "model.position.pairing=half",
      "model.position.base=" + exact_number(s.get_double("rope_theta", 10000.0)),
  };
  for (auto& o : scaling_overrides(s, P)) m.overrides.push_back(std::move(o));
  for (auto& o : tok.overrides) m.overrides.push_back(std::move(o));
  m.note = tok.note;

  auto order = torch::tensor(m.vocab_order, torch::kLong);
  auto& w = m.weights;
  w["backbone.tok_emb.weight"] = s.take("model.embed_tokens.weight", {V, D}).index_select(0, order);
  const int64_t Dkv = Nkv * H;
  for (int64_t i = 0; i < L; ++i) {
    const std::string f = fmt::format("model.layers.{}.", i);
    const std::string t = fmt::format("backbone.decoder.layers.{}.", i);
    auto proj = [&](const std::string& from, const std::string& to, int64_t in, int64_t out,
                    bool with_bias) {
      w[to + ".weight"] = s.take(from + ".weight", {out, in});
      if (with_bias) w[to + ".bias"] = s.take(from + ".bias", {out});
    };
    const bool qkv_b = bias != "none", all_b = bias == "all";
    proj(f + "self_attn.q_proj", t + "self_attn.q_proj", D, D, qkv_b);
    proj(f + "self_attn.k_proj", t + "self_attn.k_proj", D, Dkv, qkv_b);
    proj(f + "self_attn.v_proj", t + "self_attn.v_proj", D, Dkv, qkv_b);
    proj(f + "self_attn.o_proj", t + "self_attn.o_proj", D, D, all_b);
    proj(f + "mlp.gate_proj", t + "gate", D, F, all_b);
    proj(f + "mlp.up_proj", t + "fc1", D, F, all_b);
    proj(f + "mlp.down_proj", t + "fc2", F, D, all_b);
    w[t + "norm1.weight"] = s.take(f + "input_layernorm.weight", {D});
    w[t + "norm2.weight"] = s.take(f + "post_attention_layernorm.weight", {D});
    s.skip(f + "self_attn.rotary_emb.inv_freq");  // a buffer older versions saved
  }
  w["backbone.decoder.final_norm.weight"] = s.take("model.norm.weight", {D});
  if (tied)
    s.skip("lm_head.weight");  // transformers ties it to the embeddings whatever the file holds
  else
    w["head.proj.weight"] = s.take("lm_head.weight", {V, D}).index_select(0, order);
  return m;
}

// ---- export

std::string llama_mismatch(const config::Config& c) {
  const auto& m = c.model;
  using namespace config;
  if (m.arch != Arch::kDecoder) return "the model is not a decoder";
  if (!std::holds_alternative<ClmTaskConfig>(c.task.opts))
    return std::string("task ") + c.task.type() + " has no such class";
  if (m.norm == Norm::kPost) return "post-norm layers";
  if (m.norm_type != NormType::kRmsNorm) return "LayerNorm (Llama's norm is RMSNorm)";
  if (m.activation != Activation::kSwiglu) return "a feed-forward other than SwiGLU";
  if (m.bias == LinearBias::kAll) return "biases on every projection";
  if (m.scale_embeddings) return "scaled embeddings";
  if (m.attention.kernel != AttentionKernel::kSoftmax) return "linear attention";
  const auto* r = std::get_if<RopeConfig>(&m.position.opts);
  if (r == nullptr) return std::string("position ") + m.position.type() + " (Llama's is rope)";
  if (r->pairing != RopePairing::kHalf) return "RoPE on interleaved pairs (Llama's are half-split)";
  if (r->rotary_dim != 0 || r->fraction != 1.0) return "partial RoPE";
  if (r->nope_every != 0 || !r->nope_layers.empty()) return "layers without positions";
  if (std::holds_alternative<NtkScaling>(r->scaling.opts))
    return "static NTK scaling (transformers has no such rope_type)";
  return "";
}

Exported export_llama(const ExportSource& s) {
  const auto& c = *s.config;
  const auto& m = c.model;
  const auto& r = std::get<config::RopeConfig>(m.position.opts);
  const bool qwen = m.bias == config::LinearBias::kQkv;
  const int64_t H = m.d_model / m.n_heads, Nkv = m.n_kv_heads > 0 ? m.n_kv_heads : m.n_heads;
  Exported e;
  auto& j = e.config;
  j["architectures"] = {qwen ? "Qwen2ForCausalLM" : "LlamaForCausalLM"};
  j["model_type"] = qwen ? "qwen2" : "llama";
  j["vocab_size"] = s.order.size();
  j["hidden_size"] = m.d_model;
  j["intermediate_size"] = m.d_ff;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = m.n_heads;
  j["num_key_value_heads"] = Nkv;
  j["head_dim"] = H;
  j["hidden_act"] = "silu";
  j["max_position_embeddings"] = c.task.seq_len;
  j["rms_norm_eps"] = m.norm_eps;
  j["rope_theta"] = r.base;
  j["rope_scaling"] = nullptr;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["attention_dropout"] = m.attention.dropout;
  j["initializer_range"] = m.init_std;
  j["bos_token_id"] = s.order[text::Special::kBos];
  j["eos_token_id"] = s.order[text::Special::kEos];
  j["pad_token_id"] = s.order[text::Special::kPad];
  j["torch_dtype"] = "float32";
  if (qwen) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = m.n_layers;
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  // rope_scaling, with max_position_embeddings / original length = factor where transformers
  // reads one from the other.
  std::visit(
      [&](const auto& sc) {
        using T = std::decay_t<decltype(sc)>;
        nlohmann::json rs;
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
          j["max_position_embeddings"] =
              static_cast<int64_t>(std::llround(sc.factor * static_cast<double>(sc.original_len)));
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
          j["original_max_position_embeddings"] = sc.original_len;
          j["max_position_embeddings"] =
              static_cast<int64_t>(std::llround(sc.factor * static_cast<double>(sc.original_len)));
        }
        if (!rs.is_null()) j["rope_scaling"] = rs;
      },
      r.scaling.opts);

  auto put = [&](const std::string& name, const at::Tensor& t) { e.tensors.emplace_back(name, t); };
  put("model.embed_tokens.weight", s.rows(s.at("backbone.tok_emb.weight")));
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string t = fmt::format("model.layers.{}.", i);
    const std::string f = fmt::format("backbone.decoder.layers.{}.", i);
    for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
      put(t + "self_attn." + p + ".weight", s.at(f + "self_attn." + p + ".weight"));
      if (qwen && std::string(p) != "o_proj")
        put(t + "self_attn." + p + ".bias", s.at(f + "self_attn." + p + ".bias"));
    }
    put(t + "mlp.gate_proj.weight", s.at(f + "gate.weight"));
    put(t + "mlp.up_proj.weight", s.at(f + "fc1.weight"));
    put(t + "mlp.down_proj.weight", s.at(f + "fc2.weight"));
    put(t + "input_layernorm.weight", s.at(f + "norm1.weight"));
    put(t + "post_attention_layernorm.weight", s.at(f + "norm2.weight"));
  }
  put("model.norm.weight", s.at("backbone.decoder.final_norm.weight"));
  if (!m.tie_embeddings) put("lm_head.weight", s.rows(s.at("head.proj.weight")));
  return e;
}

}  // namespace ropelab::hf
