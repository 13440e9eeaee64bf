// The tiled kernel (model/tiled_attention.h) block by block, for kernels that feed it the keys
// in parts: ring attention (model/ring_attention.h) holds one rank's queries and sees the keys
// of each rank in turn. The same equations (FlashAttention-2: Dao 2023, Alg. 1 forward, Alg. 2
// backward): the forward pass carries each query row's running max m, sum l and output
// accumulator across blocks, so attention over the keys of several blocks equals attention over
// all of them (the online softmax of Milakov & Gimelshein 2018 is the log-sum-exp merge); the
// backward pass takes the rows' final log-sum-exp L and D = rowsum(dO o O), so each block's
// gradients are its own sum.
//
// A block is local query rows [q0, q1) against local key columns [k0, k1). Three numberings meet
// in it: the tensors' (local rows and columns), the span's (absolute positions: the causal,
// window and chunk rules) and the bias's and token rules' (the rows of the score bias, the key
// padding and the document ids). One rank's pass has them all equal up to the query offset of
// decoding; a ring's blocks index a whole-sequence bias and whole-sequence documents.
// Legend: B batch, N heads, T query time, S key time, H head dim.
#pragma once
#include <torch/torch.h>

#include <cstdint>
#include <utility>

#include "model/tiled_attention.h"

namespace ropelab::model {

struct TileBlock {
  int64_t q0 = 0, q1 = 0, k0 = 0, k1 = 0;  // local rows of q and of k (and v)
  int64_t q_pos = 0, k_pos = 0;            // the span positions of rows q0 and k0
  int64_t q_at = 0, k_at = 0;  // rows q0 and k0 in the bias and the token rules (pad, documents)
};

// The whole pass of one rank: T queries from mask.q_offset, S keys from position 0.
TileBlock whole_pass(const TileMask& mask, int64_t T, int64_t S);

// Whether the block can hold an allowed pair: the span's corners, and documents (a block whose
// query and key document ids do not overlap as ranges is empty). Padding is not looked at.
bool block_may_attend(const TileMask& mask, const TileBlock& b);

// What a pass needs besides its tensors. The bias parts that take gradients are the autograd
// inputs after q, k, v (bias_inputs), at the indices kept here (-1: none).
struct TilePlan : torch::CustomClassHolder {
  TileMask mask;
  TileSizes sizes;
  ScoreBias bias;
  torch::Tensor sink_N;  // undefined = no sinks
  int64_t rel = -1, row = -1, col = -1, params = -1, sink = -1;
  bool fused(const torch::Tensor& q) const { return sizes.fused_rows && q.is_cpu(); }
  // The parts bias_inputs gave, in the same order (after it filled the indices).
  torch::autograd::variable_list parts() const;
};
// The bias parts (and sinks) that take gradients, in input order; fills the plan's indices.
torch::autograd::variable_list bias_inputs(TilePlan& plan);
// A pass's autograd inputs: q scaled by 1/sqrt(H), k and v, in float32 and contiguous (bf16
// inputs are converted: scores, softmax and sums in float32), then bias_inputs. Fills the plan
// with the mask, tile sizes, bias and sinks. Run under NoAutocast.
torch::autograd::variable_list kernel_inputs(const torch::Tensor& q_BNTH, const torch::Tensor& k,
                                             const torch::Tensor& v, const TileMask& mask,
                                             const ScoreBias& bias, TileSizes tiles,
                                             const torch::Tensor& sink_N, TilePlan& plan);

// The running softmax of T query rows. A sink is a score every row sees first: its rows start
// at (m, l) = (sink, 1) instead of (-inf, 0).
struct OnlineSoftmax {
  torch::Tensor acc_BNTH, m_BNT1, l_BNT1;
  OnlineSoftmax(const torch::Tensor& q_BNTH, int64_t Hv, const torch::Tensor& sink_N);
  // The output and each row's log-sum-exp. A row that saw no key: output 0 and a log-sum-exp
  // of 1e30, so that the backward pass's exp(s - L) is 0 there.
  std::pair<torch::Tensor, torch::Tensor> finish() const;
};

// An autograd function of a pass keeps q, k, v, the output, the rows' log-sum-exp and the plan
// (save_pass, which returns the output), and its backward starts from them (SavedPass).
torch::Tensor save_pass(torch::autograd::AutogradContext* ctx, const torch::Tensor& q,
                        const torch::Tensor& k, const torch::Tensor& v, const OnlineSoftmax& state,
                        const c10::intrusive_ptr<TilePlan>& plan);
struct SavedPass {
  SavedPass(torch::autograd::AutogradContext* ctx, const torch::autograd::variable_list& grad_out);
  torch::Tensor q, k, v, out, lse;
  torch::Tensor dout, D;  // float32; D = rowsum(dO o O) [B, N, T, 1]
  c10::intrusive_ptr<TilePlan> plan;
  // The gradients backward_block adds into: zeros for q, k and v and for each bias part (its
  // inputs after q, k, v), float32.
  torch::autograd::variable_list zero_grads() const;
  // What the function returns: the sinks' gradient set, each bias part's in its dtype, and none
  // for the plan.
  torch::autograd::variable_list returned(torch::autograd::variable_list grads) const;
};

// q (scaled by 1/sqrt(H)), k, v float32 and contiguous. Adds the block's keys into the rows'
// running softmax.
void forward_block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const TilePlan& plan, const TileBlock& b, OnlineSoftmax& state);
// Adds the block's gradients: grads[0..2] to q, k and v (float32, shaped like them), the bias
// parts' at the plan's indices (float32, shaped like the parts). D = rowsum(dO o O) [B, N, T, 1].
void backward_block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& dout, const torch::Tensor& lse, const torch::Tensor& D,
                    const TilePlan& plan, const TileBlock& b,
                    torch::autograd::variable_list& grads);
// The sinks' gradient over these rows: -sum exp(sink - L) D (the sink's column has no value).
torch::Tensor sink_grad(const TilePlan& plan, const torch::Tensor& lse, const torch::Tensor& D);

// Autocast off on a device while the kernel runs: its tiles are float32 by design (bf16 inputs
// are converted on the way in), and its matmuls then take batched_matmul's float32 path.
class NoAutocast {
 public:
  explicit NoAutocast(c10::DeviceType type);
  ~NoAutocast();
  NoAutocast(const NoAutocast&) = delete;
  NoAutocast& operator=(const NoAutocast&) = delete;

 private:
  c10::DeviceType type_;
  bool was_;
};

}  // namespace ropelab::model
