// Ring attention: softmax attention over a sequence split across the ranks of a context-parallel
// group (Liu et al. 2023, "Ring Attention with Blockwise Transformers"), on the tiled kernel
// (model/tile_blocks.h). Each rank holds the queries, keys and values of its share of the
// sequence (dist/context.h: two pieces, the zig-zag split). At step s = 0 .. n-1 it attends its
// queries to the keys of the member s places before it in the ring, while the keys of step
// s + 1 travel; the online softmax carries each row's max, sum and output across the steps,
// which is the log-sum-exp merge of the partial outputs. The backward pass goes round again:
// each step's dK and dV go back to the keys' owner, which sums them.
//
// Every tile is computed from absolute positions, so every family the tiled kernel computes
// works as on one rank: the score bias is made for the whole sequence (T x T from position 0;
// relative rows, FIRE's function, FoX's row and column terms) and each block reads its own
// tiles of it; windows, chunks and documents are index rules on the same positions. A block
// the span or the documents leave empty is skipped, and keys that no block of a member needs
// are not sent to it. Messages go straight from the owner to the member that needs them (one
// point-to-point exchange per step: a shift by s, not a relay), on dist::World.
// Legend: B batch, N heads, T local query time (the rank's share), H head dim.
#pragma once
#include <torch/torch.h>

#include "dist/context.h"
#include "model/tiled_attention.h"

namespace ropelab::model {

// softmax(q k^T / sqrt(H) + bias + mask) v for this rank's queries against the whole
// sequence's keys. q, k, v [B, N, T / n, H] hold this member's tokens (split.shard); the mask's
// span is over positions of the whole sequence, its key padding and document ids [B, T] are the
// whole sequence's (q_offset must be 0); the bias was made for the whole sequence (T x T).
// Returns this member's rows [B, N, T / n, Hv]. Gradients to q, k, v, the bias parts and the
// sinks, of this rank's rows (the parameters' gradients are summed over the ranks afterwards).
// One member (n = 1) is the tiled kernel.
torch::Tensor ring_attention(const torch::Tensor& q_BNTH, const torch::Tensor& k_BNTH,
                             const torch::Tensor& v_BNTH, const dist::ContextGroup& group,
                             const dist::ContextSplit& split, const TileMask& mask,
                             const ScoreBias& bias = {}, TileSizes tiles = {},
                             const torch::Tensor& sink_N = {});

// The whole sequence's values of a per-token tensor: x holds this member's share along `dim`
// (split.shard), the result every member's, in sequence order. Differentiable: a member's
// gradient is the sum over the members of theirs at its tokens. (FoX's forget gates: each
// rank forms the whole sequence's running sums, B x N x T values, not the keys.)
torch::Tensor gather_sequence(const torch::Tensor& x, const dist::ContextGroup& group,
                              const dist::ContextSplit& split, int64_t dim);

// Whether any query of member `qm` may see a key of member `km` under the mask's span and
// documents (which keys travel where).
bool member_needs(const dist::ContextSplit& split, const TileMask& mask, int qm, int km);

}  // namespace ropelab::model
