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
// The tokenizer: tokenizer.json when it is a byte-level BPE (tokenizers/bpe.h), else
// tokenizer.model (SentencePiece), both re-numbered through RUN/hf/vocab_order.json. Specials the
// checkpoint lacks (pad, cls, sep, mask; unk in a byte-level BPE) take rows past the tokenizer's
// end, then unused special tokens (<|reserved_special_token_k|>), then the lowest free ids.
// Refused, naming the key: another hidden_act, a head_dim other than hidden_size/heads, a
// sliding window (Mistral's sliding_window, Qwen2's use_sliding_window), biases on some
// projections but not others in a way model.bias cannot say, a rope_scaling type or key
// ropelab does not have (mscale, truncate false, ...).
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "hf/mapping.h"
#include "tokenizers/bpe.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::hf {

namespace {

// The first id of a config.json token id entry (an int, or a list of them as Llama 3.1's
// eos_token_id), or -1.
int64_t token_id(const Source& s, const char* key) {
  const nlohmann::json* v = s.use(key);
  if (v == nullptr) return -1;
  if (v->is_array() && !v->empty() && (*v)[0].is_number_integer()) return (*v)[0].get<int64_t>();
  if (!v->is_number_integer()) throw UserError(s.config_path() + ": " + key + ": not an id");
  return v->get<int64_t>();
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
  const std::string json_file = s.dir() + "/tokenizer.json", spm = s.dir() + "/tokenizer.model";
  bool byte_level = false;
  if (std::filesystem::is_regular_file(json_file)) {
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(fs::read_file(json_file));
    } catch (const nlohmann::json::exception& e) {
      throw UserError(json_file + ": not valid JSON (" + e.what() + ")");
    }
    const nlohmann::json model = j.is_object() ? j.value("model", nlohmann::json()) : nullptr;
    byte_level = model.is_object() && model.value("type", std::string()) == "BPE" &&
                 !model.value("byte_fallback", false);
  }
  const std::string order = s.dir() + "/vocab_order.json";  // written by the import
  if (byte_level) {
    tokenizers::BpeTokenizer bpe(json_file);  // refuses what it cannot run, naming the key
    if (bpe.size() > V)
      throw UserError(fmt::format("{}: {} ids, more than config.json's vocab_size {}", json_file,
                                  bpe.size(), V));
    for (int64_t i = bpe.size(); i < V; ++i) t.fillers.push_back(i);
    std::vector<int64_t> unused;
    for (const auto& a : bpe.added_tokens())
      if (a.special) unused.push_back(a.id);
    std::sort(unused.begin(), unused.end());
    t.fillers.insert(t.fillers.end(), unused.begin(), unused.end());
    t.overrides = {"data.tokenizer.type=bpe", "data.tokenizer.model=" + json_file,
                   "data.tokenizer.vocab_order=" + order};
  } else if (std::filesystem::is_regular_file(spm)) {
    std::vector<int64_t> identity(static_cast<size_t>(V));
    for (int64_t i = 0; i < V; ++i) identity[static_cast<size_t>(i)] = i;
    tokenizers::SpmTokenizer sp(spm, identity);  // refuses a damaged model, naming it
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

// The checkpoint's ids for ropelab's specials (pad, unk, bos, eos, cls, sep, mask), from
// config.json and the tokenizer's unknown token. config.json may give one id to several of them
// (Qwen2.5's bos = eos, a pad = eos): the first of eos, bos, pad keeps it (ropelab's LM data
// ends each document with eos), and a later one takes an id no text produces, which `shared`
// reports. bos or eos on the tokenizer's unknown token is refused naming both.
std::array<int64_t, 7> llama_specials(const Source& s, int64_t V, int64_t unk,
                                      std::string& shared) {
  std::array<int64_t, 7> ids = {-1, unk, -1, -1, -1, -1, -1};
  std::map<int64_t, std::string> owner;
  if (unk >= 0) owner[unk] = "the tokenizer's unknown token";
  const std::pair<const char*, int32_t> keys[] = {{"eos_token_id", tokenizers::Special::kEos},
                                                  {"bos_token_id", tokenizers::Special::kBos},
                                                  {"pad_token_id", tokenizers::Special::kPad}};
  for (const auto& [key, slot] : keys) {
    const int64_t id = token_id(s, key);
    if (id < 0) continue;
    if (id >= V)
      throw UserError(fmt::format("{}: {} = {} is outside the vocabulary (vocab_size {})",
                                  s.config_path(), key, id, V));
    if (id == unk && slot != tokenizers::Special::kPad)
      throw UserError(
          fmt::format("{}: {} = {} is tokenizer.model's unknown token <unk>: a "
                      "sequence boundary cannot be an unknown character",
                      s.config_path(), key, id));
    auto it = owner.find(id);
    if (it == owner.end()) {
      owner[id] = key;
      ids[static_cast<size_t>(slot)] = id;
      continue;
    }
    shared += fmt::format(
        "{}{} shares id {} with {}, as the checkpoint defines them (ropelab's own {} slot takes "
        "an id no text produces)",
        shared.empty() ? "" : "; ", key, id, it->second,
        slot == tokenizers::Special::kBos ? "bos" : "pad");
  }
  return ids;
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
  if (V < tokenizers::Special::kCount) s.unsupported("vocab_size", "too small");
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
  // Mistral's sliding_window defaults to 4096 in transformers; Qwen2 uses one only when asked
  // (then sliding_window and max_window_layers say where).
  if (arch == "MistralForCausalLM") {
    if (!s.config().contains("sliding_window"))
      throw UserError(s.config_path() +
                      ": sliding_window: absent, which transformers reads as Mistral's default of "
                      "4096; the import does not map a sliding window onto model.layout yet (a "
                      "checkpoint without one says null)");
    if (s.use("sliding_window") != nullptr)
      s.unsupported("sliding_window",
                    "the import does not map a sliding window onto model.layout yet");
  }
  if (arch == "Qwen2ForCausalLM") {
    if (s.get_bool("use_sliding_window", false))
      s.unsupported("use_sliding_window",
                    "the import does not map a sliding window onto model.layout yet");
    s.use("sliding_window");  // without use_sliding_window, unread
    s.use("max_window_layers");
  }
  // transformers 5's layer_types: every layer full attention (no window).
  if (const nlohmann::json* types = s.use("layer_types")) {
    if (!types->is_array() || static_cast<int64_t>(types->size()) != L)
      s.unsupported("layer_types", "expected one entry per layer (num_hidden_layers)");
    for (const auto& t : *types)
      if (t != "full_attention")
        s.unsupported(
            "layer_types",
            "the import does not map a sliding window onto model.layout yet (every layer must "
            "be full_attention)");
  }
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
  std::string shared;
  m.vocab_order =
      tokenizers::special_first_order(V, llama_specials(s, V, tok.unk, shared), tok.fillers);
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
  };
  for (auto& o : rope_overrides(s, P)) m.overrides.push_back(std::move(o));
  for (auto& o : tok.overrides) m.overrides.push_back(std::move(o));
  m.note = tok.note;
  if (!shared.empty()) m.note += (m.note.empty() ? "" : "; ") + shared;

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
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["attention_dropout"] = m.attention.dropout;
  j["initializer_range"] = m.init_std;
  // The checkpoint's own special ids where the run was imported (two may share an id, and
  // eos may be a list), else the tokens at ropelab's.
  const std::pair<const char*, int32_t> specials[] = {{"bos_token_id", tokenizers::Special::kBos},
                                                      {"eos_token_id", tokenizers::Special::kEos},
                                                      {"pad_token_id", tokenizers::Special::kPad}};
  for (const auto& [key, slot] : specials)
    j[key] = s.origin.is_object() && s.origin.contains(key) ? s.origin[key]
                                                            : nlohmann::json(s.order[slot]);
  j[s.form == HfConfigForm::kV4 ? "torch_dtype" : "dtype"] = "float32";
  if (qwen) {
    j["use_sliding_window"] = false;
    j["sliding_window"] = nullptr;
    j["max_window_layers"] = m.n_layers;
  } else {
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  put_rope(r, s.form, j);

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
