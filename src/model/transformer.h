// The backbone: transformer stacks and the three architectures built from them.
//   encoder (BERT, Devlin et al. 2019): bidirectional self-attention, post-LN by default,
//     embedding LayerNorm, segment embeddings;
//   decoder (GPT): causal self-attention, pre-LN by default; with model.parallel_residual
//     (GPT-J, Wang & Komatsuzaki 2021; GPT-NeoX, Black et al. 2022) each layer adds attention and
//     feed-forward of the same input, x + attn(norm1(x)) + ffn(norm2(x));
//   encdec (Transformer-base, Vaswani et al. 2017): encoder + decoder with cross-attention,
//     one shared embedding, embeddings scaled by sqrt(d) when configured.
// Heads (LM, MLM, classification) are separate modules (model/heads.h); model/model.h puts a
// backbone and a head together.
// Each stack owns one position module per kind of layer (self-attention only; cross-attention
// never gets one; one kind without a layout, model.layout), so T5's bias table is one parameter
// per stack and kind. Each kind's layers share its span (global, a sliding window or chunks) and
// its tables. The stack calls its prepare() once per forward
// pass and hands the tables to every layer. Incremental decoding keeps keys/values per layer
// (softmax attention: keys already rotated) and continues positions from the cache length.
//
// Legend: B batch, T decoder/target time, S encoder/source time, D model dim, V vocab.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/container/modulelist.h>
#include <torch/nn/modules/embedding.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/modules/normalization.h>
#include <torch/nn/pimpl.h>

#include <optional>
#include <vector>

#include "config/schema.h"
#include "model/attention.h"
#include "model/norm.h"
#include "model/position/position.h"

namespace ropelab::model {

class LayerImpl : public torch::nn::Module {
 public:
  LayerImpl(const config::ModelConfig& c, bool cross);
  torch::Tensor forward(torch::Tensor x, const AttnMask& self_mask, const PositionContext& pos,
                        int64_t offset, const torch::Tensor& memory, const AttnMask& mem_mask,
                        KVCache* cache, KVCache* cross_cache);

 private:
  torch::Tensor ffn(const torch::Tensor& x);
  bool pre_norm_, reordered_;
  bool parallel_;  // model.parallel_residual
  double dropout_;
  config::Activation activation_;
  MultiHeadAttention self_attn{nullptr}, cross_attn{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, gate{nullptr};  // gate: gated FFNs only
  Norm norm1{nullptr}, norm2{nullptr}, norm3{nullptr};
  // model.norm sandwich (Gemma): each sublayer's output normalised again before the add.
  Norm post_norm1{nullptr}, post_norm2{nullptr}, post_norm3{nullptr};
};
TORCH_MODULE(Layer);

// Per-sequence state of incremental decoding: each layer's self-attention keys/values (grown
// every step) and cross-attention keys/values (the encoder memory, projected once).
struct DecodeState {
  std::vector<KVCache> layers, cross;
  int64_t offset = 0;  // tokens already decoded
  // Keeps the rows `order_B` of every cache (beam search: the surviving beams' histories).
  void reorder(const torch::Tensor& order_B);
};

class StackImpl : public torch::nn::Module {
 public:
  // emb_norm: a norm on the embeddings (BERT); post-LN stacks without it follow Vaswani. With
  // model.embedding_size, the embeddings are that wide: normed, then projected to d_model.
  StackImpl(const config::ModelConfig& c, int64_t n_layers, bool causal, bool cross, bool emb_norm);
  // x_BTD are token embeddings (position not yet added).
  // doc_BT: document ids of a packed window (task.packing documents): each token attends only
  // to its document, positions restart at each document; undefined = one document.
  torch::Tensor forward(torch::Tensor x, const torch::Tensor& pad_BT, const torch::Tensor& memory,
                        const torch::Tensor& mem_pad_BS, DecodeState* state,
                        const torch::Tensor& doc_BT = {});
  // Context parallelism (model/ring_attention.h): from now on, forward takes this member's
  // share of each sequence (dist::ContextSplit::shard of the tokens' embeddings) with the whole
  // sequence's padding and document ids, and returns the share's outputs. A group of one: off.
  void set_context_parallel(const dist::ContextGroup& group);
  // The position module of the first layer's kind (the only one without a layout); it alone
  // adds positions to the input embeddings (a layout of several kinds has none that does).
  PositionModule position{nullptr};

 private:
  // A kind of layer (model.layout): its position module, span and query temperature.
  struct Kind {
    PositionModule module{nullptr};
    int64_t window = 0, chunk = 0;
    config::QueryTemperatureConfig temperature;
  };
  // What a kind's layers share in one forward pass: the mask, the position tables, the
  // queries' temperature [T] (undefined = none).
  struct KindTables {
    AttnMask mask;
    PosCache tables;
    torch::Tensor q_scale_T;
  };
  // pos_BT: each token's position in its document (undefined without documents).
  KindTables kind_tables(Kind& k, const torch::Tensor& pad_BT, const torch::Tensor& doc_BT,
                         const torch::Tensor& pos_BT, int64_t T, int64_t offset, bool cached,
                         torch::Device dev);
  // forward's parts: the embeddings' norm, dropout and projection; the layers.
  torch::Tensor embeddings_in(torch::Tensor x);
  torch::Tensor through_layers(torch::Tensor x, std::vector<KindTables>& per_kind, int64_t offset,
                               const torch::Tensor& memory, const AttnMask& mem_mask,
                               DecodeState* state);
  torch::Tensor forward_shared(torch::Tensor x, const torch::Tensor& pad_BT,
                               const torch::Tensor& doc_BT);
  std::optional<dist::ContextGroup> context_;  // context parallelism; none = off
  std::vector<Kind> kinds_;
  std::vector<size_t> kind_of_layer_;
  std::vector<int64_t> index_in_kind_;  // a layer's number among its kind's layers
  bool causal_, pre_norm_;  // pre_norm_: a final norm and no embedding norm (pre or reordered)
  double dropout_;
  torch::nn::ModuleList layers{nullptr};
  Norm final_norm{nullptr}, emb_norm{nullptr};
  torch::nn::Linear emb_proj{nullptr};  // embedding_size -> d_model (RoFormer's small models)
};
TORCH_MODULE(Stack);

class TransformerImpl : public torch::nn::Module {
 public:
  // source_vocab > 0: the encoder has its own token embeddings (separate vocabularies);
  // 0: one embedding matrix serves both stacks.
  TransformerImpl(const config::ModelConfig& c, int64_t vocab, int64_t source_vocab = 0);

  // docs: document ids of packed windows (StackImpl::forward); undefined = one document.
  torch::Tensor encode(const torch::Tensor& tokens_BS, const torch::Tensor& pad_BS,
                       const torch::Tensor& segments_BS = {}, const torch::Tensor& docs_BS = {});
  torch::Tensor decode(const torch::Tensor& tokens_BT, const torch::Tensor& memory_BSD = {},
                       const torch::Tensor& mem_pad_BS = {}, DecodeState* state = nullptr,
                       const torch::Tensor& docs_BT = {});
  // The token embedding matrix [V, E] (tied output projections use it; E = embedding_size,
  // d_model unless set).
  const torch::Tensor& embedding_weight() const { return tok_emb->weight; }

  const config::ModelConfig& config() const { return cfg_; }
  int64_t vocab() const { return vocab_; }
  int64_t source_vocab() const { return source_vocab_; }
  // Context parallelism for both stacks (StackImpl::set_context_parallel).
  void set_context_parallel(const dist::ContextGroup& group);
  // The position module of the stack that sees tokens (decoder, or encoder for BERT).
  PositionModuleImpl& position();

 private:
  torch::Tensor embed(torch::nn::Embedding emb, const torch::Tensor& tokens,
                      const torch::Tensor& segments);
  config::ModelConfig cfg_;
  int64_t vocab_, source_vocab_;
  torch::nn::Embedding tok_emb{nullptr}, src_emb{nullptr}, seg_emb{nullptr};
  Stack encoder{nullptr}, decoder{nullptr};
};
TORCH_MODULE(Transformer);

// Whether layers normalise before their sublayer (norm "pre", or "auto" for decoders).
bool pre_norm(const config::ModelConfig& c);
// The embeddings' width: model.embedding_size, or d_model.
int64_t embedding_width(const config::ModelConfig& c);

// LayerNorm in the norm's own dtype: under CPU autocast a sublayer's output is bf16, and
// libtorch 1.13's layer_norm rejects a bf16 input with fp32 weights. (The MLM head's LayerNorm;
// the stacks' norms are model::Norm, which does the same.)
torch::Tensor norm_of(torch::nn::LayerNorm& norm, const torch::Tensor& x);
torch::nn::LayerNorm layer_norm(int64_t d, double eps);
// A projection with or without its bias.
torch::nn::Linear linear(int64_t in, int64_t out, bool bias);

}  // namespace ropelab::model
