// Multi-head attention with two kernels.
//
// softmax (Vaswani et al. 2017, Eq. 1): softmax(q k^T / sqrt(H) + bias + mask) v, with RoPE's
//   rotation applied to q and k (RoFormer Eq. 16) and score biases (T5, ALiBi; score_bias.h)
//   added; from kTiledFrom tokens on the CPU, tile by tile (tiled_attention.h).
// linear (Katharopoulos et al. 2020; RoFormer Sec. 3.4.3, Eq. 19): non-negative feature maps
//   phi = elu+1 or FAVOR+ positive random features (Choromanski et al. 2021), and
//     eq19:       Attn_m = sum_n (R_m phi(q_m))^T (R_n phi(k_n)) v_n / sum_n phi(q_m)^T phi(k_n)
//     before_phi: Attn_m = sum_n phi(R_m q_m)^T phi(R_n k_n) v_n / sum_n phi(R_m q_m)^T phi(R_n
//     k_n)
//   Non-causal: one pass of sums. Causal: chunked prefix sums (quadratic only inside chunks of
//   64), O(N) time and memory in sequence length.
// Masks are an additive score bias (a masked score is -1e30, not -inf): a query that sees no key
// at all (a padding row) averages the values instead of producing NaN, and its output carries
// no loss. The 1/sqrt(H) scale is applied to q (T x H) rather than to the scores (T x S).
//
// Legend: B batch, N heads, T query time, S key time, H head dim, F feature dim, D model dim.
#pragma once
#include <torch/nn/module.h>
#include <torch/nn/modules/linear.h>
#include <torch/nn/pimpl.h>

#include <optional>

#include "config/schema.h"
#include "dist/context.h"
#include "model/init.h"
#include "model/linear.h"
#include "model/norm.h"
#include "model/position/position.h"
#include "model/span.h"

namespace ropelab::model {

struct AttnMask {
  torch::Tensor key_pad_BS;  // bool, true = real key; undefined = no padding
  bool causal = false;
  // The same mask as an additive float32 score bias [1 or B, 1, T, S] (0 = allowed, a large
  // negative number = masked); undefined = nothing masked. A stack builds it once per forward
  // pass (with_bias) and every layer of a kind adds it: no boolean mask and masked_fill per layer.
  torch::Tensor bias_B1TS;
  // A layout kind's span (model.layout): > 0, a sliding window (a query sees keys with
  // |query - key| < window; causal: query - key < window) or chunks (query and key in the same
  // block of `chunk` positions). Positions are absolute: query t at q_offset + t, key s at s.
  int64_t window = 0;
  int64_t chunk = 0;
  // The position of key 0 (a local layer's cache has dropped the keys before it); > 0 only in
  // cached decoding.
  int64_t k_offset = 0;
  // Document ids [B, T] of self-attention's queries and keys (task.packing documents): a token
  // sees only its own document. Undefined = one document.
  torch::Tensor doc_BT = torch::Tensor();
  // Context parallelism (model/ring_attention.h): this rank's group; the queries, keys and
  // values are its share of the sequence, and key_pad_BS and doc_BT are the whole sequence's.
  // Null: the whole sequence is here.
  const dist::ContextGroup* context = nullptr;
  // The causal, window and chunk rules (model/span.h).
  Span span() const { return Span{causal, window, chunk}; }
  bool restricted() const {
    return span().restricted() || key_pad_BS.defined() || doc_BT.defined();
  }
  // This mask with bias_B1TS set for T queries starting at q_offset and S keys.
  AttnMask with_bias(int64_t T, int64_t S, int64_t q_offset, torch::Device dev) const;
};

// The position module of a stack and the tables its prepare() made for this forward pass.
// Cross-attention gets none (module == nullptr): there is no position signal there.
struct PositionContext {
  PositionModuleImpl* module = nullptr;
  const PosCache* tables = nullptr;
  // The layer's number among its kind's layers (model.layout; without one, its index in the
  // stack): which per-layer parameters of a data-dependent family it uses.
  int64_t layer = 0;
  // A factor per query, [T] or [B, T] (per-document positions), on the queries after their
  // rotation (a layout kind's temperature, Llama 4); undefined = 1.
  torch::Tensor q_scale_T;
};

// Projected keys and values for incremental decoding. Self-attention appends each step's new
// keys/values (the whole past); cross-attention (`fixed`) projects the encoder memory once and
// reuses it at every step.
struct KVCache {
  torch::Tensor k_BNSH, v_BNSH;
  bool fixed = false;
  // Self-attention keeps its keys/values in buffers with room to grow (twice what they hold);
  // k_BNSH / v_BNSH are views of `S` steps from `head`. A step appends in place, O(1)
  // amortised, instead of copying the whole past (torch::cat): the time per token stays flat.
  torch::Tensor k_buf, v_buf;
  int64_t head = 0;
  // The position of the first cached key. A sliding-window or chunked layer drops the keys its
  // next queries cannot see (drop_before), so that it holds O(window) keys, not the whole past.
  int64_t start = 0;
  // A data-dependent position family's state for the cached keys (LayerContent::state).
  torch::Tensor pos_state;
  void append(const torch::Tensor& k_new_BNTH, const torch::Tensor& v_new_BNTH);
  // Forgets the keys before `position`.
  void drop_before(int64_t position);
  // Keeps the rows `order_B` (beam search).
  void reorder(const torch::Tensor& order_B);
};

// softmax(scores + bias + mask) over the last dim of [B, N, T, S] scores, computed in float32 and
// returned in out_dtype; bias and mask are additive and broadcast ([1 or B, 1 or N, T, S]); either
// may be undefined. One fused pass on CPU (the unfused ops elsewhere); the bias gets gradients.
torch::Tensor masked_softmax(const torch::Tensor& scores_BNTS, const torch::Tensor& bias,
                             const torch::Tensor& mask, c10::ScalarType out_dtype);

// a @ b for [..., M, K] and [..., K, N] with equal leading dims. On CPU in float32 (no autocast):
// one mm per leading index, forward and backward (libtorch 1.13's bmm ran the attention shapes
// at a fifth of that speed); elsewhere torch::matmul.
torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b);

// The kernels, as free functions (tested directly against their quadratic forms).
// sink_N: learned sink logits per head (model.attention.sinks), undefined = none.
torch::Tensor softmax_attention(const torch::Tensor& q_BNTH, const torch::Tensor& k_BNSH,
                                const torch::Tensor& v_BNSH, const ScoreBias& bias,
                                const AttnMask& mask, int64_t q_offset, double dropout,
                                bool training, const torch::Tensor& sink_N = {});
// Scalable-Softmax's log n for T queries from q_offset over S keys, [1, 1, T, 1] ([B, 1, T, 1]
// with documents): n is the number of keys each query may see under the mask's causal,
// window, chunk and document rules (padding aside).
torch::Tensor log_visible_keys(const AttnMask& mask, int64_t T, int64_t S, int64_t q_offset,
                               torch::Device dev);
// The same softmax attention through libtorch's fused scaled_dot_product_attention (what
// softmax_attention runs on a GPU, libtorch 2.1 on): the position bias and the mask become one
// additive mask, a plain causal score the kernels' own causal flag. Any device (tests compare it
// with the unfused form on the CPU); throws where compat::has_sdpa() is false.
torch::Tensor fused_attention(const torch::Tensor& q_BNTH, const torch::Tensor& k_BNSH,
                              const torch::Tensor& v_BNSH, const ScoreBias& bias,
                              const AttnMask& mask, int64_t q_offset, double dropout,
                              bool training);
// Whether fused_attention hands `mask` to the kernels' own causal flag (no mask tensor: the
// flash and cuDNN kernels then skip the masked blocks, about half the work at T == S): a causal
// mask with no padding and no position bias, queries and keys starting together. Its additive
// form (bias_B1TS, which a stack builds once per forward pass) is the same mask and does not
// count.
bool uses_kernel_causal(const AttnMask& mask, bool has_bias, int64_t q_offset, int64_t T,
                        int64_t S);
// From this many queries and keys on, softmax_attention on the CPU runs the tiled kernel
// (model/tiled_attention.h) where it computes the same function (no stored, untileable score
// bias, no dropout on the probabilities). The LM bench model's training step (`ropelab bench
// --sections attention`, 8192 tokens a step, 2 threads), quadratic against tiled: 1024 tokens 3242
// and 3245 tokens/s (2299 and 1605 MiB), 2048 2205-2662 and 2282-2598 (3713-3967 and 1613 MiB),
// 8192 624 and 1260 (11556 and 1353 MiB).
inline constexpr int64_t kTiledFrom = 1024;
bool uses_tiled_attention(torch::Device dev, bool has_dense_bias, bool has_dropout, int64_t T,
                          int64_t S);
// q/k features for the numerator (possibly rotated) and for the denominator (never rotated in
// eq19 mode). Causal with q_offset > 0 or T != S uses the exact masked form.
torch::Tensor linear_attention(const torch::Tensor& qn, const torch::Tensor& kn_in,
                               const torch::Tensor& qd, const torch::Tensor& kd_in,
                               const torch::Tensor& v_in, const AttnMask& mask, int64_t q_offset);
// The same thing computed the quadratic way (for tests).
torch::Tensor linear_attention_quadratic(const torch::Tensor& qn, const torch::Tensor& kn,
                                         const torch::Tensor& qd, const torch::Tensor& kd,
                                         const torch::Tensor& v, const AttnMask& mask,
                                         int64_t q_offset);

class MultiHeadAttentionImpl : public torch::nn::Module, public OwnsParameters {
 public:
  // n_kv_heads > 0: grouped-query attention (Ainslie et al. 2023): k_proj and v_proj make
  // n_kv_heads heads, kv head j serving query heads [j*g, (j+1)*g), g = n_heads/n_kv_heads (the
  // keys and values are repeated to n_heads right after the projection). bias: which
  // projections have one (all; none; qkv: not o_proj). norm_eps: QK-norm's epsilon; norm_type:
  // the model's (QK-norm is an RMSNorm, with (1 + gain) under rmsnorm_offset).
  MultiHeadAttentionImpl(int64_t d_model, int64_t n_heads, const config::AttentionConfig& cfg,
                         int64_t n_kv_heads = 0, config::LinearBias bias = config::LinearBias::kAll,
                         double norm_eps = 1e-6, int64_t head_dim = 0,
                         config::NormType norm_type = config::NormType::kRmsNorm);
  // sinks and ssmax keep the values they start with (zeros; model.attention.ssmax).
  ParamRole role_of(const std::string& local) const override;
  // x [B, T, D] attends to kv [B, S, D] (self-attention: the same tensor). `ctx` carries the
  // stack's position module and tables (none for cross-attention). With `cache`, new
  // keys/values are appended and attention covers the whole past; q_offset is the absolute
  // position of x's first step.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& kv, const AttnMask& mask,
                        const PositionContext& ctx, int64_t q_offset, KVCache* cache);
  torch::Tensor features(const torch::Tensor& x_BNTH, bool is_query) const;

 private:
  int64_t n_heads_, n_kv_heads_, head_dim_;
  config::AttentionConfig cfg_;
  // Separate parameters (checkpoints and golden tests name them), one fused matmul: the
  // forward concatenates the weights (a few hundred KB) and projects q, k, v at once.
  torch::nn::Linear q_proj{nullptr}, k_proj{nullptr}, v_proj{nullptr}, o_proj{nullptr};
  Norm q_norm{nullptr}, k_norm{nullptr};  // QK-norm (model.attention.qk_norm)
  torch::Tensor sinks_N_, ssmax_N_;       // model.attention.sinks / ssmax; undefined = off
  torch::Tensor favor_FH_;                // FAVOR+ random projection (a buffer, drawn once)
  // Without autograd (evaluation, decoding one token at a time) the concatenated q/k/v and k/v
  // weights are kept until a weight changes (its version counter moves), instead of being
  // copied again at every step.
  struct Fused {
    torch::Tensor w, b;
    std::vector<int64_t> versions;
  };
  Fused fused_qkv_, fused_kv_;
  static std::pair<torch::Tensor, torch::Tensor> fused(Fused& f,
                                                       const std::vector<torch::nn::Linear>& ps);
  // The position module's rotation, to be applied by the fused QKV projection (model/linear.h)
  // instead of rotate_q and rotate_k; empty where it must not be.
  std::optional<HeadRotation> projection_rotation(PositionModuleImpl* pos, const PosCache& pc,
                                                  const KVCache* cache) const;
};
TORCH_MODULE(MultiHeadAttention);

}  // namespace ropelab::model
