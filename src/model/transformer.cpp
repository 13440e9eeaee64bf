#include "model/transformer.h"

#include <torch/nn/functional.h>

#include "util/error.h"

namespace ropelab::model {

namespace F = torch::nn::functional;

bool pre_norm(const config::ModelConfig& c) {
  return c.norm == "pre" || (c.norm == "auto" && c.arch == "decoder");
}

namespace {
torch::Tensor drop(const torch::Tensor& x, double p, bool training) {
  if (p <= 0 || !training) return x;
  return F::dropout(x, F::DropoutFuncOptions().p(p).training(true));
}
torch::nn::LayerNorm layer_norm(int64_t d) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(1e-5));
}
// LayerNorm in the norm's own dtype: under CPU autocast a sublayer's output is bf16, and
// libtorch 1.13's layer_norm rejects a bf16 input with fp32 weights.
torch::Tensor norm_of(torch::nn::LayerNorm& norm, const torch::Tensor& x) {
  return norm(x.to(norm->weight.scalar_type()));
}
}  // namespace

// ---- layer

LayerImpl::LayerImpl(const config::ModelConfig& c, bool cross)
    : pre_norm_(pre_norm(c)), dropout_(c.dropout), activation_(c.activation) {
  self_attn = register_module("self_attn", MultiHeadAttention(c.d_model, c.n_heads, c.attention));
  norm1 = register_module("norm1", layer_norm(c.d_model));
  if (cross) {
    // Cross-attention is always softmax: the linear kernel is a self-attention study.
    config::AttentionConfig ca = c.attention;
    ca.kernel = "softmax";
    cross_attn = register_module("cross_attn", MultiHeadAttention(c.d_model, c.n_heads, ca));
    norm3 = register_module("norm3", layer_norm(c.d_model));
  }
  fc1 = register_module("fc1", torch::nn::Linear(c.d_model, c.d_ff));
  fc2 = register_module("fc2", torch::nn::Linear(c.d_ff, c.d_model));
  norm2 = register_module("norm2", layer_norm(c.d_model));
}

torch::Tensor LayerImpl::ffn(const torch::Tensor& x) {
  auto h = fc1(x);
  h = activation_ == "gelu" ? F::gelu(h) : F::relu(h);
  return fc2(drop(h, dropout_, is_training()));
}

torch::Tensor LayerImpl::forward(torch::Tensor x, const AttnMask& self_mask,
                                 PositionModuleImpl* pos, int64_t offset,
                                 const torch::Tensor& memory, const AttnMask& mem_mask,
                                 KVCache* cache) {
  auto sublayer = [&](torch::nn::LayerNorm& norm, const auto& fn) {
    if (pre_norm_) return x + drop(fn(norm_of(norm, x)), dropout_, is_training());
    return norm_of(norm, x + drop(fn(x), dropout_, is_training()));
  };
  x = sublayer(norm1, [&](const torch::Tensor& h) {
    return self_attn->forward(h, h, self_mask, pos, offset, cache);
  });
  if (cross_attn) {
    x = sublayer(norm3, [&](const torch::Tensor& h) {
      return cross_attn->forward(h, memory, mem_mask, nullptr, 0, nullptr);
    });
  }
  return sublayer(norm2, [&](const torch::Tensor& h) { return ffn(h); });
}

// ---- stack

StackImpl::StackImpl(const config::ModelConfig& c, int64_t n_layers, bool causal, bool cross,
                     bool with_emb_norm)
    : causal_(causal), pre_norm_(pre_norm(c)), dropout_(c.dropout) {
  PositionDims dims{c.d_model, c.n_heads, c.d_model / c.n_heads, causal};
  position = register_module("position", make_position(c.position, dims));
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < n_layers; ++i) layers->push_back(Layer(c, cross));
  if (pre_norm_) final_norm = register_module("final_norm", layer_norm(c.d_model));
  if (with_emb_norm && !pre_norm_) emb_norm = register_module("emb_norm", layer_norm(c.d_model));
}

torch::Tensor StackImpl::forward(torch::Tensor x, const torch::Tensor& pad_BT,
                                 const torch::Tensor& memory, const torch::Tensor& mem_pad_BS,
                                 DecodeState* state) {
  int64_t offset = state != nullptr ? state->offset : 0;
  if (state != nullptr && state->layers.empty()) state->layers.resize(layers->size());
  x = position->add_to_input(x, offset);
  if (emb_norm) x = norm_of(emb_norm, x);
  x = drop(x, dropout_, is_training());
  AttnMask self_mask{pad_BT, causal_};
  if (state != nullptr && pad_BT.defined())
    throw std::invalid_argument("incremental decoding does not take a padding mask");
  AttnMask mem_mask{mem_pad_BS, false};
  for (size_t i = 0; i < layers->size(); ++i) {
    x = layers[i]->as<Layer>()->forward(x, self_mask, position.get(), offset, memory, mem_mask,
                                        state != nullptr ? &state->layers[i] : nullptr);
  }
  if (state != nullptr) state->offset += x.size(1);
  return final_norm ? norm_of(final_norm, x) : x;
}

// ---- the model

TransformerImpl::TransformerImpl(const config::ModelConfig& c, int64_t vocab, int64_t num_labels)
    : cfg_(c), vocab_(vocab) {
  tok_emb = register_module("tok_emb", torch::nn::Embedding(vocab, c.d_model));
  bool enc = c.arch == "encoder" || c.arch == "encdec";
  bool dec = c.arch == "decoder" || c.arch == "encdec";
  if (enc)
    encoder = register_module("encoder", Stack(c, c.n_layers, false, false, c.arch == "encoder"));
  if (dec) {
    int64_t n = c.arch == "encdec" && c.n_decoder_layers > 0 ? c.n_decoder_layers : c.n_layers;
    decoder = register_module("decoder", Stack(c, n, true, c.arch == "encdec", false));
  }
  if (dec && !c.tie_embeddings)
    lm_head = register_module(
        "lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.d_model, vocab).bias(false)));
  if (c.arch == "encoder") {
    seg_emb = register_module("seg_emb", torch::nn::Embedding(2, c.d_model));
    mlm_dense = register_module("mlm_dense", torch::nn::Linear(c.d_model, c.d_model));
    mlm_norm = register_module("mlm_norm", layer_norm(c.d_model));
    mlm_bias_ = register_parameter("mlm_bias", torch::zeros({vocab}));
    if (!c.tie_embeddings)
      lm_head = register_module(
          "lm_head", torch::nn::Linear(torch::nn::LinearOptions(c.d_model, vocab).bias(false)));
    if (num_labels >= 0) {
      pooler = register_module("pooler", torch::nn::Linear(c.d_model, c.d_model));
      classifier = register_module("classifier",
                                   torch::nn::Linear(c.d_model, std::max<int64_t>(1, num_labels)));
    }
  }
  init_weights(*this, c.init_std);
}

PositionModuleImpl& TransformerImpl::position() {
  return decoder ? *decoder->position : *encoder->position;
}

torch::Tensor TransformerImpl::embed(const torch::Tensor& tokens, const torch::Tensor& segments) {
  auto x = tok_emb(tokens);
  if (cfg_.scale_embeddings) x = x * std::sqrt(static_cast<double>(cfg_.d_model));
  if (seg_emb) x = x + seg_emb(segments.defined() ? segments : torch::zeros_like(tokens));
  return x;
}

torch::Tensor TransformerImpl::encode(const torch::Tensor& tokens, const torch::Tensor& pad,
                                      const torch::Tensor& segments) {
  if (!encoder) throw std::logic_error("encode() on a model without an encoder");
  return encoder->forward(embed(tokens, segments), pad, {}, {}, nullptr);
}

torch::Tensor TransformerImpl::decode(const torch::Tensor& tokens, const torch::Tensor& memory,
                                      const torch::Tensor& mem_pad, DecodeState* state) {
  if (!decoder) throw std::logic_error("decode() on a model without a decoder");
  return decoder->forward(embed(tokens, {}), {}, memory, mem_pad, state);
}

torch::Tensor TransformerImpl::lm_logits(const torch::Tensor& h) {
  return lm_head ? lm_head(h) : torch::matmul(h, tok_emb->weight.t());
}

torch::Tensor TransformerImpl::mlm_logits(const torch::Tensor& h) {
  auto x = norm_of(mlm_norm, F::gelu(mlm_dense(h)));
  auto w = lm_head ? lm_head->weight : tok_emb->weight;
  return torch::matmul(x, w.t()) + mlm_bias_;
}

torch::Tensor TransformerImpl::classify(const torch::Tensor& h) {
  if (!classifier) throw std::logic_error("classify() on a model without a classification head");
  auto cls = h.select(1, 0);
  auto pooled = torch::tanh(pooler(cls));
  return classifier(drop(pooled, cfg_.dropout, is_training()));
}

void init_weights(torch::nn::Module& m, double std) {
  torch::NoGradGuard ng;
  for (auto& item : m.named_parameters(/*recurse=*/true)) {
    const std::string& name = item.key();
    auto& p = item.value();
    bool is_norm = name.find("norm") != std::string::npos;
    bool is_bias = name.size() >= 4 && name.compare(name.size() - 4, 4, "bias") == 0;
    if (is_norm) {
      if (is_bias)
        p.zero_();
      else
        p.fill_(1.0);
    } else if (is_bias) {
      p.zero_();
    } else {
      p.normal_(0.0, std);
    }
  }
}

}  // namespace ropelab::model
