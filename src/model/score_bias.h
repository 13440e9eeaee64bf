// An additive attention-score bias b[b, n, t, s] (Vaswani et al. 2017, Eq. 1 with a bias term:
// softmax(q k^T / sqrt(H) + b) v), described so that any tile of it can be computed on its own.
// The tiled kernel (tiled_attention.h) computes each tile's bias on the fly and never stores the
// T x S whole; the quadratic kernel asks for the whole. The parts, summed:
//
//   relative  b[n, t, s] = rel_NR[n, t - s + S - 1]: a function of the distance alone, one value
//             per head and distance (T5's buckets, ALiBi, Kerple); R = T + S - 1 values.
//   row/col   b[b, n, t, s] = row_BNT[b, n, t] + col_BNS[b, n, s] (FoX: log F_ts = c_t - c_s).
//   function  any tile from a function differentiable in `params` (FIRE's MLP of i - j and i):
//             the tiled kernel's backward recomputes the tile with autograd on.
//   dense     a stored [1 or B, N, T, S] tensor (CoPE, PaTH): cannot be tiled, so attention
//             with it takes the quadratic kernel.
//
// t and s count from the first query and key of the pass the bias was made for (T queries,
// S keys). Legend: B batch, N heads, T query time, S key time, R relative distances.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace ropelab::model {

struct ScoreBias {
  using TileFn = std::function<torch::Tensor(int64_t q0, int64_t q1, int64_t k0, int64_t k1)>;

  int64_t T = 0, S = 0;   // the pass the bias was made for
  torch::Tensor rel_NR;   // relative part; undefined = none
  torch::Tensor row_BNT;  // row/col part; both or neither
  torch::Tensor col_BNS;
  TileFn fn;                          // function part; empty = none
  std::vector<torch::Tensor> params;  // what fn's tiles are differentiable in
  torch::Tensor dense;                // [1 or B, N, T, S]; undefined = none
  std::shared_ptr<torch::Tensor> whole_ = std::make_shared<torch::Tensor>();  // whole()'s cache

  ScoreBias() = default;
  // A stored bias (dense part only); undefined = no bias. Implicit: a tensor is a bias.
  ScoreBias(torch::Tensor dense_bias);  // NOLINT(google-explicit-constructor)

  bool defined() const { return rel_NR.defined() || row_BNT.defined() || fn || dense.defined(); }
  // Whether every part can be computed tile by tile (no dense part).
  bool tileable() const { return !dense.defined(); }
  // The tile of queries [q0, q1) and keys [k0, k1): [1 or B, N, tq, tk] float32, with autograd
  // through every part. Undefined when the bias is.
  torch::Tensor tile(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const;
  // The same tile added into scores s [B, N, tq, tk] float32, in place and without autograd
  // (the tiled kernel's form: no tile tensor; with `fused`, on the CPU, the relative part is one
  // pass per row).
  void add_tile_to(torch::Tensor& s, int64_t q0, int64_t q1, int64_t k0, int64_t k1,
                   bool fused = true) const;
  // The whole bias [1 or B, N, T, S] (the quadratic kernel's form), computed on first use and
  // shared by the copies of this bias (a stack's layers share their position bias).
  torch::Tensor whole() const;
  // This bias plus another of the same pass (the position family's and a content family's).
  ScoreBias plus(const ScoreBias& other) const;

 private:
  // The tile of every part but the relative one; undefined when there is none.
  torch::Tensor non_relative_tile(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const;
};

// The relative part's tile [N, tq, tk] (queries [q0, q1), keys [k0, k1)) of rel_NR [N, R] made
// for S keys, and its gradient: grad_NR [N, R] += the diagonal sums of ds_NTS [N, tq, tk].
torch::Tensor relative_tile(const torch::Tensor& rel_NR, int64_t S, int64_t q0, int64_t q1,
                            int64_t k0, int64_t k1);
void relative_tile_grad(torch::Tensor& grad_NR, const torch::Tensor& ds_NTS, int64_t S, int64_t q0,
                        int64_t k0);

// A relative bias from one value per head and distance: rel_of maps the distances
// d_R = (q_offset + t) - (k_offset + s) (int64, the R = T + S - 1 of them in increasing order:
// d_R[r] is the distance of t - s = r - (S - 1)) to [N, R] values.
using RelativeFn = std::function<torch::Tensor(const torch::Tensor& d_R)>;
ScoreBias relative_bias(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset, torch::Device dev,
                        const RelativeFn& rel_of);

}  // namespace ropelab::model
