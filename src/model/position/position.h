// The position-module seam. Position encodings differ in *where* they act:
//   - added to the input embeddings (sinusoidal, learned):     add_to_input
//   - a bias on attention scores (T5, ALiBi):                  score_bias
//   - a rotation of queries and keys (RoPE, xPos, PoPE):       rotate_q / rotate_k
//     (plain RoPE also as tables, `rotation`, for a kernel that rotates in a pass of its own)
//   - a score term computed from one layer's content (FoX, CoPE): content_bias
// This base class is a concrete null object: every hook is the identity, so one attention
// block serves every variant without if-chains. The stack owns one position module and calls
// prepare() once per forward; the resulting PosCache is shared by all its layers (which is how
// T5's single bias table is shared, and registered once).
//
// Legend: B batch, N heads, T query time, S key time, H head dim, F feature dim, D model dim.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>

#include "model/score_bias.h"

namespace ropelab::model {

struct PositionDims {
  int64_t d_model = 0;
  int64_t n_heads = 0;
  int64_t head_dim = 0;
  bool causal = false;   // decoder self-attention (T5 uses one-directional buckets)
  int64_t n_layers = 1;  // layers of the stack (per-layer parameters of data-dependent families)
};

// What a data-dependent family sees of one layer's self-attention: the layer's input (after its
// norm), its queries and keys as attention will use them (rotated, if the family rotates; with a
// KV cache, the keys are the whole past), and the additive mask bias (undefined = nothing
// masked). `state` is the family's decoding state for this layer, kept in the KV cache beside
// the keys (FoX: the cumulative log forget gates of the cached keys); null without a cache.
struct LayerContent {
  const torch::Tensor& x_BTD;
  const torch::Tensor& q_BNTH;
  const torch::Tensor& k_BNSH;
  const torch::Tensor& mask_B1TS;
  int64_t layer = 0;
  torch::Tensor* state = nullptr;
  // Context parallelism (model/ring_attention.h): x, q and k are this rank's share of the
  // sequence, and this gives the whole sequence's values [B, N, T] of a per-token [B, N, T / n]
  // (differentiable: the gradients go back to the ranks that hold them). Empty otherwise.
  std::function<torch::Tensor(const torch::Tensor&)> whole_sequence = {};
};

// Per-forward tables: positions of queries and keys, and whatever the module precomputes. The
// stack makes one per forward pass (prepare) and hands it to every layer.
struct PosCache {
  torch::Tensor q_pos_T;  // float32 absolute positions of the queries
  torch::Tensor k_pos_S;  // float32 absolute positions of the keys
  ScoreBias bias;         // score bias (T5, ALiBi, FIRE, Kerple); undefined for others
  int64_t length = 0;     // positions in the sequence so far: max(q_offset+T, k_offset+S)
  // Rotation tables per rotated width (head dim, or a linear kernel's feature dim), computed on
  // first use: width -> {cos, sin} for queries and keys, each [T or S, width/2].
  struct Tables {
    torch::Tensor cos_q, sin_q, cos_k, sin_k, scale_q, scale_k;
    // The same spread over the pair layout ([T, width], sin signed), so that a rotation is
    // x * cos + swap_pairs(x) * sin: two multiplies and an add, no gathers (RotaryImpl).
    torch::Tensor cos_qF, sin_qF, cos_kF, sin_kF;
  };
  mutable std::map<int64_t, Tables> rot;
};

class PositionModuleImpl : public torch::nn::Module {
 public:
  explicit PositionModuleImpl(PositionDims dims) : dims_(dims) {}
  ~PositionModuleImpl() override = default;

  // x_BTD + a position signal. `offset` is the absolute position of x's first step.
  virtual torch::Tensor add_to_input(const torch::Tensor& x_BTD, int64_t offset) {
    (void)offset;
    return x_BTD;
  }
  // The same with each token's own position pos_BT [B, T] (per-document positions of packed
  // windows). Positions inside attention need nothing: with documents kept apart, only a
  // relative family's same-document distances count, which restarting does not change.
  virtual torch::Tensor add_at(const torch::Tensor& x_BTD, const torch::Tensor& pos_BT) {
    (void)pos_BT;
    return x_BTD;
  }
  // Tables for queries at [q_offset, q_offset+T) and keys at [k_offset, k_offset+S).
  PosCache prepare(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset, torch::Device device) {
    ++prepare_count_;
    return make_tables(T, S, q_offset, k_offset, device);
  }
  virtual torch::Tensor rotate_q(const torch::Tensor& x_BNTF, const PosCache& c) {
    (void)c;
    return x_BNTF;
  }
  virtual torch::Tensor rotate_k(const torch::Tensor& x_BNSF, const PosCache& c) {
    (void)c;
    return x_BNSF;
  }
  // What rotate_q and rotate_k do to `width`-wide heads, as tables that a kernel may apply in a
  // pass of its own (model/linear.h's rotated projection): given only where they are exactly
  // x cos + swap(x) sin over the whole width; empty (the default) where the module does more,
  // less, or nothing.
  struct Rotation {
    torch::Tensor cos_qF, sin_qF, cos_kF, sin_kF;  // PosCache::Tables' spread tables
    bool interleaved = false;
  };
  virtual std::optional<Rotation> rotation(const PosCache& c, int64_t width) const {
    (void)c;
    (void)width;
    return std::nullopt;
  }
  // Undefined when the module adds nothing to the scores.
  virtual ScoreBias score_bias(const PosCache& c) { return c.bias; }
  // A score term [B, N, T, S] from the layer's content, added like score_bias; undefined when
  // the module has none. Called only when uses_content().
  virtual ScoreBias content_bias(const LayerContent& in, const PosCache& c) {
    (void)in;
    (void)c;
    return {};
  }
  virtual bool uses_content() const { return false; }
  // Whether content_bias reads LayerContent::mask_B1TS (it costs the attention a stored T x S
  // mask; otherwise mask_B1TS is undefined).
  virtual bool content_reads_mask() const { return false; }

  // The longest input the module can position; -1 = unbounded (a learned table is bounded).
  virtual int64_t max_len() const { return -1; }
  // Whether layer `layer` (0-based) of the stack gets the position signal at all (hybrid NoPE
  // leaves some layers without it). Input-side modules (add_to_input) ignore this.
  virtual bool acts_in_layer(int64_t layer) const {
    (void)layer;
    return true;
  }
  // True when the rotation depends on the sequence's current length (dynamic NTK, LongRoPE):
  // a KV cache must then keep keys unrotated and rotate the whole past with the current tables.
  virtual bool depends_on_length() const { return false; }
  const PositionDims& dims() const { return dims_; }

  // Position tables and biases are computed once per forward pass of a stack (prepare()) and
  // shared by its layers; rotation tables once per rotated width. These counters let a test
  // prove it.
  int64_t prepare_count() const { return prepare_count_; }
  int64_t table_count() const { return table_count_; }

 protected:
  // What prepare() computes: positions by default; score-bias modules add their bias.
  virtual PosCache make_tables(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset,
                               torch::Device device);
  PositionDims dims_;
  mutable int64_t table_count_ = 0;  // incremented by modules that build rotation tables

 private:
  int64_t prepare_count_ = 0;
};
TORCH_MODULE(PositionModule);

namespace detail {
torch::Tensor positions(int64_t offset, int64_t n, torch::Device device);  // float32 [n]
}

}  // namespace ropelab::model

namespace ropelab::config {
struct PositionConfig;
}
namespace ropelab::model {
PositionModule make_position(const config::PositionConfig& cfg, const PositionDims& dims);
}
