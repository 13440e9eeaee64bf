// GPT-NeoX (Black et al. 2022, arXiv:2204.06745) and Pythia (Biderman et al. 2023,
// arXiv:2304.01373): GPTNeoXForCausalLM onto ropelab's decoder, a CLM run. The suite the
// encoding-swap studies train: RoPE on part of each head, and a parallel residual.
//
// A pre-norm decoder with LayerNorm (layer_norm_eps) and biases on every projection
// (model.bias all); the feed-forward dense_4h_to_h(act(dense_h_to_4h(x))) with hidden_act gelu
// (erf), gelu_new (the tanh form: model.activation gelu_tanh) or relu. use_parallel_residual
// (the default) adds both sublayers of the same input, x + attn(ln1(x)) + mlp(ln2(x))
// (model.parallel_residual); without it they run in turn. RoPE (model.position rope, pairing
// half) turns the first R = int(head * rotary_pct) channels of each head (model.position.
// rotary_dim), theta_i = base^(-2i/R); transformers 4 names the fraction rotary_pct (default
// 0.25) and the base rotary_emb_base (10000), transformers 5 keeps both in rope_parameters
// (partial_rotary_factor, rope_theta), with any rope_type (model.position.scaling). The fused
// query_key_value holds, per head, that head's q, k and v rows ([N, 3, H] x D): split on import,
// fused again on export. Names (a bare GPTNeoXModel has no gpt_neox. prefix):
//
//   gpt_neox.embed_in                           backbone.tok_emb (rows re-numbered)
//   gpt_neox.layers.i.input_layernorm           backbone.decoder.layers.i.norm1
//   gpt_neox.layers.i.post_attention_layernorm  ...norm2
//   gpt_neox.layers.i.attention.query_key_value ...self_attn.q_proj / k_proj / v_proj
//   gpt_neox.layers.i.attention.dense           ...self_attn.o_proj
//   gpt_neox.layers.i.mlp.dense_h_to_4h / dense_4h_to_h   ...fc1 / fc2
//   gpt_neox.final_layer_norm                   backbone.decoder.final_norm
//   embed_out                                   head.proj (untied, the default)
//
// The buffers older versions saved (attention.bias, masked_bias, rotary_emb.inv_freq) are
// skipped. The tokenizer: tokenizer.json (byte-level BPE, hf/decoder.cpp); Pythia pads its
// embeddings past the tokenizer's end, which gives the specials it lacks their rows. Refused,
// naming the key: attention_bias false (the MLP keeps its biases: model.bias cannot say that),
// a rotary width int(head * fraction) that is odd, a top-level rope_theta that disagrees with
// the base transformers reads.
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include "hf/family.h"
#include "hf/mapping.h"
#include "tokenizers/tokenizer.h"
#include "util/error.h"

namespace ropelab::hf {

namespace {

// Layer i's tensors under ropelab's names; query_key_value's rows per head [q; k; v] split.
void take_neox_layer(Source& s, const std::string& p, int64_t i, int64_t D, int64_t N, int64_t F,
                     std::map<std::string, at::Tensor>& w) {
  const std::string f = fmt::format("{}layers.{}.", p, i);
  const std::string t = fmt::format("backbone.decoder.layers.{}.", i);
  const int64_t H = D / N;
  auto proj = [&](const std::string& from, const std::string& to, int64_t in, int64_t out) {
    w[to + ".weight"] = s.take(from + ".weight", {out, in});
    w[to + ".bias"] = s.take(from + ".bias", {out});
  };
  const auto qkv_NkHD =
      s.take(f + "attention.query_key_value.weight", {3 * D, D}).view({N, 3, H, D});
  const auto qkv_NkH = s.take(f + "attention.query_key_value.bias", {3 * D}).view({N, 3, H});
  const char* names[] = {"q_proj", "k_proj", "v_proj"};
  for (int64_t j = 0; j < 3; ++j) {
    const std::string to = t + "self_attn." + names[j];
    w[to + ".weight"] = qkv_NkHD.select(1, j).reshape({D, D}).contiguous();
    w[to + ".bias"] = qkv_NkH.select(1, j).reshape({D}).contiguous();
  }
  proj(f + "attention.dense", t + "self_attn.o_proj", D, D);
  proj(f + "mlp.dense_h_to_4h", t + "fc1", D, F);
  proj(f + "mlp.dense_4h_to_h", t + "fc2", F, D);
  take_layer_norm(s, f + "input_layernorm", t + "norm1", D, w);
  take_layer_norm(s, f + "post_attention_layernorm", t + "norm2", D, w);
  for (const char* buffer :
       {"attention.bias", "attention.masked_bias", "attention.rotary_emb.inv_freq"})
    s.skip(f + buffer);  // buffers older versions saved
}

// RoPE's overrides: rope_overrides with GPT-NeoX's transformers 4 names. A top-level rope_theta
// (which transformers 4.4x also wrote, a copy of rotary_emb_base; 5 does not read it) must say
// the base that is read.
std::vector<std::string> neox_rope(const Source& s, int64_t P, int64_t H) {
  RopeClass rope;
  rope.v4_theta_key = "rotary_emb_base";
  rope.v4_partial_key = "rotary_pct";
  rope.default_partial = 0.25;
  rope.head_dim = H;
  auto o = rope_overrides(s, P, rope);
  if (const nlohmann::json* theta = s.use("rope_theta")) {
    const std::string base = o.front().substr(o.front().find('=') + 1);
    if (!theta->is_number() || exact_number(theta->get<double>()) != base)
      s.unsupported("rope_theta",
                    "GPT-NeoX reads its base from rotary_emb_base or "
                    "rope_parameters (" +
                        base + "); this copy disagrees");
  }
  o.insert(o.begin(), {"model.position.type=rope", "model.position.pairing=half"});
  return o;
}

}  // namespace

static Mapped map_neox(Source& s) {
  const int64_t V = s.get_int("vocab_size"), D = s.get_int("hidden_size"),
                L = s.get_int("num_hidden_layers"), N = s.get_int("num_attention_heads"),
                F = s.get_int("intermediate_size"), P = s.get_int("max_position_embeddings");
  if (V < tokenizers::Special::kCount) s.unsupported("vocab_size", "too small");
  if (N <= 0 || D % N != 0) s.unsupported("num_attention_heads", "it does not divide hidden_size");
  if (!s.get_bool("attention_bias", true))
    s.unsupported("attention_bias",
                  "GPT-NeoX's feed-forward keeps its biases without the attention's, which "
                  "model.bias (all, none, qkv) cannot say");
  const bool tied = s.get_bool("tie_word_embeddings", false);
  const auto act = plain_activation(s, "hidden_act", "gelu");
  const bool parallel = s.get_bool("use_parallel_residual", true);

  Mapped m = decoder_vocabulary(s, V, {{"bos_token_id", 0}, {"eos_token_id", 2}});
  const auto sizes = decoder_overrides(P, D, L, N, N, D / N, s.get_double("hidden_dropout", 0.0));
  m.overrides.insert(m.overrides.end(), sizes.begin(), sizes.end());
  m.overrides.insert(
      m.overrides.end(),
      {
          "model.d_ff=" + std::to_string(F),
          "model.norm=pre",
          "model.norm_type=layernorm",
          "model.norm_eps=" + exact_number(s.get_double("layer_norm_eps", 1e-5)),
          std::string("model.activation=") + config::to_string(act),
          "model.bias=all",
          std::string("model.parallel_residual=") + (parallel ? "true" : "false"),
          "model.attention.dropout=" + exact_number(s.get_double("attention_dropout", 0.0)),
          "model.init_std=" + exact_number(s.get_double("initializer_range", 0.02)),
          std::string("model.tie_embeddings=") + (tied ? "true" : "false"),
          "model.scale_embeddings=false",
      });
  for (auto& o : neox_rope(s, P, D / N)) m.overrides.push_back(std::move(o));

  const std::string p = s.has("gpt_neox.embed_in.weight") ? "gpt_neox." : "";
  auto order = torch::tensor(m.vocab_order, torch::kLong);
  auto& w = m.weights;
  w["backbone.tok_emb.weight"] = s.take(p + "embed_in.weight", {V, D}).index_select(0, order);
  for (int64_t i = 0; i < L; ++i) take_neox_layer(s, p, i, D, N, F, w);
  take_layer_norm(s, p + "final_layer_norm", "backbone.decoder.final_norm", D, w);
  if (tied)
    s.skip("embed_out.weight");  // transformers ties it to embed_in whatever the file holds
  else
    w["head.proj.weight"] = s.take("embed_out.weight", {V, D}).index_select(0, order);
  return m;
}

// ---- export

static std::string neox_mismatch(const config::Config& c) {
  const auto& m = c.model;
  using namespace config;
  if (auto why = gpt_style_mismatch(c, "GPT-NeoX"); !why.empty()) return why;
  const int64_t H = head_dim_of(m);
  if (m.attention.scale_dim != 0 && m.attention.scale_dim != static_cast<double>(H))
    return "a score scale of its own (model.attention.scale_dim)";
  const auto* r = std::get_if<RopeConfig>(&m.position.opts);
  if (r == nullptr) return std::string("position ") + m.position.type() + " (GPT-NeoX's is rope)";
  if (r->pairing != RopePairing::kHalf)
    return "RoPE on interleaved pairs (GPT-NeoX's are half-split)";
  if (r->fraction != 1.0) return "p-RoPE (the fastest pairs only; transformers has no such class)";
  if (r->nope_every != 0 || !r->nope_layers.empty()) return "layers without positions";
  if (std::holds_alternative<NtkScaling>(r->scaling.opts))
    return "static NTK scaling (transformers has no such rope_type)";
  const int64_t R = r->rotary_dim == 0 ? H : r->rotary_dim;
  if (static_cast<int64_t>(static_cast<double>(H) *
                           (static_cast<double>(R) / static_cast<double>(H))) != R)
    return "a rotary width that partial_rotary_factor cannot say";
  return "";
}

static Exported export_neox(const ExportSource& s) {
  const auto& c = *s.config;
  const auto& m = c.model;
  const auto& r = std::get<config::RopeConfig>(m.position.opts);
  const int64_t D = m.d_model, N = m.n_heads, H = config::head_dim_of(m);
  const double frac =
      r.rotary_dim == 0 ? 1.0 : static_cast<double>(r.rotary_dim) / static_cast<double>(H);
  Exported e;
  auto& j = e.config;
  j["architectures"] = {"GPTNeoXForCausalLM"};
  j["model_type"] = "gpt_neox";
  j["vocab_size"] = s.order.size();
  j["hidden_size"] = D;
  j["num_hidden_layers"] = m.n_layers;
  j["num_attention_heads"] = N;
  j["intermediate_size"] = m.d_ff;
  j["hidden_act"] = hf_activation(m.activation, s.origin, "hidden_act");
  j["max_position_embeddings"] = c.task.seq_len;
  j["layer_norm_eps"] = m.norm_eps;
  j["use_parallel_residual"] = m.parallel_residual;
  j["attention_bias"] = true;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["hidden_dropout"] = m.dropout;
  j["attention_dropout"] = m.attention.dropout;
  j["initializer_range"] = m.init_std;
  put_special_ids(s, j);
  j[s.form == HfConfigForm::kV4 ? "torch_dtype" : "dtype"] = "float32";
  put_rope(r, s.form, j);
  if (s.form == HfConfigForm::kV4) {  // GPT-NeoX's names in transformers 4
    j["rotary_emb_base"] = j["rope_theta"];
    j.erase("rope_theta");
    j["rotary_pct"] = frac;
  } else {
    j["rope_parameters"]["partial_rotary_factor"] = frac;
  }

  auto put = [&](const std::string& name, const at::Tensor& t) { e.tensors.emplace_back(name, t); };
  put("gpt_neox.embed_in.weight", s.rows(s.at("backbone.tok_emb.weight")));
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string t = fmt::format("gpt_neox.layers.{}.", i);
    const std::string f = fmt::format("backbone.decoder.layers.{}.", i);
    const std::string a = f + "self_attn.";
    auto fused = [&](const char* what, const std::vector<int64_t>& per_head) {
      std::vector<at::Tensor> parts;
      for (const char* p : {"q_proj.", "k_proj.", "v_proj."})
        parts.push_back(s.at(a + p + what).view(per_head));
      return torch::stack(parts, 1).reshape({3 * D, -1}).squeeze(1).contiguous();
    };
    put(t + "attention.query_key_value.weight", fused("weight", {N, H, D}));
    put(t + "attention.query_key_value.bias", fused("bias", {N, H}));
    put(t + "attention.dense.weight", s.at(a + "o_proj.weight"));
    put(t + "attention.dense.bias", s.at(a + "o_proj.bias"));
    put(t + "mlp.dense_h_to_4h.weight", s.at(f + "fc1.weight"));
    put(t + "mlp.dense_h_to_4h.bias", s.at(f + "fc1.bias"));
    put(t + "mlp.dense_4h_to_h.weight", s.at(f + "fc2.weight"));
    put(t + "mlp.dense_4h_to_h.bias", s.at(f + "fc2.bias"));
    put_layer_norm(s, f + "norm1", t + "input_layernorm", e);
    put_layer_norm(s, f + "norm2", t + "post_attention_layernorm", e);
  }
  put_layer_norm(s, "backbone.decoder.final_norm", "gpt_neox.final_layer_norm", e);
  if (!m.tie_embeddings) put("embed_out.weight", s.rows(s.at("head.proj.weight")));
  return e;
}

const Family& neox_family() {
  static const Family f{
      "GPT-NeoX",
      config::Arch::kDecoder,
      {"GPTNeoXForCausalLM"},
      "GPTNeoXForCausalLM",
      map_neox,
      neox_mismatch,
      export_neox,
      nullptr,
  };
  return f;
}

}  // namespace ropelab::hf
