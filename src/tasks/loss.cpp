#include "tasks/loss.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <tuple>
#include <vector>

#include "model/linear.h"
#include "util/float_rows.h"
#include "util/gemm.h"
#include "util/vec_bf16.h"
#include "util/vec_kernels.h"

namespace ropelab::tasks {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The end of both forwards: what the backward needs, and the outputs {loss_sum, nll_N, arg_N}.
variable_list finish_forward(AutogradContext* ctx, const variable_list& saved, double a, double b,
                             const torch::Tensor& loss_N, const torch::Tensor& nll,
                             const torch::Tensor& arg) {
  ctx->save_for_backward(saved);
  ctx->saved_data["a"] = a;
  ctx->saved_data["b"] = b;
  ctx->mark_non_differentiable({nll, arg});
  return {loss_N.sum(), nll, arg};
}

// Other devices (tensor ops): the forward keeps the softmax, the backward turns it into the
// gradient in place. Inputs: logits [N, V] float32, target [N]; outputs as below.
struct DeviceCrossEntropy : public torch::autograd::Function<DeviceCrossEntropy> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits,
                               const torch::Tensor& target, double a, double b) {
    auto valid = target != -100;
    auto safe_t = target.masked_fill(valid.logical_not(), 0).unsqueeze(1);  // [N, 1]
    auto p = torch::softmax(logits, -1);
    auto [p_max, arg] = p.max(-1);
    // lse = x_c - log p_c at c = argmax: exact, and p_max >= 1/V never underflows.
    auto lse = logits.gather(1, arg.unsqueeze(1)).squeeze(1) - p_max.log();
    auto nll = (lse - logits.gather(1, safe_t).squeeze(1)) * valid;
    auto loss = a * nll;
    if (b != 0) {
      auto v = static_cast<double>(logits.size(1));
      loss = loss + b * (v * lse - logits.sum(-1)) * valid;
    }
    return finish_forward(ctx, {p, safe_t, valid}, a, b, loss, nll, arg);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    double a = ctx->saved_data["a"].toDouble(), b = ctx->saved_data["b"].toDouble();
    // The softmax is not needed after this: it becomes the gradient in place.
    auto grad = saved[0];
    if (b != 0) grad.sub_(b);
    grad.scatter_add_(1, saved[1], torch::full(saved[1].sizes(), -a, grad.options()));
    grad.mul_(saved[2].unsqueeze(1).to(grad.scalar_type()) * grad_out[0]);
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// bf16 logits on a CPU where util/vec_bf16.h's loops run vectorised (AVX-512, or AVX2's clones
// of the portable forms) are read and written in place.
bool in_place_bf16(const torch::Tensor& logits) {
  return logits.scalar_type() == torch::kBFloat16 && vec::bf16_rows_vectorised();
}
// A logit as the loss reads it: bf16 bits, or a float32 a bf16 gemm wrote, rounded to bf16 first.
float logit(uint16_t x) { return static_cast<float>(c10::BFloat16(x, c10::BFloat16::from_bits())); }
float logit(float x) { return static_cast<float>(c10::BFloat16(x)); }

// Rows [r0, r1) of the logits, x pointing at row r0 (In: bf16 bits or float32,
// vec::cross_entropy_row_fused_bf16), with their gradient at scale w written to g (row r0's,
// rows V apart: the same rows of the saved [N, V] gradient, or x itself), and each row's loss,
// nll and argmax. `cached`: g through the cache, for a gemm that reads it next.
template <class In>
void fused_rows(const In* x, int64_t r0, int64_t r1, int64_t V, const int64_t* t, double a,
                double b, float w, uint16_t* g, const torch::Tensor& loss, const torch::Tensor& nll,
                const torch::Tensor& arg, bool cached = false) {
  at::parallel_for(r0, r1, 8, [&](int64_t p0, int64_t p1) {
    std::vector<float> tmp(static_cast<size_t>(V));
    for (int64_t r = p0; r < p1; ++r) {
      float mx = 0, se = 0, sx = 0;
      int64_t am = 0;
      const bool valid = t[r] != -100;
      const In* x_r = x + (r - r0) * V;
      const float x_t = valid ? logit(x_r[t[r]]) : 0.0F;  // before g, which may be x, is written
      vec::cross_entropy_row_fused_bf16(x_r, V, static_cast<float>(b), valid ? w : 0.0F,
                                        valid ? t[r] : -1, static_cast<float>(a) * w,
                                        g + (r - r0) * V, tmp.data(), &mx, &se, &sx, &am,
                                        r + 1 < p1 ? x_r + V : nullptr, cached);
      const float l = mx + std::log(se);
      const float n = valid ? l - x_t : 0.0F;
      arg.data_ptr<int64_t>()[r] = am;
      nll.data_ptr<float>()[r] = n;
      loss.data_ptr<float>()[r] =
          valid ? static_cast<float>(a * n + b * (static_cast<double>(V) * l - sx)) : 0.0F;
    }
  });
}

// Each row's outputs: {loss_N, nll_N, arg_N}.
std::array<torch::Tensor, 3> row_outputs(int64_t N, const torch::TensorOptions& o) {
  auto f32 = o.dtype(torch::kFloat32);
  return {torch::empty({N}, f32), torch::empty({N}, f32),
          torch::empty({N}, o.dtype(torch::kInt64))};
}

// The outputs and the saved gradient of a forward that writes it: {loss_N, nll_N, arg_N, grad}.
std::array<torch::Tensor, 4> fused_outputs(int64_t N, int64_t V, const torch::TensorOptions& o) {
  auto [loss, nll, arg] = row_outputs(N, o);
  return {loss, nll, arg, torch::empty({N, V}, o.dtype(torch::kBFloat16))};
}

// FusedCrossEntropy's forward when it also writes the gradient (bf16 logits, AVX-512): the
// stats and the gradient of each row in one visit, the gradient kept for the backward.
variable_list forward_with_gradient(AutogradContext* ctx, const torch::Tensor& logits,
                                    const torch::Tensor& target, double a, double b,
                                    double grad_w) {
  const int64_t N = logits.size(0), V = logits.size(1);
  auto [loss, nll, arg, grad] = fused_outputs(N, V, logits.options());
  fused_rows(util::bf16_bits(logits), 0, N, V, target.data_ptr<int64_t>(), a, b,
             static_cast<float>(grad_w), util::bf16_bits(grad), loss, nll, arg);
  auto out = finish_forward(ctx, {grad}, a, b, loss, nll, arg);
  ctx->saved_data["grad_w"] = grad_w;
  return out;
}

// The scale that arrives (d loss / d loss_sum, one scalar for every row: the loss is a plain
// sum), read from the CPU tensor directly: item() would count as a host sync
// (util/sync_hook.h).
float arriving_scale(const torch::Tensor& grad_out) {
  return grad_out.defined() ? *grad_out.to(torch::kFloat32).contiguous().data_ptr<float>() : 0.0F;
}

// Inputs: logits [N, V] (any float dtype, read as float32), target [N]; outputs: loss_sum
// (differentiable), nll_N and argmax_N (not). The forward reads each row twice while it is in
// cache (max; exp-sum) and writes nothing of N x V; the backward recomputes the softmax from the
// saved logits and writes the gradient straight in the logits' dtype (no float32 copy of the
// logits either way under bf16 autocast).
//
// With an expected gradient scale w (ExpectedGradScale) and bf16 logits that need a gradient,
// the forward also writes the gradient at scale w, and keeps it instead of the logits; the
// backward returns it as it is when the scale that arrives is w (else rescaled).
struct FusedCrossEntropy : public torch::autograd::Function<FusedCrossEntropy> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& logits_in,
                               const torch::Tensor& target_in, double a, double b, double grad_w) {
    RECORD_FUNCTION("ropelab::cross_entropy", std::vector<c10::IValue>());
    auto logits = logits_in.contiguous();
    auto target = target_in.to(torch::kInt64).contiguous();
    const int64_t N = logits.size(0), V = logits.size(1);
    ctx->saved_data["grad_w"] = 0.0;
    if (grad_w > 0 && logits_in.requires_grad() && in_place_bf16(logits))
      return forward_with_gradient(ctx, logits, target, a, b, grad_w);
    auto f32 = logits.options().dtype(torch::kFloat32);
    auto lse = torch::empty({N}, f32), nll = torch::empty({N}, f32), loss = torch::empty({N}, f32);
    auto arg = torch::empty({N}, logits.options().dtype(torch::kInt64));
    const int64_t* t = target.data_ptr<int64_t>();
    float* lse_p = lse.data_ptr<float>();
    float* nll_p = nll.data_ptr<float>();
    float* loss_p = loss.data_ptr<float>();
    int64_t* arg_p = arg.data_ptr<int64_t>();
    const bool bf16 = in_place_bf16(logits);
    at::parallel_for(0, N, 8, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf;
      for (int64_t r = r0; r < r1; ++r) {
        float mx = 0, se = 0, sx = 0, x_t = 0;
        int64_t am = 0;
        const bool valid = t[r] != -100;
        if (bf16) {
          const uint16_t* x = util::bf16_bits(logits) + r * V;
          vec::logits_row_stats_bf16(x, V, &mx, &se, &sx, &am);
          if (valid) x_t = static_cast<float>(c10::BFloat16(x[t[r]], c10::BFloat16::from_bits()));
        } else {
          const float* x = util::float_run(logits, r * V, V, buf);
          vec::logits_row_stats(x, V, &mx, &se, &sx);
          while (am < V - 1 && x[am] != mx) ++am;
          if (valid) x_t = x[t[r]];
        }
        const float l = mx + std::log(se);
        arg_p[r] = am;
        lse_p[r] = l;
        const float n = valid ? l - x_t : 0.0F;
        nll_p[r] = n;
        loss_p[r] =
            valid ? static_cast<float>(a * n + b * (static_cast<double>(V) * l - sx)) : 0.0F;
      }
    });
    return finish_forward(ctx, {logits, target, lse}, a, b, loss, nll, arg);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const float w = arriving_scale(grad_out[0]);
    const auto grad_w = static_cast<float>(ctx->saved_data["grad_w"].toDouble());
    if (grad_w > 0) {  // the gradient of the forward pass, at scale grad_w
      const auto& g = saved[0];
      return {w == grad_w ? g : g.mul(w / grad_w), torch::Tensor(), torch::Tensor(),
              torch::Tensor(), torch::Tensor()};
    }
    const auto& logits = saved[0];
    const auto& target = saved[1];
    const auto& lse = saved[2];
    const auto a = static_cast<float>(ctx->saved_data["a"].toDouble());
    const auto b = static_cast<float>(ctx->saved_data["b"].toDouble());
    const int64_t N = logits.size(0), V = logits.size(1);
    auto grad = torch::empty_like(logits);
    const int64_t* t = target.data_ptr<int64_t>();
    const float* lse_p = lse.data_ptr<float>();
    if (in_place_bf16(logits)) {
      at::parallel_for(0, N, 8, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r) {
          const bool valid = t[r] != -100;
          vec::cross_entropy_row_grad_bf16(util::bf16_bits(logits) + r * V, V, lse_p[r], b,
                                           valid ? w : 0.0F, valid ? t[r] : -1, a * w,
                                           util::bf16_bits(grad) + r * V);
        }
      });
      return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    at::parallel_for(0, N, 8, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf, gbuf(static_cast<size_t>(V));
      for (int64_t r = r0; r < r1; ++r) {
        const bool valid = t[r] != -100;
        float* g =
            logits.scalar_type() == torch::kFloat32 ? grad.data_ptr<float>() + r * V : gbuf.data();
        vec::cross_entropy_row_grad(util::float_run(logits, r * V, V, buf), V, lse_p[r], b,
                                    valid ? w : 0.0F, g);
        if (valid) g[t[r]] -= a * w;
        util::store_float_run(g, grad, r * V, V);
      }
    });
    return {grad, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// `block` (a thread_local of the caller's, kept from call to call) with at least n elements of
// dtype o, the old one freed before a larger one is taken: a fresh block of the logits' size
// (65 MB at the LM bench's shape) now and then found no free block in the heap and faulted its
// pages in while the gemm wrote them (60-120 ms that step).
const torch::Tensor& grown(torch::Tensor& block, int64_t n, const torch::TensorOptions& o) {
  if (!block.defined() || block.numel() < n) {
    block = torch::Tensor();
    block = torch::empty({n}, o);
  }
  return block;
}

// n floats of this thread's scratch for LinearCrossEntropy's logits.
float* logits_scratch(int64_t n) {
  thread_local torch::Tensor scratch;
  return grown(scratch, n, torch::kFloat32).data_ptr<float>();
}

// The gradients of h and w that LinearCrossEntropy's forward leaves for its backward, at scale
// grad_w: dh [N, in] bf16 and dw [V, in] float32, each undefined where not needed.
struct HeadGrads {
  torch::Tensor dh, dw;
};

HeadGrads head_grads(const torch::Tensor& h_NI, int64_t V, bool need_h, bool need_w) {
  HeadGrads out;
  if (need_h) out.dh = torch::empty({h_NI.size(0), h_NI.size(1)}, h_NI.options());
  if (need_w) out.dw = torch::empty({V, h_NI.size(1)}, h_NI.options().dtype(torch::kFloat32));
  return out;
}

// LinearCrossEntropy's forward where util::bf16_products_on_mm() (AMX), and its gradients with it.
// Up to 512 rows at a time, as many as fill 8 MiB of bf16 logits (512 at a vocabulary of 8000,
// 128 at 32k): the logits from libtorch's bf16 mm into a bf16 block kept from call to call,
// the rows' loss turning it into their gradient in place, and the two gradient gemms reading
// that while it is in cache: dh's rows = g W (float32, rounded to bf16), dw += g^T h (float32
// across the blocks). The [N, V] logits and their gradient never leave the cache: on 2 cores of
// an AMX Xeon, memory ran at 8-12 GB/s and the gemms outran it (BENCHMARKS.md).
HeadGrads bf16_head_in_blocks(const torch::Tensor& h_NI, const torch::Tensor& w16_VI,
                              const torch::Tensor& target, double a, double b, double grad_w,
                              bool need_h, bool need_w, const torch::Tensor& loss,
                              const torch::Tensor& nll, const torch::Tensor& arg) {
  const int64_t N = h_NI.size(0), I = h_NI.size(1), V = w16_VI.size(0);
  const int64_t rows = std::clamp<int64_t>((int64_t{8} << 20) / (2 * V) / 16 * 16, 16, 512);
  thread_local torch::Tensor block_store, dh_store;
  const auto& block = grown(block_store, rows * V, h_NI.options());           // [rows, V] bf16
  float* acc = grown(dh_store, rows * I, torch::kFloat32).data_ptr<float>();  // [rows, in]
  HeadGrads out = head_grads(h_NI, V, need_h, need_w);
  const uint16_t *h = util::bf16_bits(h_NI), *w16 = util::bf16_bits(w16_VI);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    auto logits_nV = block.narrow(0, 0, n * V).view({n, V});
    at::mm_out(logits_nV, h_NI.narrow(0, r0, n), w16_VI.t());
    uint16_t* g = util::bf16_bits(logits_nV);
    fused_rows(g, r0, r0 + n, V, target.data_ptr<int64_t>(), a, b, static_cast<float>(grad_w), g,
               loss, nll, arg, /*cached=*/true);
    if (need_h) {
      util::gemm_bf16(false, false, n, I, V, g, V, w16, I, 0.0F, acc, I);
      vec::float_to_bf16(acc, util::bf16_bits(out.dh) + r0 * I, n * I);
    }
    if (need_w)
      util::gemm_bf16(true, false, V, I, n, g, V, h + r0 * I, I, r0 == 0 ? 0.0F : 1.0F,
                      out.dw.data_ptr<float>(), I);
  }
  return out;
}

// bf16_head_in_blocks where no bf16 gemm runs natively (!util::bf16_gemm_native(): an AVX2 CPU),
// so that each product widens its bf16 operands to float32 for oneDNN's sgemm. The weight is
// widened once for the three products of every block; as many rows at a time as fill 16 MiB of
// float32 logits (512 at a vocabulary of 8000: 0.93x the step of 256 rows, whose blocks added
// twice as many passes over dw), whose loss writes their bf16 gradient to a block
// kept from call to call, and the two gradient gemms read that while it is in cache: dh's rows =
// g W (float32, rounded to bf16), dw += g^T h. The [N, V] logits, in float32 or bf16, never go to
// memory, where the head in halves (LinearCrossEntropy) wrote and read them three times.
HeadGrads widened_head_in_blocks(const torch::Tensor& h_NI, const torch::Tensor& w16_VI,
                                 const torch::Tensor& target, double a, double b, double grad_w,
                                 bool need_h, bool need_w, const torch::Tensor& loss,
                                 const torch::Tensor& nll, const torch::Tensor& arg) {
  const int64_t N = h_NI.size(0), I = h_NI.size(1), V = w16_VI.size(0);
  const int64_t rows = std::clamp<int64_t>((int64_t{16} << 20) / (4 * V) / 16 * 16, 16, 512);
  auto w_VI = torch::empty({V, I}, h_NI.options().dtype(torch::kFloat32));
  float* w = w_VI.data_ptr<float>();
  util::widen_bf16(util::bf16_bits(w16_VI), V * I, w);
  thread_local torch::Tensor g_store, dh_store;
  uint16_t* g = util::bf16_bits(grown(g_store, rows * V, h_NI.options()));    // [rows, V] bf16
  float* acc = grown(dh_store, rows * I, torch::kFloat32).data_ptr<float>();  // [rows, in]
  HeadGrads out = head_grads(h_NI, V, need_h, need_w);
  const uint16_t* h = util::bf16_bits(h_NI);
  float* l = logits_scratch(rows * V);
  for (int64_t r0 = 0; r0 < N; r0 += rows) {
    const int64_t n = std::min(rows, N - r0);
    util::gemm_bf16_widened(false, true, n, V, I, h + r0 * I, I, w, I, 0.0F, l, V);
    fused_rows(l, r0, r0 + n, V, target.data_ptr<int64_t>(), a, b, static_cast<float>(grad_w), g,
               loss, nll, arg, /*cached=*/true);
    if (need_h) {
      util::gemm_bf16_widened(false, false, n, I, V, g, V, w, I, 0.0F, acc, I);
      vec::float_to_bf16(acc, util::bf16_bits(out.dh) + r0 * I, n * I);
    }
    if (need_w)
      util::gemm_bf16(true, false, V, I, n, g, V, h + r0 * I, I, r0 == 0 ? 0.0F : 1.0F,
                      out.dw.data_ptr<float>(), I);
  }
  return out;
}

// cross_entropy(linear(h, w)) under bf16 autocast in training (linear_cross_entropy below).
// Inputs: h [N, in] bf16 (contiguous), w [V, in] float32 (the parameter) or bf16, target [N];
// outputs as FusedCrossEntropy's. The forward writes the logits in float32 with oneDNN's bf16
// gemm, and fused_rows reads each row once, rounded to bf16 as it loads: the values of the
// bf16 logits. Half the rows at a time, so that the float32 logits take the bytes the bf16 ones
// took, in a scratch block kept from step to step (logits_scratch). Kept for the backward: h,
// the bf16 weight and the logits' gradient at scale grad_w. On AMX (bf16_head_in_blocks) and
// where the products are widened (widened_head_in_blocks) the forward also takes the gradients of
// h and w, block by block, and keeps those instead.
struct LinearCrossEntropy : public torch::autograd::Function<LinearCrossEntropy> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& h_NI,
                               const torch::Tensor& w_VI, const torch::Tensor& target_in, double a,
                               double b, double grad_w) {
    RECORD_FUNCTION("ropelab::linear_cross_entropy", std::vector<c10::IValue>());
    auto target = target_in.to(torch::kInt64).contiguous();
    auto w16_VI = w_VI.to(torch::kBFloat16).contiguous();
    const int64_t N = h_NI.size(0), I = h_NI.size(1), V = w16_VI.size(0);
    ctx->saved_data["grad_w"] = grad_w;
    ctx->saved_data["float_weight"] = w_VI.scalar_type() == torch::kFloat32;
    const bool widened = !util::bf16_gemm_native();
    const bool kept = util::bf16_products_on_mm() || widened;
    ctx->saved_data["grads_kept"] = kept;
    if (kept) {
      auto [loss, nll, arg] = row_outputs(N, h_NI.options());
      auto g = (widened ? widened_head_in_blocks : bf16_head_in_blocks)(
          h_NI, w16_VI, target, a, b, grad_w, h_NI.requires_grad(), w_VI.requires_grad(), loss, nll,
          arg);
      return finish_forward(ctx, {g.dh, g.dw}, a, b, loss, nll, arg);
    }
    auto [loss, nll, arg, grad] = fused_outputs(N, V, h_NI.options());
    const int64_t half = (N + 1) / 2;
    float* l = logits_scratch(half * V);
    for (int64_t r0 = 0; r0 < N; r0 += half) {
      const int64_t n = std::min(half, N - r0);
      util::gemm_bf16(false, true, n, V, I, util::bf16_bits(h_NI) + r0 * I, I,
                      util::bf16_bits(w16_VI), I, 0.0F, l, V);
      fused_rows(l, r0, r0 + n, V, target.data_ptr<int64_t>(), a, b, static_cast<float>(grad_w),
                 util::bf16_bits(grad) + r0 * V, loss, nll, arg);
    }
    return finish_forward(ctx, {h_NI, w16_VI, grad}, a, b, loss, nll, arg);
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const float w = arriving_scale(grad_out[0]);
    const auto grad_w = static_cast<float>(ctx->saved_data["grad_w"].toDouble());
    const bool float_weight = ctx->saved_data["float_weight"].toBool();
    torch::Tensor dh, dw;
    if (ctx->saved_data["grads_kept"].toBool()) {  // at scale grad_w
      dh = saved[0];
      dw = saved[1];
      if (w != grad_w) {
        if (dh.defined()) dh = dh.mul(w / grad_w);
        if (dw.defined()) dw = dw.mul(w / grad_w);
      }
      if (dw.defined() && !float_weight) dw = dw.to(torch::kBFloat16);
    } else {
      auto g_NV = w == grad_w ? saved[2] : saved[2].mul(w / grad_w);
      std::tie(dh, dw) =
          model::bf16_linear_grads(g_NV, saved[0], saved[1], float_weight, ctx->needs_input_grad(0),
                                   ctx->needs_input_grad(1));
    }
    return {dh, dw, torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// The three outputs of either Function as the public sums.
CrossEntropy sums(const variable_list& out, const torch::Tensor& target_N) {
  CrossEntropy r;
  r.loss_sum = out[0];
  torch::NoGradGuard ng;
  auto valid = target_N != -100;
  r.nll_sum = out[1].sum();
  r.targets = valid.sum();
  r.correct = ((out[2] == target_N) & valid).sum();
  return r;
}

thread_local double t_expected_grad_scale = 0;

}  // namespace

ExpectedGradScale::ExpectedGradScale(double scale) : previous_(t_expected_grad_scale) {
  t_expected_grad_scale = scale;
}
ExpectedGradScale::~ExpectedGradScale() { t_expected_grad_scale = previous_; }
double ExpectedGradScale::current() { return t_expected_grad_scale; }

CrossEntropy cross_entropy(const torch::Tensor& logits_NV, const torch::Tensor& target_N, double a,
                           double b) {
  if (!logits_NV.device().is_cpu()) return cross_entropy_tensor_ops(logits_NV, target_N, a, b);
  return sums(FusedCrossEntropy::apply(logits_NV, target_N, a, b, ExpectedGradScale::current()),
              target_N);
}

CrossEntropy linear_cross_entropy(const torch::Tensor& h_NI, const torch::Tensor& w_VI,
                                  const torch::Tensor& target_N, double a, double b) {
  const double grad_w = ExpectedGradScale::current();
  const bool fused = grad_w > 0 && torch::GradMode::is_enabled() &&
                     (h_NI.requires_grad() || w_VI.requires_grad()) && h_NI.dim() == 2 &&
                     model::bf16_linear(h_NI, w_VI) && util::bf16_gemm_available() &&
                     vec::bf16_rows_vectorised();  // its rows' loop (else the two calls)
  if (!fused) return cross_entropy(model::linear(h_NI, w_VI), target_N, a, b);
  auto h16_NI = h_NI.to(torch::kBFloat16).contiguous();
  return sums(LinearCrossEntropy::apply(h16_NI, w_VI.contiguous(), target_N, a, b, grad_w),
              target_N);
}

CrossEntropy cross_entropy_tensor_ops(const torch::Tensor& logits_NV, const torch::Tensor& target_N,
                                      double a, double b) {
  return sums(DeviceCrossEntropy::apply(logits_NV.to(torch::kFloat32), target_N, a, b), target_N);
}

}  // namespace ropelab::tasks
