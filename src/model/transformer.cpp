#include "model/transformer.h"

#include <algorithm>

#include "config/layout.h"

#include "model/dropout.h"
#include "model/linear.h"
#include "util/error.h"

namespace ropelab::model {

bool pre_norm(const config::ModelConfig& c) {
  return c.norm == config::Norm::kPre || c.norm == config::Norm::kSandwich ||
         (c.norm == config::Norm::kAuto && c.arch == config::Arch::kDecoder);
}

// OLMo 2's placement: x + norm(f(x)), and a final norm as pre-norm stacks have.
bool reordered(const config::ModelConfig& c) { return c.norm == config::Norm::kReordered; }
// Gemma 2's and 3's: x + post_norm(f(norm(x))).
bool sandwich(const config::ModelConfig& c) { return c.norm == config::Norm::kSandwich; }

int64_t embedding_width(const config::ModelConfig& c) {
  return c.embedding_size > 0 ? c.embedding_size : c.d_model;
}

torch::nn::LayerNorm layer_norm(int64_t d, double eps) {
  return torch::nn::LayerNorm(torch::nn::LayerNormOptions({d}).eps(eps));
}

torch::Tensor norm_of(torch::nn::LayerNorm& norm, const torch::Tensor& x) {
  return norm(x.to(norm->weight.scalar_type()));
}

torch::nn::Linear linear(int64_t in, int64_t out, bool bias) {
  return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(bias));
}

namespace {
torch::Tensor drop(const torch::Tensor& x, double p, bool training) {
  return model::dropout(x, p, training);
}
}  // namespace

// ---- layer

LayerImpl::LayerImpl(const config::ModelConfig& c, bool cross)
    : pre_norm_(pre_norm(c)),
      reordered_(reordered(c)),
      parallel_(c.parallel_residual && !cross),
      dropout_(c.dropout),
      activation_(c.activation) {
  auto norm = [&] { return Norm(c.d_model, c.norm_eps, c.norm_type); };
  self_attn = register_module(
      "self_attn", MultiHeadAttention(c.d_model, c.n_heads, c.attention, c.n_kv_heads, c.bias,
                                      c.norm_eps, c.head_dim, c.norm_type));
  norm1 = register_module("norm1", norm());
  if (sandwich(c)) post_norm1 = register_module("post_norm1", norm());
  if (cross) {
    // Cross-attention is always softmax: the linear kernel is a self-attention study.
    config::AttentionConfig ca = c.attention;
    ca.kernel = config::AttentionKernel::kSoftmax;
    cross_attn =
        register_module("cross_attn", MultiHeadAttention(c.d_model, c.n_heads, ca, 0, c.bias,
                                                         c.norm_eps, c.head_dim, c.norm_type));
    norm3 = register_module("norm3", norm());
    if (sandwich(c)) post_norm3 = register_module("post_norm3", norm());
  }
  const bool ffn_bias = c.bias == config::LinearBias::kAll;
  fc1 = register_module("fc1", linear(c.d_model, c.d_ff, ffn_bias));
  if (config::is_gated(c.activation))
    gate = register_module("gate", linear(c.d_model, c.d_ff, ffn_bias));
  fc2 = register_module("fc2", linear(c.d_ff, c.d_model, ffn_bias));
  norm2 = register_module("norm2", norm());
  if (sandwich(c)) post_norm2 = register_module("post_norm2", norm());
}

torch::Tensor LayerImpl::ffn(const torch::Tensor& x) {
  if (gate) {  // fc2(act(gate(x)) * fc1(x)): SwiGLU, GEGLU
    auto g = model::linear(gate, x);
    g = activation_ == config::Activation::kSwiglu  ? torch::silu(g)
        : activation_ == config::Activation::kGeglu ? torch::gelu(g)
                                                    : torch::gelu(g, "tanh");
    return model::linear(fc2, model::dropout(g * model::linear(fc1, x), dropout_, is_training()));
  }
  return model::linear(
      fc2, model::act_dropout_after_linear(fc1, x, activation_, dropout_, is_training()));
}

torch::Tensor LayerImpl::forward(torch::Tensor x, const AttnMask& self_mask,
                                 const PositionContext& pos, int64_t offset,
                                 const torch::Tensor& memory, const AttnMask& mem_mask,
                                 KVCache* cache, KVCache* cross_cache) {
  auto sublayer = [&](Norm& norm, Norm& post, const auto& fn) {
    if (post || pre_norm_) {  // x + [post](f(norm(x))): the norm's node also hands x on
      auto [h, residual] = norm->matmul_input_and_residual(x);
      return model::dropout_add(residual, post ? post(fn(h)) : fn(h), dropout_, is_training());
    }
    if (reordered_) return model::dropout_add(x, norm(fn(x)), dropout_, is_training());
    return norm(model::dropout_add(x, fn(x), dropout_, is_training()));
  };
  if (parallel_) {  // GPT-NeoX: x + attn(norm1(x)) + ffn(norm2(x))
    auto h = norm1->matmul_input(x);
    auto a = self_attn->forward(h, h, self_mask, pos, offset, cache);
    auto f = ffn(norm2->matmul_input(x));
    return model::dropout_add(model::dropout_add(x, a, dropout_, is_training()), f, dropout_,
                              is_training());
  }
  x = sublayer(norm1, post_norm1, [&](const torch::Tensor& h) {
    return self_attn->forward(h, h, self_mask, pos, offset, cache);
  });
  if (cross_attn) {
    x = sublayer(norm3, post_norm3, [&](const torch::Tensor& h) {
      return cross_attn->forward(h, memory, mem_mask, PositionContext{}, 0, cross_cache);
    });
  }
  return sublayer(norm2, post_norm2, [&](const torch::Tensor& h) { return ffn(h); });
}

// ---- stack

StackImpl::StackImpl(const config::ModelConfig& c, int64_t n_layers, bool causal, bool cross,
                     bool with_emb_norm)
    : causal_(causal), pre_norm_(pre_norm(c) || reordered(c)), dropout_(c.dropout) {
  PositionDims dims{c.d_model, c.n_heads, config::head_dim_of(c), causal, n_layers};
  // One position module per kind of layer (model.layout), named `position` when there is one
  // kind (the names of a model without a layout), `position_<kind>` otherwise.
  const auto layer_kinds = config::layer_kinds(c.layout, n_layers);
  const auto names = config::distinct_kinds(layer_kinds);
  // A data-dependent family's per-layer parameters are its kind's layers', numbered within the
  // kind (one kind: the stack's layer numbers).
  for (const auto& name : layer_kinds) {
    const auto same = std::count(kind_of_layer_.begin(), kind_of_layer_.end(),
                                 std::find(names.begin(), names.end(), name) - names.begin());
    kind_of_layer_.push_back(std::find(names.begin(), names.end(), name) - names.begin());
    index_in_kind_.push_back(same);
  }
  for (const auto& name : names) {
    Kind k;
    const config::LayerKindConfig* spec = name.empty() ? nullptr : &c.layout.kinds.at(name);
    dims.n_layers = std::count(layer_kinds.begin(), layer_kinds.end(), name);
    k.module = register_module(names.size() == 1 ? "position" : "position_" + name,
                               make_position(spec != nullptr ? spec->position : c.position, dims));
    if (spec != nullptr) {
      k.window = spec->window.value_or(0);
      k.chunk = spec->chunk.value_or(0);
      k.temperature = spec->temperature;
    }
    kinds_.push_back(std::move(k));
  }
  position = kinds_[0].module;
  layers = register_module("layers", torch::nn::ModuleList());
  for (int64_t i = 0; i < n_layers; ++i) layers->push_back(Layer(c, cross));
  if (pre_norm_)
    final_norm = register_module("final_norm", Norm(c.d_model, c.norm_eps, c.norm_type));
  const int64_t E = embedding_width(c);
  if (with_emb_norm && !pre_norm_)
    emb_norm = register_module("emb_norm", Norm(E, c.norm_eps, c.norm_type));
  if (E != c.d_model) emb_proj = register_module("emb_proj", torch::nn::Linear(E, c.d_model));
}

namespace {
// Each token's position in its document: t minus the index of its document's first token
// (document ids do not decrease along a row).
torch::Tensor positions_in_documents(const torch::Tensor& doc_BT) {
  const int64_t T = doc_BT.size(1);
  auto t = torch::arange(T, doc_BT.options()).expand_as(doc_BT);
  auto starts = torch::ones_like(doc_BT, torch::kBool);
  starts.narrow(1, 1, T - 1).copy_(doc_BT.narrow(1, 1, T - 1) != doc_BT.narrow(1, 0, T - 1));
  auto first = std::get<0>(torch::where(starts, t, torch::zeros_like(t)).cummax(1));
  return t - first;
}
}  // namespace

torch::Tensor StackImpl::forward(torch::Tensor x, const torch::Tensor& pad_BT,
                                 const torch::Tensor& memory, const torch::Tensor& mem_pad_BS,
                                 DecodeState* state, const torch::Tensor& doc_BT) {
  if (context_) {
    if (memory.defined() || state != nullptr)
      throw std::invalid_argument("context parallelism splits self-attention stacks in training");
    return forward_shared(std::move(x), pad_BT, doc_BT);
  }
  int64_t offset = state != nullptr ? state->offset : 0;
  if (state != nullptr && state->layers.empty()) {
    state->layers.resize(layers->size());
    state->cross.resize(layers->size());
    for (auto& c : state->cross) c.fixed = true;
  }
  if (doc_BT.defined() && state != nullptr)
    throw std::invalid_argument("incremental decoding does not take document ids");
  const torch::Tensor pos_BT = doc_BT.defined() ? positions_in_documents(doc_BT) : torch::Tensor();
  x = pos_BT.defined() ? position->add_at(x, pos_BT) : position->add_to_input(x, offset);
  x = embeddings_in(x);
  if (state != nullptr && pad_BT.defined())
    throw std::invalid_argument("incremental decoding does not take a padding mask");
  // One set of tables and one additive mask per kind of layer, shared by its layers: queries at
  // [offset, offset+T), keys from position 0 (with a cache, the keys are the whole past).
  int64_t T = x.size(1);
  std::vector<KindTables> per_kind;
  per_kind.reserve(kinds_.size());
  for (auto& k : kinds_)
    per_kind.push_back(
        kind_tables(k, pad_BT, doc_BT, pos_BT, T, offset, state != nullptr, x.device()));
  AttnMask mem_mask =
      memory.defined() ? AttnMask{mem_pad_BS, false, {}}.with_bias(T, memory.size(1), 0, x.device())
                       : AttnMask{mem_pad_BS, false, {}};
  x = through_layers(x, per_kind, offset, memory, mem_mask, state);
  if (state != nullptr) state->offset += x.size(1);
  return final_norm ? final_norm(x) : x;
}

torch::Tensor StackImpl::embeddings_in(torch::Tensor x) {
  if (emb_norm) x = emb_norm(x);
  x = drop(x, dropout_, is_training());
  if (emb_proj) x = model::linear(emb_proj, x);
  return x;
}

torch::Tensor StackImpl::through_layers(torch::Tensor x, std::vector<KindTables>& per_kind,
                                        int64_t offset, const torch::Tensor& memory,
                                        const AttnMask& mem_mask, DecodeState* state) {
  for (size_t i = 0; i < layers->size(); ++i) {
    auto& kind = kinds_[kind_of_layer_[i]];
    auto& kt = per_kind[kind_of_layer_[i]];
    // Hybrid NoPE: a layer the module skips sees no position signal (like cross-attention).
    bool acts = kind.module->acts_in_layer(static_cast<int64_t>(i));
    PositionContext pos{acts ? kind.module.get() : nullptr, acts ? &kt.tables : nullptr,
                        index_in_kind_[i], kt.q_scale_T};
    x = layers[i]->as<Layer>()->forward(x, kt.mask, pos, offset, memory, mem_mask,
                                        state != nullptr ? &state->layers[i] : nullptr,
                                        state != nullptr ? &state->cross[i] : nullptr);
  }
  return x;
}

// Context parallelism: x is this member's share of each sequence (dist::ContextSplit), at its
// positions in the whole; the masks' padding and documents, the position modules' score biases
// and FoX's gates are the whole sequence's, and attention runs around the ring.
torch::Tensor StackImpl::forward_shared(torch::Tensor x, const torch::Tensor& pad_BT,
                                        const torch::Tensor& doc_BT) {
  const dist::ContextGroup& group = *context_;
  const dist::ContextSplit split{x.size(1) * group.size, group.size};
  const auto dev = x.device();
  auto mine_T = split.positions(group.member).to(dev);
  const torch::Tensor pos_BT = doc_BT.defined() ? positions_in_documents(doc_BT) : torch::Tensor();
  x = position->add_at(x, pos_BT.defined() ? pos_BT.index_select(1, mine_T)
                                           : mine_T.unsqueeze(0).expand({x.size(0), -1}));
  x = embeddings_in(x);
  std::vector<KindTables> per_kind;
  per_kind.reserve(kinds_.size());
  for (auto& k : kinds_) {
    KindTables kt = kind_tables(k, pad_BT, doc_BT, pos_BT, split.length, 0, false, dev);
    kt.mask.context = &group;
    // The rotations at this member's positions; the score bias stays the whole sequence's.
    PosCache& c = kt.tables;
    c.q_pos_T = c.q_pos_T.index_select(0, mine_T);
    c.k_pos_S = c.k_pos_S.index_select(0, mine_T);
    c.rot.clear();
    if (kt.q_scale_T.defined()) kt.q_scale_T = kt.q_scale_T.index_select(-1, mine_T);
    per_kind.push_back(std::move(kt));
  }
  x = through_layers(x, per_kind, 0, {}, AttnMask{}, nullptr);
  return final_norm ? final_norm(x) : x;
}

void StackImpl::set_context_parallel(const dist::ContextGroup& group) {
  if (group.size > 1)
    context_ = group;
  else
    context_.reset();
}

StackImpl::KindTables StackImpl::kind_tables(Kind& k, const torch::Tensor& pad_BT,
                                             const torch::Tensor& doc_BT,
                                             const torch::Tensor& pos_BT, int64_t T, int64_t offset,
                                             bool cached, torch::Device dev) {
  // Cached decoding: a sliding-window or chunked kind's caches keep only the keys from the
  // first one its queries can see (a data-dependent family's state covers every key: it keeps
  // them all).
  const Span span{causal_, k.window, k.chunk};
  const int64_t k_start =
      cached && causal_ && !k.module->uses_content() ? span.first_key(offset) : 0;
  const int64_t S = offset + T - k_start;
  KindTables out{AttnMask{pad_BT, causal_, {}, k.window, k.chunk, k_start, doc_BT}, {}, {}};
  if (doc_BT.defined() && k.chunk > 0) {
    // Chunks of each document's own positions: a chunk is a document of its own.
    out.mask.doc_BT = doc_BT * (T + 1) + pos_BT.div(k.chunk, "floor");
    out.mask.chunk = 0;
  }
  // (Not where the tiled kernel runs: it masks tile by tile and a T x S mask would be its
  // largest tensor; a layer that cannot tile builds the mask itself.)
  if (!context_ && (k_start > 0 || !uses_tiled_attention(dev, false, false, T, S)))
    out.mask = out.mask.with_bias(T, S, offset, dev);
  out.tables = k.module->prepare(T, S, offset, k_start, dev);
  if (k.temperature.scale > 0) {  // Llama 4: 1 + scale log(floor((p + 1) / floor) + 1)
    auto p = pos_BT.defined()
                 ? pos_BT
                 : torch::arange(offset, offset + T, torch::TensorOptions().dtype(torch::kInt64));
    out.q_scale_T =
        (1.0 + k.temperature.scale *
                   (p.add(1).div(k.temperature.floor, "floor").to(torch::kFloat32) + 1.0).log())
            .to(dev);
  }
  return out;
}

void DecodeState::reorder(const torch::Tensor& order_B) {
  for (auto* caches : {&layers, &cross})
    for (auto& c : *caches) c.reorder(order_B);
}

// ---- the backbone

TransformerImpl::TransformerImpl(const config::ModelConfig& c, int64_t vocab, int64_t source_vocab)
    : cfg_(c), vocab_(vocab), source_vocab_(source_vocab) {
  using config::Arch;
  tok_emb = register_module("tok_emb", torch::nn::Embedding(vocab, embedding_width(c)));
  if (source_vocab > 0) {
    if (c.arch != Arch::kEncDec)
      throw std::logic_error("separate source embeddings need an encoder-decoder");
    src_emb = register_module("src_emb", torch::nn::Embedding(source_vocab, c.d_model));
  }
  bool enc = c.arch == Arch::kEncoder || c.arch == Arch::kEncDec;
  bool dec = c.arch == Arch::kDecoder || c.arch == Arch::kEncDec;
  if (enc)
    encoder =
        register_module("encoder", Stack(c, c.n_layers, false, false, c.arch == Arch::kEncoder));
  if (dec) {
    int64_t n = c.arch == Arch::kEncDec && c.n_decoder_layers > 0 ? c.n_decoder_layers : c.n_layers;
    decoder = register_module("decoder", Stack(c, n, true, c.arch == Arch::kEncDec, false));
  }
  if (c.arch == Arch::kEncoder)
    seg_emb = register_module("seg_emb", torch::nn::Embedding(2, embedding_width(c)));
}

void TransformerImpl::set_context_parallel(const dist::ContextGroup& group) {
  if (encoder) encoder->set_context_parallel(group);
  if (decoder) decoder->set_context_parallel(group);
}

PositionModuleImpl& TransformerImpl::position() {
  return decoder ? *decoder->position : *encoder->position;
}

torch::Tensor TransformerImpl::embed(torch::nn::Embedding emb, const torch::Tensor& tokens,
                                     const torch::Tensor& segments) {
  auto x = emb(tokens);
  if (cfg_.scale_embeddings) x = x * std::sqrt(static_cast<double>(cfg_.d_model));
  if (seg_emb) x = x + seg_emb(segments.defined() ? segments : torch::zeros_like(tokens));
  return x;
}

torch::Tensor TransformerImpl::encode(const torch::Tensor& tokens, const torch::Tensor& pad,
                                      const torch::Tensor& segments, const torch::Tensor& docs) {
  if (!encoder) throw std::logic_error("encode() on a model without an encoder");
  return encoder->forward(embed(src_emb ? src_emb : tok_emb, tokens, segments), pad, {}, {},
                          nullptr, docs);
}

torch::Tensor TransformerImpl::decode(const torch::Tensor& tokens, const torch::Tensor& memory,
                                      const torch::Tensor& mem_pad, DecodeState* state,
                                      const torch::Tensor& docs) {
  if (!decoder) throw std::logic_error("decode() on a model without a decoder");
  return decoder->forward(embed(tok_emb, tokens, {}), {}, memory, mem_pad, state, docs);
}

}  // namespace ropelab::model
