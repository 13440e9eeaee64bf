// The span rule: which keys a query may see. Every attention path asks it (the quadratic mask,
// the tiled kernel's tiles, the fused GPU kernels' mask, Scalable-Softmax's key counts, the
// cache's eviction, the Hugging Face mapping's layer types and evaluation's global kinds).
//
// Positions are absolute (query t at q_offset + t, key s at k_offset + s). A query at p sees
// key k when
//   causal:      k <= p                         (a decoder)
//   window w:    |p - k| < w                    (a sliding window; causal: p - k < w)
//   chunk c:     floor(p / c) == floor(k / c)   (chunked attention, Llama 4's local layers)
// Each rule is an interval of keys that holds p itself, so a query sees one interval [lo, hi)
// whose ends never decrease as p grows: the keys of consecutive queries form one interval too,
// and a block of queries and keys is empty, full or partial by its corners alone.
// Padding and documents are the per-token rules, applied on top (restrict_to_tokens).
#pragma once
#include <torch/types.h>

#include <cstdint>

namespace ropelab::config {
struct LayerKindConfig;
}

namespace ropelab::model {

// Keys [lo, hi), not clipped to the keys there are.
struct KeyInterval {
  int64_t lo = 0, hi = 0;
};

struct Span {
  bool causal = false;
  int64_t window = 0;  // > 0: a sliding window
  int64_t chunk = 0;   // > 0: chunks (model.layout: a kind has a window or a chunk, not both)

  // A layout kind's span (model.layout.kinds.NAME.window / .chunk) in a causal or a
  // bidirectional stack.
  static Span of(const config::LayerKindConfig& kind, bool causal);
  // Every key (up to the causal rule): no window, no chunk.
  bool global() const { return window <= 0 && chunk <= 0; }
  bool restricted() const { return causal || !global(); }

  // The keys the query at position p sees.
  KeyInterval keys(int64_t p) const;
  // The keys some query in positions [p_first, p_last] sees.
  KeyInterval keys(int64_t p_first, int64_t p_last) const {
    return {keys(p_first).lo, keys(p_last).hi};
  }
  enum class Block { kEmpty, kFull, kPartial };
  // Queries at [p_first, p_last] and keys at [k_first, k_last]: no pair seen, every pair, or some.
  Block block(int64_t p_first, int64_t p_last, int64_t k_first, int64_t k_last) const;
  // The first key the queries from position p on can see, at least 0 (what a causal layer's
  // cache keeps).
  int64_t first_key(int64_t p) const;

  // [T, S] bool for T queries from position q_first and S keys from k_first: true where the
  // query sees the key; undefined where it sees every one (block kFull).
  torch::Tensor allowed_TS(int64_t q_first, int64_t T, int64_t k_first, int64_t S,
                           torch::Device dev) const;
  // [T] int64: how many of the S keys from k_first each of T queries from q_first sees.
  torch::Tensor visible_T(int64_t q_first, int64_t T, int64_t k_first, int64_t S) const;
};

// `allowed` (bool, broadcast to [B, 1, T, S]; undefined = every pair) narrowed by the per-token
// rules: key padding [B, S] (true = a real key) and documents (a query sees only the keys of its
// own document: ids [B, T] of the queries, [B, S] of the keys). Undefined rules add nothing;
// undefined when nothing is masked.
torch::Tensor restrict_to_tokens(torch::Tensor allowed, const torch::Tensor& key_pad_BS,
                                 const torch::Tensor& doc_q_BT, const torch::Tensor& doc_k_BS);

}  // namespace ropelab::model
