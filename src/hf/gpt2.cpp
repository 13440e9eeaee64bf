// GPT-2 (Radford et al. 2019, "Language Models are Unsupervised Multitask Learners"):
// GPT2LMHeadModel onto ropelab's decoder, a CLM run: the learned absolute positions of the
// position-encoding ablations' baseline (model.position learned, max_len n_positions).
//
// A pre-norm decoder: x = wte[ids] + wpe[t]; per layer x += attn(ln_1(x)), x += mlp(ln_2(x));
// ln_f; logits against wte (tied) or lm_head. LayerNorm with a shift (layer_norm_epsilon),
// biases on every projection (model.bias all), the feed-forward c_proj(act(c_fc(x))) with
// activation_function gelu_new (GELU's tanh form: model.activation gelu_tanh), gelu or relu,
// width n_inner (4 n_embd when null). Scores q.k / sqrt(head) (scale_attn_weights false: q.k,
// model.attention.scale_dim 1). transformers' Conv1D keeps its weights as [in, out]: ropelab's
// Linear holds the transpose. Names (the hub's first checkpoints have no transformer. prefix):
//
//   transformer.wte / wpe                  backbone.tok_emb (rows re-numbered) / decoder.position
//   transformer.h.i.ln_1 / ln_2            backbone.decoder.layers.i.norm1 / norm2
//   transformer.h.i.attn.c_attn [D, 3D]    ...self_attn.q_proj / k_proj / v_proj (columns q, k, v)
//   transformer.h.i.attn.c_proj            ...self_attn.o_proj
//   transformer.h.i.mlp.c_fc / c_proj      ...fc1 / fc2
//   transformer.ln_f                       backbone.decoder.final_norm
//   lm_head                                head.proj (untied only)
//
// The buffers older versions saved (attn.bias: the causal mask, attn.masked_bias) are skipped.
// The tokenizer: tokenizer.json (byte-level BPE, hf/decoder.cpp); bos and eos default to 50256
// (<|endoftext|>). Refused, naming the key: scale_attn_by_inverse_layer_idx (scores scaled per
// layer), cross-attention, another activation.
#include <spdlog/fmt/fmt.h>
#include <torch/torch.h>

#include "hf/family.h"
#include "hf/mapping.h"
#include "tokenizers/tokenizer.h"
#include "util/error.h"

namespace ropelab::hf {

namespace {

// Layer i's tensors under ropelab's names, Conv1D's [in, out] weights transposed.
void take_gpt2_layer(Source& s, const std::string& p, int64_t i, int64_t D, int64_t F,
                     std::map<std::string, at::Tensor>& w) {
  const std::string f = fmt::format("{}h.{}.", p, i);
  const std::string t = fmt::format("backbone.decoder.layers.{}.", i);
  auto conv1d = [&](const std::string& from, const std::string& to, int64_t in, int64_t out) {
    w[to + ".weight"] = s.take(from + ".weight", {in, out}).t().contiguous();
    w[to + ".bias"] = s.take(from + ".bias", {out});
  };
  const auto qkv = s.take(f + "attn.c_attn.weight", {D, 3 * D}).t();
  const auto qkv_b = s.take(f + "attn.c_attn.bias", {3 * D});
  const char* names[] = {"q_proj", "k_proj", "v_proj"};
  for (int64_t j = 0; j < 3; ++j) {
    const std::string to = t + "self_attn." + names[j];
    w[to + ".weight"] = qkv.narrow(0, j * D, D).contiguous();
    w[to + ".bias"] = qkv_b.narrow(0, j * D, D).clone();
  }
  conv1d(f + "attn.c_proj", t + "self_attn.o_proj", D, D);
  conv1d(f + "mlp.c_fc", t + "fc1", D, F);
  conv1d(f + "mlp.c_proj", t + "fc2", F, D);
  take_layer_norm(s, f + "ln_1", t + "norm1", D, w);
  take_layer_norm(s, f + "ln_2", t + "norm2", D, w);
  s.skip(f + "attn.bias");  // buffers older versions saved
  s.skip(f + "attn.masked_bias");
}

}  // namespace

static Mapped map_gpt2(Source& s) {
  // GPT2Config's defaults: GPT-2 small.
  const int64_t V = s.get_int("vocab_size", 50257), D = s.get_int("n_embd", 768),
                L = s.get_int("n_layer", 12), N = s.get_int("n_head", 12),
                P = s.get_int("n_positions", 1024);
  if (V < tokenizers::Special::kCount) s.unsupported("vocab_size", "too small");
  if (N <= 0 || D % N != 0) s.unsupported("n_head", "it does not divide n_embd");
  const nlohmann::json* inner = s.use("n_inner");
  if (inner != nullptr && (!inner->is_number_integer() || inner->get<int64_t>() < 1))
    s.unsupported("n_inner", "expected a positive width, or null (4 n_embd)");
  const int64_t F = inner != nullptr ? inner->get<int64_t>() : 4 * D;
  if (s.get_bool("scale_attn_by_inverse_layer_idx", false))
    s.unsupported("scale_attn_by_inverse_layer_idx",
                  "ropelab scales every layer's scores alike (no 1 / (layer + 1))");
  s.get_bool("reorder_and_upcast_attn", false);  // float32 scores either way: same function
  const bool tied = s.get_bool("tie_word_embeddings", true);
  const auto act = plain_activation(s, "activation_function", "gelu_new");

  // Dropout as transformers trains GPT-2: resid_pdrop (model.dropout, which ropelab also puts on
  // the embeddings) and attn_pdrop.
  const double resid = s.get_double("resid_pdrop", 0.1), embd = s.get_double("embd_pdrop", 0.1);
  const std::map<std::string, int64_t> specials = {{"bos_token_id", 50256},
                                                   {"eos_token_id", 50256}};
  Mapped m = decoder_vocabulary(s, V, V > 50256 ? specials : std::map<std::string, int64_t>{});
  if (embd != resid)
    m.note += fmt::format("{}embd_pdrop {} read as resid_pdrop {} (model.dropout covers both)",
                          m.note.empty() ? "" : "; ", embd, resid);
  const auto sizes = decoder_overrides(P, D, L, N, N, D / N, resid);
  m.overrides.insert(m.overrides.end(), sizes.begin(), sizes.end());
  m.overrides.insert(m.overrides.end(),
                     {
                         "model.d_ff=" + std::to_string(F),
                         "model.norm=pre",
                         "model.norm_type=layernorm",
                         "model.norm_eps=" + exact_number(s.get_double("layer_norm_epsilon", 1e-5)),
                         std::string("model.activation=") + config::to_string(act),
                         "model.bias=all",
                         "model.attention.dropout=" + exact_number(s.get_double("attn_pdrop", 0.1)),
                         "model.attention.scale_dim=" +
                             std::string(s.get_bool("scale_attn_weights", true) ? "0" : "1"),
                         "model.init_std=" + exact_number(s.get_double("initializer_range", 0.02)),
                         std::string("model.tie_embeddings=") + (tied ? "true" : "false"),
                         "model.scale_embeddings=false",
                         "model.position.type=learned",
                         "model.position.max_len=" + std::to_string(P),
                     });

  const std::string p = s.has("transformer.wte.weight") ? "transformer." : "";
  auto order = torch::tensor(m.vocab_order, torch::kLong);
  auto& w = m.weights;
  w["backbone.tok_emb.weight"] = s.take(p + "wte.weight", {V, D}).index_select(0, order);
  w["backbone.decoder.position.weight"] = s.take(p + "wpe.weight", {P, D});
  for (int64_t i = 0; i < L; ++i) take_gpt2_layer(s, p, i, D, F, w);
  take_layer_norm(s, p + "ln_f", "backbone.decoder.final_norm", D, w);
  if (tied)
    s.skip("lm_head.weight");  // transformers ties it to wte whatever the file holds
  else
    w["head.proj.weight"] = s.take("lm_head.weight", {V, D}).index_select(0, order);
  return m;
}

// ---- export

static std::string gpt2_mismatch(const config::Config& c) {
  const auto& m = c.model;
  using namespace config;
  if (auto why = gpt_style_mismatch(c, "GPT-2"); !why.empty()) return why;
  if (!std::holds_alternative<LearnedConfig>(m.position.opts))
    return std::string("position ") + m.position.type() + " (GPT-2's are learned)";
  if (m.parallel_residual) return "a parallel residual (GPT-2's sublayers are sequential)";
  const double H = static_cast<double>(head_dim_of(m));
  if (m.attention.scale_dim != 0 && m.attention.scale_dim != H && m.attention.scale_dim != 1)
    return "a score scale other than 1 / sqrt(head) or none (model.attention.scale_dim)";
  return "";
}

static Exported export_gpt2(const ExportSource& s) {
  const auto& c = *s.config;
  const auto& m = c.model;
  const int64_t D = m.d_model;
  const auto& pos = s.at("backbone.decoder.position.weight");
  Exported e;
  auto& j = e.config;
  j["architectures"] = {"GPT2LMHeadModel"};
  j["model_type"] = "gpt2";
  j["vocab_size"] = s.order.size();
  j["n_embd"] = D;
  j["n_layer"] = m.n_layers;
  j["n_head"] = m.n_heads;
  j["n_positions"] = pos.size(0);
  j["n_inner"] = m.d_ff;
  j["activation_function"] = hf_activation(m.activation, s.origin, "activation_function");
  j["layer_norm_epsilon"] = m.norm_eps;
  j["scale_attn_weights"] = m.attention.scale_dim != 1;
  j["scale_attn_by_inverse_layer_idx"] = false;
  j["reorder_and_upcast_attn"] = false;
  j["tie_word_embeddings"] = m.tie_embeddings;
  j["resid_pdrop"] = m.dropout;
  j["embd_pdrop"] = m.dropout;
  j["attn_pdrop"] = m.attention.dropout;
  j["initializer_range"] = m.init_std;
  put_special_ids(s, j);
  j[s.form == HfConfigForm::kV4 ? "torch_dtype" : "dtype"] = "float32";

  auto put = [&](const std::string& name, const at::Tensor& t) { e.tensors.emplace_back(name, t); };
  put("transformer.wte.weight", s.rows(s.at("backbone.tok_emb.weight")));
  put("transformer.wpe.weight", pos);
  for (int64_t i = 0; i < m.n_layers; ++i) {
    const std::string t = fmt::format("transformer.h.{}.", i);
    const std::string f = fmt::format("backbone.decoder.layers.{}.", i);
    put_layer_norm(s, f + "norm1", t + "ln_1", e);
    const std::string a = f + "self_attn.";
    put(t + "attn.c_attn.weight", torch::cat({s.at(a + "q_proj.weight"), s.at(a + "k_proj.weight"),
                                              s.at(a + "v_proj.weight")})
                                      .t()
                                      .contiguous());
    put(t + "attn.c_attn.bias",
        torch::cat({s.at(a + "q_proj.bias"), s.at(a + "k_proj.bias"), s.at(a + "v_proj.bias")}));
    put(t + "attn.c_proj.weight", s.at(a + "o_proj.weight").t().contiguous());
    put(t + "attn.c_proj.bias", s.at(a + "o_proj.bias"));
    put_layer_norm(s, f + "norm2", t + "ln_2", e);
    put(t + "mlp.c_fc.weight", s.at(f + "fc1.weight").t().contiguous());
    put(t + "mlp.c_fc.bias", s.at(f + "fc1.bias"));
    put(t + "mlp.c_proj.weight", s.at(f + "fc2.weight").t().contiguous());
    put(t + "mlp.c_proj.bias", s.at(f + "fc2.bias"));
  }
  put_layer_norm(s, "backbone.decoder.final_norm", "transformer.ln_f", e);
  if (!m.tie_embeddings) put("lm_head.weight", s.rows(s.at("head.proj.weight")));
  return e;
}

const Family& gpt2_family() {
  static const Family f{
      "GPT-2",  config::Arch::kDecoder, {"GPT2LMHeadModel"}, "GPT2LMHeadModel",
      map_gpt2, gpt2_mismatch,          export_gpt2,         nullptr,
  };
  return f;
}

}  // namespace ropelab::hf
