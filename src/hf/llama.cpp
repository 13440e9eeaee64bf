// Llama-layout decoders (Touvron et al. 2023): LlamaForCausalLM (also SmolLM, TinyLlama),
// MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM and SmolLM3ForCausalLM onto ropelab's
// decoder, a CLM run; also Olmo2ForCausalLM (OLMo 2, arXiv:2501.00656: QK-norm over the whole q
// and k projections, model.attention.qk_norm_over projection; each sublayer's output normalised
// before the residual add, model.norm reordered; rms_norm_eps default 1e-5). SmolLM3 (Hugging Face
// 2025) drops RoPE in some layers (no_rope_layers, or every no_rope_layer_interval-th:
// model.position.nope_layers); its defaults differ (tied output layer, base 2e6). Qwen3 (Yang et
// al. 2025, arXiv:2505.09388) adds QK-norm (model.attention.qk_norm: an RMSNorm over each head's q
// and k, one gain of head_dim shared by the heads, before the rotation) and an explicit head_dim
// (model.head_dim; transformers' default 128), which any of these classes may give.
// Phi3ForCausalLM (Abdin et al. 2024, arXiv:2404.14219) is the Llama layout with q, k and v in
// one fused qkv_proj and gate and up in one gate_up_proj (split on import, fused on export),
// LongRoPE's short and long factors (model.position.scaling longrope, original_len from the
// top-level original_max_position_embeddings), partial_rotary_factor (model.position.rotary_dim:
// the first rotary_dim channels of each head turn, theta over that width) and Mistral's
// sliding_window on every layer. Olmo3ForCausalLM (OLMo 3, Ai2 2025) is OLMo 2's layers in a
// layout of sliding-window and global layers (layer_types; by default every 4th layer global,
// window 4096) whose RoPE differs by layer type: the context extension (transformers 4's
// rope_scaling, 5's rope_parameters.full_attention) on the global layers only, the sliding ones
// with the plain base (model.layout.kinds.sliding_attention.position).
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
//   model.layers.i.self_attn.q_norm / k_norm  ...self_attn.q_norm / k_norm      (Qwen3)
//   model.layers.i.post_attention_layernorm   ...norm2
//   model.layers.i.mlp.gate_proj / up_proj / down_proj   ...gate / fc1 / fc2
//   model.norm                                backbone.decoder.final_norm
//   lm_head                                   head.proj (untied; rows re-numbered)
//   Phi-3: ...self_attn.qkv_proj (rows q, k, v)  ...self_attn.q/k/v_proj
//          ...mlp.gate_up_proj (rows gate, up)   ...gate / fc1
//
// The tokenizer: tokenizer.json when it is a byte-level BPE (tokenizers/bpe.h), else
// tokenizer.model (SentencePiece), both re-numbered through RUN/hf/vocab_order.json. Specials the
// checkpoint lacks (pad, cls, sep, mask; unk in a byte-level BPE) take rows past the tokenizer's
// end, then unused special tokens (<|reserved_special_token_k|>), then the lowest free ids.
// Sliding windows (Mistral's sliding_window; Qwen2's use_sliding_window, sliding_window,
// max_window_layers; transformers 5's layer_types) become model.layout: one kind
// sliding_attention {window: W} where every layer slides, else a pattern of full_attention and
// sliding_attention layers; export writes them back (MistralForCausalLM where every layer
// slides, Qwen2's keys and layer_types). Refused, naming the key: another hidden_act, an odd
// head_dim, biases on some projections but not others in a way
// model.bias cannot say (Qwen3's attention_bias), a rope_scaling type or key ropelab does not
// have (mscale, truncate false, ...), layer types other than full and sliding attention.
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <map>

#include "config/layout.h"
#include "config/loader.h"
#include "hf/family.h"
#include "hf/mapping.h"
#include "model/span.h"
#include "tokenizers/bpe.h"
#include "tokenizers/tokenizer.h"
#include "tokenizers/vocab_order.h"
#include "util/error.h"
#include "util/fs.h"

namespace ropelab::hf {

namespace {

// The width of each head: config.json's head_dim, else transformers' default for the class
// (Qwen3: 128; the others: hidden_size / num_attention_heads).
int64_t head_width(const Source& s, int64_t D, int64_t N) {
  const bool qwen3 = s.architecture() == "Qwen3ForCausalLM";
  if (!qwen3 && !s.present("head_dim") && D % N != 0)
    s.unsupported("num_attention_heads", "it does not divide hidden_size (and no head_dim)");
  const int64_t H = s.get_int("head_dim", qwen3 ? 128 : D / N);
  if (H <= 0 || H % 2 != 0) s.unsupported("head_dim", "RoPE needs a positive, even head dimension");
  return H;
}

// Each layer's attention span as transformers computes it ("full_attention" or
// "sliding_attention", its layer_types' names), the sliding layers' window, and which layers
// rotate (SmolLM3's NoPE layers do not).
//   Mistral: every layer slides when sliding_window is set (absent: transformers' default 4096),
//            none when it is null; it ignores layer_types, which must then agree.
//   Phi-3:   as Mistral, but absent is none.
//   Qwen2, Qwen3: a window only with use_sliding_window; layer_types where given, else the
//            layers from max_window_layers on (default 28) slide.
//   SmolLM3: no_rope_layers (1: RoPE, 0: NoPE), else a NoPE layer every
//            no_rope_layer_interval (4); a window only with use_sliding_window, on layer_types'
//            sliding layers, else on the NoPE layers.
//   OLMo 3:  layer_types, else every 4th layer (1-based) full_attention, the others sliding;
//            sliding_window's default 4096.
//   Llama:   no window; layer_types, where given, must be all full_attention.
// The mask is masking_utils' (current transformers, every attention implementation): query q
// sees key k when q - window < k <= q, the window's W keys including itself.
struct Spans {
  std::vector<std::string> types;
  std::vector<bool> rope;  // per layer
  int64_t window = 0;      // 0: no layer slides
  std::string note;
};

// SmolLM3's RoPE layers: no_rope_layers (at least one entry per layer), else every
// no_rope_layer_interval-th layer (1-based) without.
std::vector<bool> smollm3_rope(Source& s, int64_t L) {
  std::vector<bool> rope;
  const int64_t every = s.get_int("no_rope_layer_interval", 4);
  if (const nlohmann::json* given = s.use("no_rope_layers")) {
    if (!given->is_array() || static_cast<int64_t>(given->size()) < L)
      s.unsupported("no_rope_layers", "expected a 0 or 1 for each layer (num_hidden_layers)");
    for (int64_t i = 0; i < L; ++i) {
      const auto& v = (*given)[static_cast<size_t>(i)];
      if (v != 0 && v != 1) s.unsupported("no_rope_layers", "expected 0 (NoPE) or 1 (RoPE)");
      rope.push_back(v == 1);
    }
    return rope;
  }
  if (every < 1) s.unsupported("no_rope_layer_interval", "expected a positive interval");
  for (int64_t i = 0; i < L; ++i) rope.push_back((i + 1) % every != 0);
  return rope;
}

Spans spans_of(Source& s, int64_t L) {
  Spans sp;
  sp.rope.assign(static_cast<size_t>(L), true);
  const nlohmann::json* given = s.use("layer_types");
  if (given != nullptr) {
    if (!given->is_array() || static_cast<int64_t>(given->size()) != L)
      s.unsupported("layer_types", "expected one entry per layer (num_hidden_layers)");
    for (const auto& t : *given) {
      if (t != "full_attention" && t != "sliding_attention")
        s.unsupported("layer_types",
                      "this class's layers are full_attention or sliding_attention only");
      sp.types.push_back(t.get<std::string>());
    }
  }
  auto window_of = [&](const nlohmann::json& w) {
    if (!w.is_number_integer() || w.get<int64_t>() < 1)
      s.unsupported("sliding_window", "expected a positive number of keys, or null");
    return w.get<int64_t>();
  };
  const std::string arch = s.architecture();
  const bool any_sliding =
      std::find(sp.types.begin(), sp.types.end(), "sliding_attention") != sp.types.end();
  if (arch == "MistralForCausalLM" || arch == "Phi3ForCausalLM") {
    if (arch == "Phi3ForCausalLM") {  // Phi3Config's default: none
      if (const nlohmann::json* w = s.use("sliding_window")) sp.window = window_of(*w);
    } else if (!s.config().contains("sliding_window")) {
      s.use("sliding_window");
      sp.window = 4096;
      sp.note = "sliding_window absent: read as transformers' default for Mistral, 4096";
    } else if (const nlohmann::json* w = s.use("sliding_window")) {
      sp.window = window_of(*w);
    }
    const std::vector<std::string> all(static_cast<size_t>(L),
                                       sp.window > 0 ? "sliding_attention" : "full_attention");
    if (given != nullptr && sp.types != all)
      s.unsupported("layer_types",
                    arch +
                        " ignores layer_types and slides every layer when sliding_window is "
                        "set (none when it is null); these disagree with it");
    sp.types = all;
  } else if (arch == "Olmo3ForCausalLM") {
    if (given == nullptr)  // Olmo3Config's default: every 4th layer global
      for (int64_t i = 0; i < L; ++i)
        sp.types.push_back((i + 1) % 4 != 0 ? "sliding_attention" : "full_attention");
    const bool slides =
        std::find(sp.types.begin(), sp.types.end(), "sliding_attention") != sp.types.end();
    if (!s.config().contains("sliding_window")) {
      s.use("sliding_window");
      if (slides) sp.window = 4096, sp.note = "sliding_window absent: OLMo 3's default, 4096";
    } else if (const nlohmann::json* w = s.use("sliding_window")) {
      sp.window = window_of(*w);
    } else if (slides) {
      s.unsupported("sliding_window", "the sliding_attention layers need a window");
    }
  } else if (arch == "Qwen2ForCausalLM" || arch == "Qwen3ForCausalLM" ||
             arch == "SmolLM3ForCausalLM") {
    const bool smol = arch == "SmolLM3ForCausalLM";
    if (smol) sp.rope = smollm3_rope(s, L);
    const bool use = s.get_bool("use_sliding_window", false);
    const nlohmann::json* w = s.use("sliding_window");
    const int64_t first = smol ? 0 : s.get_int("max_window_layers", 28);
    if (use && w != nullptr) sp.window = window_of(*w);
    if (given == nullptr) {
      for (int64_t i = 0; i < L; ++i) {
        const bool slides = sp.window > 0 && (smol ? !sp.rope[static_cast<size_t>(i)] : i >= first);
        sp.types.push_back(slides ? "sliding_attention" : "full_attention");
      }
    } else if (any_sliding && sp.window == 0) {
      s.unsupported("layer_types",
                    "it names sliding_attention layers, but without use_sliding_window and a "
                    "sliding_window they have no window");
    }
  } else {
    if (any_sliding)
      s.unsupported("layer_types", arch + " has no sliding window (every layer is full_attention)");
    if (given == nullptr) sp.types.assign(static_cast<size_t>(L), "full_attention");
  }
  return sp;
}

// The spans as model overrides. Without a window: SmolLM3's NoPE layers as
// model.position.nope_layers. With one, model.layout: one kind everywhere when every layer is
// alike, else a pattern of every layer over its kinds, named as layer_types names them
// (sliding_attention: {window: W}), a NoPE layer's with _nope (its position: none).
std::vector<std::string> layout_overrides(const Spans& sp) {
  const auto sliding = std::count(sp.types.begin(), sp.types.end(), "sliding_attention");
  std::vector<std::string> o;
  if (sliding == 0) {
    std::string nope;
    for (size_t i = 0; i < sp.rope.size(); ++i)
      if (!sp.rope[i]) nope += (nope.empty() ? "" : ", ") + std::to_string(i);
    if (!nope.empty()) o.push_back("model.position.nope_layers=[" + nope + "]");
    return o;
  }
  std::vector<std::string> kinds;
  for (size_t i = 0; i < sp.types.size(); ++i) {
    const std::string kind = sp.types[i] + (sp.rope[i] ? "" : "_nope");
    if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) {
      const std::string K = "model.layout.kinds." + kind;
      o.push_back(sp.types[i] == "sliding_attention" ? K + ".window=" + std::to_string(sp.window)
                  : sp.rope[i]                       ? K + "={}"
                                                     : K + ".position={type: none}");
      if (sp.types[i] == "sliding_attention" && !sp.rope[i])
        o.push_back(K + ".position={type: none}");
    }
    kinds.push_back(kind);
  }
  if (std::all_of(kinds.begin(), kinds.end(), [&](const auto& k) { return k == kinds[0]; }))
    return o;
  std::string pattern;
  for (const auto& k : kinds) pattern += (pattern.empty() ? "" : ", ") + k;
  o.push_back("model.layout.pattern=[" + pattern + "]");
  return o;
}

// OLMo 3's RoPE: the global layers' (with the context extension) as model.position; where a
// layer slides and its RoPE differs (no extension), the sliding kind's own.
// In transformers 4's layout (rope_theta, rope_scaling) the versions disagree on OLMo 3's
// bases: 4.x gives every layer rope_theta (default 10000), 5.x reads it for the global layers and
// gives the sliding ones 500000, the default (it takes rope_theta out of the config once). Only
// where they agree is imported: rope_theta given, and 500000 where layers slide.
std::vector<std::string> olmo3_rope(const Source& s, int64_t P, const Spans& sp) {
  if (!s.present("rope_parameters")) {
    const nlohmann::json* theta = s.use("rope_theta");
    if (theta == nullptr || !theta->is_number())
      s.unsupported("rope_theta",
                    "OLMo 3's default base is 10000 in transformers 4 and 500000 in "
                    "5; give rope_theta (or rope_parameters per layer type)");
    if (sp.window > 0 && theta->get<double>() != 500000.0)
      s.unsupported("rope_theta",
                    "transformers 5 gives OLMo 3's sliding layers the base 500000 whatever "
                    "rope_theta says in transformers 4's layout, 4.x gives them rope_theta; "
                    "rope_parameters per layer type (transformers 5's layout) says it for both");
  }
  auto global = layer_type_rope_overrides(s, P, {"full_attention", "rope_theta", true, 1e4});
  if (sp.window == 0) return global;
  const auto local =
      layer_type_rope_overrides(s, P, {"sliding_attention", "rope_theta", false, 1e4});
  if (local != global)
    for (auto& o : under_kind(local, "sliding_attention")) global.push_back(std::move(o));
  return global;
}

// What each decoder layer of a checkpoint holds.
struct LayerShape {
  int64_t D, N, Nkv, H, F;
  std::string bias;   // model.bias: none, qkv or all
  bool qwen3, olmo2;  // QK-norm over each head (Qwen3) or the projections (OLMo 2)
  bool fused;         // Phi-3's qkv_proj and gate_up_proj
};

// Layer i's tensors under ropelab's names. OLMo 2 normalises each sublayer's output
// (post_attention_layernorm, post_feedforward_layernorm: norm1, norm2 of model.norm reordered);
// the others each sublayer's input (input_layernorm, post_attention_layernorm).
void take_layer(Source& s, const LayerShape& l, int64_t i, std::map<std::string, at::Tensor>& w) {
  const std::string f = fmt::format("model.layers.{}.", i);
  const std::string t = fmt::format("backbone.decoder.layers.{}.", i);
  auto proj = [&](const std::string& from, const std::string& to, int64_t in, int64_t out,
                  bool with_bias) {
    w[to + ".weight"] = s.take(from + ".weight", {out, in});
    if (with_bias) w[to + ".bias"] = s.take(from + ".bias", {out});
  };
  const bool qkv_b = l.bias != "none", all_b = l.bias == "all";
  const int64_t Dq = l.N * l.H, Dkv = l.Nkv * l.H;
  if (l.fused) {  // Phi-3 (no biases)
    auto qkv = s.take(f + "self_attn.qkv_proj.weight", {Dq + 2 * Dkv, l.D});
    w[t + "self_attn.q_proj.weight"] = qkv.narrow(0, 0, Dq).clone();
    w[t + "self_attn.k_proj.weight"] = qkv.narrow(0, Dq, Dkv).clone();
    w[t + "self_attn.v_proj.weight"] = qkv.narrow(0, Dq + Dkv, Dkv).clone();
    auto gate_up = s.take(f + "mlp.gate_up_proj.weight", {2 * l.F, l.D});
    w[t + "gate.weight"] = gate_up.narrow(0, 0, l.F).clone();
    w[t + "fc1.weight"] = gate_up.narrow(0, l.F, l.F).clone();
  } else {
    proj(f + "self_attn.q_proj", t + "self_attn.q_proj", l.D, Dq, qkv_b);
    proj(f + "self_attn.k_proj", t + "self_attn.k_proj", l.D, Dkv, qkv_b);
    proj(f + "self_attn.v_proj", t + "self_attn.v_proj", l.D, Dkv, qkv_b);
    proj(f + "mlp.gate_proj", t + "gate", l.D, l.F, all_b);
    proj(f + "mlp.up_proj", t + "fc1", l.D, l.F, all_b);
  }
  proj(f + "self_attn.o_proj", t + "self_attn.o_proj", Dq, l.D, all_b);
  if (l.qwen3 || l.olmo2) {
    w[t + "self_attn.q_norm.weight"] = s.take(f + "self_attn.q_norm.weight", {l.olmo2 ? Dq : l.H});
    w[t + "self_attn.k_norm.weight"] = s.take(f + "self_attn.k_norm.weight", {l.olmo2 ? Dkv : l.H});
  }
  proj(f + "mlp.down_proj", t + "fc2", l.F, l.D, all_b);
  w[t + "norm1.weight"] =
      s.take(f + (l.olmo2 ? "post_attention_layernorm.weight" : "input_layernorm.weight"), {l.D});
  w[t + "norm2.weight"] = s.take(
      f + (l.olmo2 ? "post_feedforward_layernorm.weight" : "post_attention_layernorm.weight"),
      {l.D});
  s.skip(f + "self_attn.rotary_emb.inv_freq");  // a buffer older versions saved
}

}  // namespace

static Mapped map_llama(Source& s) {
  const int64_t V = s.get_int("vocab_size"), D = s.get_int("hidden_size"),
                L = s.get_int("num_hidden_layers"), N = s.get_int("num_attention_heads"),
                F = s.get_int("intermediate_size"), P = s.get_int("max_position_embeddings");
  const int64_t Nkv = s.get_int("num_key_value_heads", N);
  if (V < tokenizers::Special::kCount) s.unsupported("vocab_size", "too small");
  if (Nkv <= 0 || N <= 0 || N % Nkv != 0)
    s.unsupported("num_key_value_heads", "it does not divide num_attention_heads");
  const std::string arch = s.architecture();
  const bool qwen3 = arch == "Qwen3ForCausalLM", olmo3 = arch == "Olmo3ForCausalLM",
             olmo2 = arch == "Olmo2ForCausalLM" || olmo3, phi3 = arch == "Phi3ForCausalLM";
  const int64_t H = head_width(s, D, N);
  if (s.get_string("hidden_act", "silu") != "silu")
    s.unsupported("hidden_act", "the Llama layout's SwiGLU uses silu");
  const Spans spans = spans_of(s, L);
  if (s.get_int("pretraining_tp", 1) < 1) s.unsupported("pretraining_tp", "must be at least 1");
  // Biases: Llama's attention_bias (q, k, v and o) and mlp_bias; Qwen2 always has q, k, v;
  // Phi-3 none (it has neither key).
  std::string bias;
  const bool attn_bias = !phi3 && s.get_bool("attention_bias", false),
             mlp_bias = !phi3 && s.get_bool("mlp_bias", false);
  if (arch == "Qwen2ForCausalLM")
    bias = "qkv";  // Qwen3's attention_bias (q, k, v and o, not the MLP) reads as Llama's
  else if (attn_bias && mlp_bias)
    bias = "all";
  else if (!attn_bias && !mlp_bias)
    bias = "none";
  else
    s.unsupported(attn_bias ? "attention_bias" : "mlp_bias",
                  "model.bias has biases on all projections, on none, or on q, k and v only");
  // Llama's default is an untied output layer.
  const bool smol = arch == "SmolLM3ForCausalLM";  // its defaults: tied, base 2e6
  const bool tied = s.get_bool("tie_word_embeddings", smol);

  Mapped m = decoder_vocabulary(s, V);
  const auto sizes = decoder_overrides(P, D, L, N, Nkv, H);
  m.overrides.insert(m.overrides.end(), sizes.begin(), sizes.end());
  m.overrides.insert(
      m.overrides.end(),
      {
          std::string("model.attention.qk_norm=") + (qwen3 || olmo2 ? "true" : "false"),
          std::string("model.attention.qk_norm_over=") + (olmo2 ? "projection" : "head"),
          "model.d_ff=" + std::to_string(F),
          std::string("model.norm=") + (olmo2 ? "reordered" : "pre"),
          "model.norm_type=rmsnorm",
          "model.norm_eps=" +
              exact_number(s.get_double("rms_norm_eps", olmo2 || phi3 ? 1e-5 : 1e-6)),
          "model.activation=swiglu",
          "model.bias=" + bias,
          "model.attention.dropout=" + exact_number(s.get_double("attention_dropout", 0.0)),
          "model.init_std=" + exact_number(s.get_double("initializer_range", 0.02)),
          std::string("model.tie_embeddings=") + (tied ? "true" : "false"),
          "model.scale_embeddings=false",
          "model.position.type=rope",
          "model.position.pairing=half",
      });
  // Phi-3's partial rotary: the first int(H * partial_rotary_factor) channels of each head.
  RopeClass rope;
  rope.default_base = smol ? 2e6 : 1e4;
  if (phi3) {
    rope.v4_partial_key = "partial_rotary_factor";
    rope.head_dim = H;
  }
  for (auto& o : olmo3 ? olmo3_rope(s, P, spans) : rope_overrides(s, P, rope))
    m.overrides.push_back(std::move(o));
  for (auto& o : layout_overrides(spans)) m.overrides.push_back(std::move(o));
  if (!spans.note.empty()) m.note += (m.note.empty() ? "" : "; ") + spans.note;

  auto order = torch::tensor(m.vocab_order, torch::kLong);
  auto& w = m.weights;
  w["backbone.tok_emb.weight"] = s.take("model.embed_tokens.weight", {V, D}).index_select(0, order);
  const LayerShape shape{D, N, Nkv, H, F, bias, qwen3, olmo2, phi3};
  for (int64_t i = 0; i < L; ++i) take_layer(s, shape, i, w);
  w["backbone.decoder.final_norm.weight"] = s.take("model.norm.weight", {D});
  if (tied)
    s.skip("lm_head.weight");  // transformers ties it to the embeddings whatever the file holds
  else
    w["head.proj.weight"] = s.take("lm_head.weight", {V, D}).index_select(0, order);
  return m;
}

// ---- export

namespace {

// A run's layout as the spans of transformers' layer_types; `why` says what no Llama-layout
// class has (a chunk, a temperature, a kind's own positions, two windows). With
// `unscaled_sliding` (OLMo 3), a sliding kind's positions may be model.position's without its
// context extension.
Spans spans_of(const config::Config& c, std::string& why, bool unscaled_sliding = false) {
  const auto& m = c.model;
  Spans sp;
  if (m.layout.kinds.empty()) {
    sp.types.assign(static_cast<size_t>(m.n_layers), "full_attention");
    return sp;
  }
  const auto flat = config::flat_keys(c);
  const std::string model_pos = "model.position.";
  for (const auto& [name, kind] : m.layout.kinds) {
    const std::string K = "model.layout.kinds." + name;
    const model::Span span = model::Span::of(kind, true);
    if (span.chunk > 0) why = "chunked attention (" + K + ".chunk)";
    if (kind.temperature.scale != 0) why = "a query temperature (" + K + ".temperature)";
    if (span.window > 0 && sp.window != 0 && span.window != sp.window)
      why = "sliding windows of two sizes (" + K + ".window)";
    if (span.window > 0) sp.window = span.window;
    const bool unscaled = unscaled_sliding && span.window > 0;
    for (const auto& [key, value] : flat)
      if (key.rfind(model_pos, 0) == 0) {
        const std::string rest = key.substr(model_pos.size());
        if (unscaled && rest.rfind("scaling.", 0) == 0) continue;
        auto it = flat.find(K + ".position." + rest);
        if (it == flat.end() || it->second != value)
          why = "positions of its own in layer kind " + name + " (" + K + ".position)";
      }
    auto scaled = [&](const std::string& prefix) {
      auto it = flat.find(prefix + "scaling.type");
      return it != flat.end() && it->second != "none";
    };
    if (unscaled && scaled(K + ".position.") && scaled(model_pos))
      why = "a context extension on the sliding layers (" + K +
            ".position.scaling: OLMo 3 extends the global layers only)";
    if (!why.empty()) return sp;
  }
  for (const auto& kind : config::layer_kinds(m.layout, m.n_layers))
    sp.types.push_back(model::Span::of(m.layout.kinds.at(kind), true).window > 0
                           ? "sliding_attention"
                           : "full_attention");
  return sp;
}

// The leading full_attention layers of `types` (Qwen2's max_window_layers), or -1 when a full
// layer follows a sliding one (which max_window_layers cannot say).
int64_t leading_full(const std::vector<std::string>& types) {
  const auto first = std::find(types.begin(), types.end(), "sliding_attention");
  if (std::find(first, types.end(), "full_attention") != types.end()) return -1;
  return first - types.begin();
}

// Qwen2's and Qwen3's window keys: use_sliding_window, sliding_window, max_window_layers, and
// layer_types where a layer slides or the checkpoint had them. Without a window, an imported
// checkpoint's own (unused) sliding_window and max_window_layers stay.
void put_qwen_spans(const ExportSource& s, const Spans& spans, nlohmann::json& j) {
  const int64_t L = static_cast<int64_t>(spans.types.size());
  const bool slides = spans.window > 0;
  const nlohmann::json& o = s.origin;
  const bool kept = !slides && o.is_object() && o.contains("max_window_layers");
  // Where the checkpoint's layer_types are these, its max_window_layers (which transformers then
  // does not read) stays as it was.
  const bool same_types = o.is_object() && o.contains("max_window_layers") &&
                          o.value("layer_types", nlohmann::json()) == nlohmann::json(spans.types);
  j["use_sliding_window"] = slides;
  j["sliding_window"] = slides ? nlohmann::json(spans.window)
                        : kept ? o.value("sliding_window", nlohmann::json())
                               : nlohmann::json();
  const int64_t lead = leading_full(spans.types);
  if (slides && lead < 0 && s.form == HfConfigForm::kV4)
    throw UserError(
        "transformers 4's Qwen2 and Qwen3 slide the layers from max_window_layers on: this "
        "layout has a global layer after a sliding one; export in transformers 5's config form");
  const bool v4 = s.form == HfConfigForm::kV4;  // which reads max_window_layers, not layer_types
  j["max_window_layers"] = slides && v4         ? nlohmann::json(lead)
                           : kept || same_types ? o["max_window_layers"]
                           : slides             ? nlohmann::json(lead < 0 ? L : lead)
                                                : nlohmann::json(L);
  if (slides || (o.is_object() && o.contains("layer_types"))) j["layer_types"] = spans.types;
}

// SmolLM3's NoPE layers (no_rope_layers: 1 RoPE, 0 NoPE; the checkpoint's interval kept), no
// window, no biases.
void put_smollm3_layers(const ExportSource& s, const config::RopeConfig& r, int64_t L,
                        nlohmann::json& j) {
  std::vector<int> rope;
  for (int64_t i = 0; i < L; ++i)
    rope.push_back(!(r.nope_every > 0 && (i + 1) % r.nope_every == 0) &&
                   std::find(r.nope_layers.begin(), r.nope_layers.end(), i) == r.nope_layers.end());
  j["no_rope_layers"] = rope;
  j["no_rope_layer_interval"] = s.origin.is_object() && s.origin.contains("no_rope_layer_interval")
                                    ? s.origin["no_rope_layer_interval"]
                                    : nlohmann::json(4);
  j["use_sliding_window"] = false;
  j["sliding_window"] = nullptr;
  if (s.origin.is_object() && s.origin.contains("layer_types"))
    j["layer_types"] = std::vector<std::string>(static_cast<size_t>(L), "full_attention");
}

}  // namespace

static std::string llama_mismatch(const config::Config& c) {
  const auto& m = c.model;
  using namespace config;
  if (m.arch != Arch::kDecoder) return "the model is not a decoder";
  if (!std::holds_alternative<ClmTaskConfig>(c.task.opts))
    return std::string("task ") + c.task.type() + " has no such class";
  if (m.norm == Norm::kPost) return "post-norm layers";
  if (m.parallel_residual)
    return "a parallel residual (GPT-NeoX's; Llama's sublayers are sequential)";
  if (m.norm == Norm::kSandwich) return "four norms a layer (model.norm sandwich: Gemma 3's)";
  if (m.attention.scale_dim > 0 && m.attention.scale_dim != static_cast<double>(head_dim_of(m)))
    return "a score scale of its own (model.attention.scale_dim: Gemma 3's)";
  const bool olmo2 = m.norm == Norm::kReordered,
             whole = m.attention.qk_norm && m.attention.qk_norm_over == QkNormOver::kProjection;
  if (olmo2 != whole)
    return olmo2 ? "norms after the sublayers without QK-norm over the projections (OLMo 2 "
                   "has both)"
                 : "QK-norm over the whole projections without OLMo 2's norms after the "
                   "sublayers";
  if (olmo2 && m.bias != LinearBias::kNone) return "OLMo's layers with biases (it has none)";
  if (m.norm_type == NormType::kLayerNorm) return "LayerNorm (Llama's norm is RMSNorm)";
  if (m.norm_type == NormType::kRmsNormOffset) return "RMSNorm with (1 + gain) (Gemma's)";
  if (m.activation != Activation::kSwiglu) return "a feed-forward other than SwiGLU";
  if (m.bias == LinearBias::kAll) return "biases on every projection";
  if (m.attention.qk_norm && m.bias != LinearBias::kNone)
    return "QK-norm with q/k/v biases (Qwen3's attention has no biases)";
  if (m.scale_embeddings) return "scaled embeddings";
  if (m.attention.kernel != AttentionKernel::kSoftmax) return "linear attention";
  const auto* r = std::get_if<RopeConfig>(&m.position.opts);
  if (r == nullptr) return std::string("position ") + m.position.type() + " (Llama's is rope)";
  if (r->pairing != RopePairing::kHalf) return "RoPE on interleaved pairs (Llama's are half-split)";
  if (r->fraction != 1.0) return "p-RoPE (the fastest pairs only; transformers has no such class)";
  const bool nope = r->nope_every != 0 || !r->nope_layers.empty();
  if (r->rotary_dim != 0) {  // Phi-3's partial_rotary_factor
    const int64_t H = head_dim_of(m);
    if (m.bias != LinearBias::kNone || m.attention.qk_norm || olmo2 || nope)
      return "partial RoPE with biases, QK-norm or NoPE layers (Phi-3's class has none)";
    if (static_cast<int64_t>(static_cast<double>(H) * (static_cast<double>(r->rotary_dim) /
                                                       static_cast<double>(H))) != r->rotary_dim)
      return "a rotary width that partial_rotary_factor cannot say";
  }
  if (nope && (m.bias != LinearBias::kNone || m.attention.qk_norm))
    return "layers without positions (SmolLM3's, which has no q/k/v biases or QK-norm)";
  if (nope && !m.layout.kinds.empty()) return "layers without positions in a hybrid layout";
  if (std::holds_alternative<NtkScaling>(r->scaling.opts))
    return "static NTK scaling (transformers has no such rope_type)";
  std::string why;
  const auto spans = spans_of(c, why, olmo2);
  if (!why.empty()) return why;
  const auto sliding = std::count(spans.types.begin(), spans.types.end(), "sliding_attention");
  if (m.bias != LinearBias::kQkv && !m.attention.qk_norm && sliding != 0 && sliding != m.n_layers)
    return "a mix of sliding-window and global layers (MistralForCausalLM slides every layer or "
           "none; Qwen2's and Qwen3's classes have q/k/v biases or QK-norm)";
  return "";
}

static Exported export_llama(const ExportSource& s) {
  const auto& c = *s.config;
  const auto& m = c.model;
  const auto& r = std::get<config::RopeConfig>(m.position.opts);
  const bool olmo2 = m.norm == config::Norm::kReordered;
  const bool qwen3 = !olmo2 && m.attention.qk_norm,
             qwen = !olmo2 && !qwen3 && m.bias == config::LinearBias::kQkv;
  const bool smol = !olmo2 && !qwen3 && !qwen && (r.nope_every != 0 || !r.nope_layers.empty());
  std::string why;
  const Spans spans = spans_of(c, why, olmo2);
  const bool slides = spans.window > 0;
  auto origin_is = [&](const char* cls) {
    return s.origin.is_object() &&
           s.origin.value("architectures", nlohmann::json::array()) == nlohmann::json::array({cls});
  };
  // OLMo 3 where layers slide, and for an OLMo 3 checkpoint's run.
  const bool olmo3 = olmo2 && (slides || origin_is("Olmo3ForCausalLM"));
  // Phi-3 for partial RoPE and for a Phi-3 checkpoint's run; Mistral where every layer slides,
  // and for a Mistral checkpoint's run (each its class again).
  const bool phi3 =
      !olmo2 && !qwen && !qwen3 && !smol && (r.rotary_dim != 0 || origin_is("Phi3ForCausalLM"));
  const bool mistral =
      !olmo2 && !qwen && !qwen3 && !smol && !phi3 && (slides || origin_is("MistralForCausalLM"));
  Exported e;
  auto& j = e.config;
  j["architectures"] = {olmo3     ? "Olmo3ForCausalLM"
                        : olmo2   ? "Olmo2ForCausalLM"
                        : phi3    ? "Phi3ForCausalLM"
                        : qwen3   ? "Qwen3ForCausalLM"
                        : qwen    ? "Qwen2ForCausalLM"
                        : smol    ? "SmolLM3ForCausalLM"
                        : mistral ? "MistralForCausalLM"
                                  : "LlamaForCausalLM"};
  j["model_type"] = olmo3     ? "olmo3"
                    : olmo2   ? "olmo2"
                    : phi3    ? "phi3"
                    : qwen3   ? "qwen3"
                    : qwen    ? "qwen2"
                    : smol    ? "smollm3"
                    : mistral ? "mistral"
                              : "llama";
  put_decoder_keys(s, j);
  j["hidden_act"] = "silu";
  if (qwen || qwen3) {
    put_qwen_spans(s, spans, j);
    if (qwen3) j["attention_bias"] = false;
  } else if (mistral || phi3) {
    j["sliding_window"] = slides ? nlohmann::json(spans.window) : nlohmann::json();
    if (phi3) {
      j["partial_rotary_factor"] =
          r.rotary_dim == 0
              ? 1.0
              : static_cast<double>(r.rotary_dim) / static_cast<double>(config::head_dim_of(m));
      // Phi-3 reads LongRoPE's original length at the top level in either form.
      if (const auto* lr = std::get_if<config::LongRopeScaling>(&r.scaling.opts))
        j["original_max_position_embeddings"] = lr->original_len;
    }
  } else if (olmo2) {
    j["attention_bias"] = false;
    if (olmo3) {
      j["layer_types"] = spans.types;
      j["sliding_window"] = slides ? nlohmann::json(spans.window)
                                   : s.origin.value("sliding_window", nlohmann::json(4096));
    }
  } else {
    if (smol) put_smollm3_layers(s, r, m.n_layers, j);
    j["attention_bias"] = false;
    j["mlp_bias"] = false;
  }
  put_rope(r, s.form, j);
  if (olmo3 && s.form == HfConfigForm::kV5) {  // per layer type: the extension on full only
    const nlohmann::json full = j["rope_parameters"];
    j["rope_parameters"] = {
        {"full_attention", full},
        {"sliding_attention", {{"rope_type", "default"}, {"rope_theta", r.base}}}};
  }

  auto put = [&](const std::string& name, const at::Tensor& t) { e.tensors.emplace_back(name, t); };
  put("model.embed_tokens.weight", s.rows(s.at("backbone.tok_emb.weight")));
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string t = fmt::format("model.layers.{}.", i);
    const std::string f = fmt::format("backbone.decoder.layers.{}.", i);
    if (phi3) {
      put(t + "self_attn.qkv_proj.weight",
          torch::cat({s.at(f + "self_attn.q_proj.weight"), s.at(f + "self_attn.k_proj.weight"),
                      s.at(f + "self_attn.v_proj.weight")}));
      put(t + "self_attn.o_proj.weight", s.at(f + "self_attn.o_proj.weight"));
      put(t + "mlp.gate_up_proj.weight",
          torch::cat({s.at(f + "gate.weight"), s.at(f + "fc1.weight")}));
    } else {
      for (const char* p : {"q_proj", "k_proj", "v_proj", "o_proj"}) {
        put(t + "self_attn." + p + ".weight", s.at(f + "self_attn." + p + ".weight"));
        if (qwen && std::string(p) != "o_proj")
          put(t + "self_attn." + p + ".bias", s.at(f + "self_attn." + p + ".bias"));
      }
      put(t + "mlp.gate_proj.weight", s.at(f + "gate.weight"));
      put(t + "mlp.up_proj.weight", s.at(f + "fc1.weight"));
    }
    if (qwen3 || olmo2)
      for (const char* p : {"q_norm", "k_norm"})
        put(t + "self_attn." + p + ".weight", s.at(f + "self_attn." + p + ".weight"));
    put(t + "mlp.down_proj.weight", s.at(f + "fc2.weight"));
    put(t + (olmo2 ? "post_attention_layernorm.weight" : "input_layernorm.weight"),
        s.at(f + "norm1.weight"));
    put(t + (olmo2 ? "post_feedforward_layernorm.weight" : "post_attention_layernorm.weight"),
        s.at(f + "norm2.weight"));
  }
  put("model.norm.weight", s.at("backbone.decoder.final_norm.weight"));
  if (!m.tie_embeddings) put("lm_head.weight", s.rows(s.at("head.proj.weight")));
  return e;
}

const Family& llama_family() {
  static const Family f{
      "Llama-layout decoders",
      config::Arch::kDecoder,
      {
          "LlamaForCausalLM",
          "MistralForCausalLM",
          "Qwen2ForCausalLM",
          "Qwen3ForCausalLM",
          "SmolLM3ForCausalLM",
          "Olmo2ForCausalLM",
          "Olmo3ForCausalLM",
          "Phi3ForCausalLM",
      },
      "LlamaForCausalLM",
      map_llama,
      llama_mismatch,
      export_llama,
      nullptr,
  };
  return f;
}

}  // namespace ropelab::hf
