// The model's dense layers, y = x W^T + b (Vaswani et al. 2017, the projections of Eq. 1 and
// the FFN of Eq. 2).
//
// In float32 on the CPU (no autocast) the forward and both gradients run on oneDNN's sgemm
// (util/gemm.h) where the process has it: one custom autograd node, dX = dY W and
// dW = dY^T X, the bias's gradient the column sums of dY. Under bf16 CPU autocast on a CPU with
// AVX-512 it is another node: the matmul in bf16 (oneDNN, on AMX where the CPU has it), then the
// float32 bias (if any) added in one pass (util/vec_bf16.h; with a bias the gemm writes float32
// and that pass also rounds it to bf16, as libtorch's bf16 mm would), and the bias's gradient as
// dY's column sums in float32; libtorch's addmm first copies the bias into every output row, a
// broadcast copy slower than the add. That node takes the float32 weight itself and casts it: dW
// comes from oneDNN's bf16 gemm straight in float32 (util/gemm.h), never rounded to bf16 and with
// no cast after. On a CPU with AMX, for weights that fit a core's L2, the forward and dX run on
// the tiles themselves (util/amx.h's rows_product), the bias, rounding and rotation on each block
// of rows as it comes, libtorch's values bit for bit. Everywhere else (CUDA; a libtorch without
// oneDNN's symbols; a CPU without AVX-512) it is libtorch's torch::linear, the bias inside the
// matmul. Each gives the values of torch::linear to float32 rounding, and in bf16 to one more bf16
// rounding (tests/unit/fused_test.cpp). The bf16 node also comes with RoPE (RoFormer Eq. 34)
// applied in the pass right after its bias pass, for the attention's fused QKV projection
// (linear_rotated below).
#pragma once
#include <torch/nn/modules/linear.h>
#include <torch/types.h>

#include <utility>

#include "config/schema.h"

namespace ropelab::model {

// x [..., in], w [out, in], b [out] or undefined -> [..., out].
torch::Tensor linear(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b = {});
// The same with a Linear module's weight and bias.
torch::Tensor linear(const torch::nn::Linear& m, const torch::Tensor& x);

// RoPE (RoFormer Eq. 34) on the q and k heads of a fused QKV projection's output [B, T, C]:
// columns [0, q_heads W) are q's heads, the next k_heads W k's, the rest (v) left as they are.
// Tables [T, W] float32, spread over the head's width with the sine's sign folded in
// (model/position/rotary.cpp); row t of a sequence takes row t.
struct HeadRotation {
  torch::Tensor cos_q, sin_q, cos_k, sin_k;
  int64_t q_heads = 0, k_heads = 0, width = 0;
  bool interleaved = false;
};
// Whether linear_rotated applies: the bf16 node (above) and tables of x's length.
bool fuses_rotation(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                    const HeadRotation& r);
// linear(x, w, b) for x [B, T, in] with r applied to the output's q and k heads in place, in a
// pass right after the bias pass (bit for bit linear() then the rotation of
// model/position/rotary.cpp; its backward rotates the gradient back in the pass before the bias's
// column sums). No separate RoPE op with its own copies each way, and q and k stay views of the
// projection's output.
torch::Tensor linear_rotated(const torch::Tensor& x, const torch::Tensor& w, const torch::Tensor& b,
                             const HeadRotation& r);

// act_dropout(linear(m, x), act, p, training) (model/dropout.h): the FFN's first layer with its
// activation and dropout. Where the bf16 node above runs on AMX tiles (util/amx.h: training, the
// tiles' sizes) one node of both: each block of rows of the product takes the bias, the
// activation and the mask while it is in cache, and the pre-activation is never stored. The same
// values bit for bit; elsewhere the composition.
torch::Tensor act_dropout_after_linear(const torch::nn::Linear& m, const torch::Tensor& x,
                                       config::Activation act, double p, bool training);

// Whether linear(x, w) (no bias) takes the bf16 node above.
bool bf16_linear(const torch::Tensor& x, const torch::Tensor& w);
// That node's gradients of y = x W^T from dY [M, out] and x [M, in] (bf16, contiguous) and the
// bf16 weight it used, w16 [out, in]: dX = dY W in bf16 (if need_x), dW (if need_w) in float32
// for a float32 weight (float_weight), else in bf16. For a node that computes y itself
// (tasks/loss.h's linear_cross_entropy).
std::pair<torch::Tensor, torch::Tensor> bf16_linear_grads(const torch::Tensor& g_MO,
                                                          const torch::Tensor& x_MI,
                                                          const torch::Tensor& w16_OI,
                                                          bool float_weight, bool need_x,
                                                          bool need_w);

// out [M, N] = a [M, K] @ b [K, N] for 2-D float32 CPU tensors, out with unit column stride:
// oneDNN's sgemm where available (a and b read in place when either of their strides is 1, so
// a transposed view costs no copy), else at::mm_out. No autograd (attention's per-head loop,
// model/attention.cpp, has its own backward). Keeping every float32 matmul of a training step
// on one library matters: OpenBLAS's idle workers spin for a while after each of its calls, on
// the cores oneDNN's threads need next.
void matmul_into(torch::Tensor& out, const torch::Tensor& a, const torch::Tensor& b);

// a @ b for bf16 a [M, K], b [K, N] (or batched, [n, M, K] @ [n, K, N]), any strides, in bf16:
// libtorch's mm or bmm, or where libtorch's bf16 matmul has no kernel of its own
// (!util::bf16_gemm_native(): slow, and it sums in bf16) util::gemm_bf16's float32 sums,
// rounded once, as a bf16 matmul rounds its product.
torch::Tensor bf16_matmul(const torch::Tensor& a, const torch::Tensor& b);

}  // namespace ropelab::model
