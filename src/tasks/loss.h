// Softmax cross-entropy with label smoothing, fused for speed (Szegedy et al. 2016, Sec. 7):
//   loss_n = a * nll_n + b * sum_c (-log p_nc),   nll_n = -log p_n,target
// PyTorch's label_smoothing eps is a = 1 - eps, b = eps / V; fairseq's (translation) is
// eps_i = eps / (V - 1), a = 1 - eps - eps_i, b = eps_i. In both a + b V = 1, so the gradient
// is w_n (p_n - a onehot_n - b).
// On CPU one kernel reads each row of logits in their own dtype (bf16 under autocast, no float32
// copy) and keeps only the row's log-sum-exp; the backward recomputes p from the logits and
// writes the gradient in their dtype, one vectorised pass per row (libtorch 1.13's CPU softmax
// ran at ~10 ns per element: a tenth of the LM bench step). In bf16 with AVX-512, when the
// trainer says which gradient scale its backward will bring (ExpectedGradScale), the forward
// writes the gradient too, and the backward has nothing left to compute. On other devices the
// forward keeps the float32 softmax and the backward turns it into the gradient in place.
// libtorch's log_softmax + nll_loss instead zero-fills an N x V gradient, scatters into it and
// reads both back. Rows whose target is -100 carry no loss and no gradient.
#pragma once
#include <torch/types.h>

namespace ropelab::tasks {

// Every field is a scalar tensor on the logits' device (nothing is read back to the host).
struct CrossEntropy {
  torch::Tensor loss_sum;  // differentiable: sum of loss_n over the valid rows
  torch::Tensor nll_sum;   // sum of nll_n over the valid rows (no smoothing)
  torch::Tensor targets;   // valid rows
  torch::Tensor correct;   // valid rows whose argmax is the target
};

// logits_NV (any float dtype; computed in float32), target_N int64 with -100 = ignore.
CrossEntropy cross_entropy(const torch::Tensor& logits_NV, const torch::Tensor& target_N, double a,
                           double b);

// cross_entropy(model::linear(h, w), target, a, b) for hidden states h [N, in] and a weight
// w [V, in] (an LM head's: ModelImpl::logits_weight), the same values. In training under bf16
// CPU autocast (ExpectedGradScale set; a CPU with util/vec_bf16.h's AVX-512 forms and oneDNN's
// bf16 gemm) one node computes both: the logits in float32 from oneDNN's bf16 gemm (faster on
// the LM bench's [4096 x 256] x [256 x 8000] than libtorch's bf16 mm with its bf16 output), each
// row read once as bf16 while its gradient is written, the logits freed before the backward.
// Elsewhere the two calls.
CrossEntropy linear_cross_entropy(const torch::Tensor& h_NI, const torch::Tensor& w_VI,
                                  const torch::Tensor& target_N, double a, double b);

// While one lives, cross_entropy on this thread takes `scale` as the d(loss)/d(loss_sum) its
// caller will backpropagate (the trainer's 1 / the step's targets; 0: unknown). With bf16
// logits on a CPU with util/vec_bf16.h's AVX-512 forms the forward then writes the logits'
// gradient at that scale, while each row is in cache, and the backward hands it on (rescaled if
// another scale arrives): one pass over the logits instead of two.
class ExpectedGradScale {
 public:
  explicit ExpectedGradScale(double scale);
  ~ExpectedGradScale();
  ExpectedGradScale(const ExpectedGradScale&) = delete;
  ExpectedGradScale& operator=(const ExpectedGradScale&) = delete;
  static double current();

 private:
  double previous_;
};

// The path cross_entropy takes on devices other than the CPU (tensor ops: float32 softmax kept
// for the backward). It runs on any device, so the tests check it on the CPU against the fused
// kernel.
CrossEntropy cross_entropy_tensor_ops(const torch::Tensor& logits_NV, const torch::Tensor& target_N,
                                      double a, double b);

}  // namespace ropelab::tasks
