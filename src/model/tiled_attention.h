// Tiled softmax attention with an online softmax (FlashAttention-2: Dao 2023, Alg. 1 forward,
// Alg. 2 backward; the online normaliser of Milakov & Gimelshein 2018). Queries go in tiles of
// Tq rows, keys in tiles of Tk columns; each row keeps its running max m and sum l, so no T x S
// tensor is ever stored: memory is O(T) per head (the output and one log-sum-exp per row), and
// the backward pass recomputes each tile's probabilities from the saved log-sum-exp.
//
//   forward, per query tile Q_i and key tile K_j (scale = 1/sqrt(H)):
//     S = scale Q_i K_j^T + bias_ij + mask_ij;  m' = max(m, rowmax S);  P = exp(S - m')
//     l = l exp(m - m') + rowsum P;              O = O exp(m - m') + P V_j
//     at the end O /= l, L = m + log l
//   backward, with D = rowsum(dO o O):
//     P = exp(S - L);  dV_j += P^T dO_i;  dP = dO_i V_j^T;  dS = P o (dP - D)
//     dQ_i += scale dS K_j;  dK_j += scale dS^T Q_i
//
// The mask is index arithmetic, computed per tile: causal, a sliding window, chunks, key
// padding, and documents (per-document packing). Tiles the causal mask, the window or the chunks
// rule out entirely are skipped, so a window of W costs O(T W), not O(T^2). A query that sees no
// key at all (a padding row, a document's lone pad) gets zeros and no gradient: it carries no
// loss. Legend: B batch, N heads, T query time, S key time, H head dim.
#pragma once
#include <torch/torch.h>

#include <cstdint>

#include "model/score_bias.h"
#include "model/span.h"

namespace ropelab::model {

// Which keys each query sees: the span (causal, window, chunk: model/span.h), then padding and
// documents. Positions are absolute: query t is at q_offset + t, key s at s.
struct TileMask : Span {
  int64_t q_offset = 0;      // the first query's position (incremental decoding)
  torch::Tensor key_pad_BS;  // bool, true = a real key; undefined = no padding
  // Document ids (int64): a query sees only keys of its own document; undefined = one document.
  // doc_q_BT for the queries and doc_k_BS for the keys (self-attention: the same tensor).
  torch::Tensor doc_q_BT, doc_k_BS;
};

struct TileSizes {
  int64_t q = 256;  // query rows per tile
  int64_t k = 256;  // key columns per tile
  // On the CPU, each tile's softmax in fused passes over its rows (util/vec_kernels.h); false:
  // in ATen ops, the path other devices take (so that the tests check it on the CPU too).
  bool fused_rows = true;
};

// softmax(q k^T / sqrt(H) + bias + mask) v for q [B, N, T, H], k [B, N, S, H], v [B, N, S, Hv],
// tile by tile, each tile's bias computed on the fly (the bias must be tileable: no dense part).
// fp32, or bf16 inputs with fp32 scores, softmax and accumulation (the output in the inputs'
// dtype). Gradients to q, k, v and the bias parts that require them.
// sink_N: learned sink logits [N] (GPT-OSS), one more score per row with no value: each row's
// running max and sum start at (sink, 1) instead of (-inf, 0); its gradient is
// -sum over rows of exp(sink - L) D.
torch::Tensor tiled_attention(const torch::Tensor& q_BNTH, const torch::Tensor& k_BNSH,
                              const torch::Tensor& v_BNSH, const TileMask& mask,
                              const ScoreBias& bias = {}, TileSizes tiles = {},
                              const torch::Tensor& sink_N = {});

// The same attention computed the quadratic way with the same mask (the reference of the tests;
// rows that see no key are zeros).
torch::Tensor tiled_attention_reference(const torch::Tensor& q_BNTH, const torch::Tensor& k_BNSH,
                                        const torch::Tensor& v_BNSH, const TileMask& mask,
                                        const ScoreBias& bias = {},
                                        const torch::Tensor& sink_N = {});

// Whether a query tile [q0, q1) and a key tile [k0, k1) can have an allowed pair under the
// mask's causal, window and chunk rules (padding and documents are not looked at).
bool tile_may_attend(const TileMask& mask, int64_t q0, int64_t q1, int64_t k0, int64_t k1);

}  // namespace ropelab::model
