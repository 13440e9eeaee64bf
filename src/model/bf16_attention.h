// softmax(q k^T + bias + mask) v (Vaswani et al. 2017, Eq. 1) on bf16 CPU tensors, one head
// and 64 query rows at a time, so that the scores and probabilities never leave the cache.
//
// The unfused form (model/attention.cpp: a bmm, the masked softmax, a bmm) writes the [B, N, T,
// S] scores, reads them, writes the probabilities, reads them; its backward writes and reads the
// probabilities' gradient and the scores' gradient, each read twice by the gradients' bmms.
// Here each block of query rows of one head runs all of that in one thread's scratch: the
// forward writes only the probabilities in bf16 (the backward's input, as the unfused form's
// softmax backward reads its bf16 output) and the output; the backward reads the probabilities
// back once, computes the scores' gradient from them row by row (no exp recomputed) and feeds
// them to the dv gemm as they are. A block's matmuls stop at the last key that the mask lets any
// of its rows see (FlashAttention's causal block skipping, Dao et al. 2022): with a causal mask,
// 256 queries in blocks of 64 compute 10 of the 16 blocks of scores. The matmuls are oneDNN's
// bf16 gemm (util/gemm.h: float32 accumulators, rounded to bf16 where the unfused form's bmm
// rounds), or on a CPU with AMX, where every block's sizes are multiples of 32, AMX's tiles
// called directly (util/amx.h: the same float32 sums of bf16 products, in another order, without
// a library call per block); the rows util/vec_bf16.h's softmax kernels: the same operations as
// the unfused form's bf16 path.
//
// q, k and v may be views with any strides but the last (the heads of the fused QKV projection):
// the gemm reads their rows in place, and the gradients go out in the same layout.
//
// Legend: B batch, N heads, T queries, S keys, W q and k width, H v width.
#pragma once
#include <torch/torch.h>

#include <vector>

namespace ropelab::model {

// Whether bf16_attention applies: q, k, v bf16 CPU tensors of 4 dims with the same batch and
// heads and more than one query (a decoding step's single query keeps the unfused form, which
// reads the cache through its strides), the bias and the mask (either undefined) float32 or
// bf16 without gradients, a CPU with util/vec_bf16.h's AVX-512 forms and oneDNN's bf16 gemm
// (util/gemm.h: a libtorch that links oneDNN as a shared library, as Debian's does);
// ROPELAB_BF16_ATTENTION=off turns it off (the unfused form then runs: to compare the two).
bool uses_bf16_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& bias, const torch::Tensor& mask);

// softmax(q k^T scale + bias + mask) v for q [B, N, T, W], k [B, N, S, W], v [B, N, S, H]; bias
// and mask additive and broadcast ([1 or B, 1 or N, T, S]) or undefined. Returns [B, N, T, H]
// bf16, with gradients for q, k and v. The scale is applied by the softmax's rows (to the
// scores in the forward, to their gradient in the backward), not to q: with a power of two
// (1/8 for 64-wide heads) every bit is as with q scaled first, one pass over q fewer each way.
torch::Tensor bf16_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& bias, const torch::Tensor& mask, double scale);

// x.split_with_sizes(sizes, -1), for the fused q|k|v projection: where the parts' gradients are
// adjacent column blocks of one tensor of x's shape (bf16_attention's backward writes dq, dk and
// dv so when q, k and v are that split's heads), its backward hands that tensor on whole, with
// no copy; else their concatenation, as split_with_sizes's own backward (a part without a
// gradient counts as zeros).
std::vector<torch::Tensor> split_columns(const torch::Tensor& x, const std::vector<int64_t>& sizes);

}  // namespace ropelab::model
