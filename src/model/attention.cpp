#include "model/attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>
#include <torch/nn/functional.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "compat/torch_compat.h"
#include "model/bf16_attention.h"
#include "model/bias_rows.h"
#include "model/dropout.h"
#include "model/linear.h"
#include "model/ring_attention.h"
#include "model/span.h"
#include "model/tiled_attention.h"
#include "util/device.h"
#include "util/float_rows.h"
#include "util/gemm.h"
#include "util/vec_bf16.h"
#include "util/vec_kernels.h"

namespace ropelab::model {

namespace F = torch::nn::functional;

namespace {

// [1 or B, 1, T, S] bool, true where query (at q_offset + t) may see key s under the mask's span
// (model/span.h), padding and documents (self-attention without a cache: queries and keys are
// the same tokens); undefined where every pair is allowed.
torch::Tensor allowed_B1TS(const AttnMask& m, int64_t T, int64_t S, int64_t q_offset,
                           torch::Device dev) {
  TORCH_CHECK(!m.doc_BT.defined() || (m.doc_BT.size(1) == T && T == S),
              "document masks are for self-attention without a cache (", m.doc_BT.size(1),
              " documents ids, ", T, " queries, ", S, " keys)");
  auto span = m.span().allowed_TS(q_offset, T, m.k_offset, S, dev);
  return restrict_to_tokens(span.defined() ? span.view({1, 1, T, S}) : span, m.key_pad_BS, m.doc_BT,
                            m.doc_BT);
}

constexpr int64_t kChunk = 64;
constexpr float kMasked = -1e30F;  // exp(kMasked - max) is 0 in float32
constexpr double kEps = 1e-6;

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The bf16 rows of MaskedSoftmax below (util/vec_bf16.h).
// out [B, N, T, S] bf16 and each row's max and 1 / sum of exp (stats [rows, 2], for the backward).
std::pair<torch::Tensor, torch::Tensor> softmax_bf16_forward(const torch::Tensor& scores,
                                                             const BiasRows& br,
                                                             const BiasRows& mr) {
  const int64_t N = scores.size(1), T = scores.size(2), S = scores.size(3);
  const int64_t rows = scores.numel() / S;
  auto out = torch::empty_like(scores);
  auto stats = torch::empty({rows, 2}, scores.options().dtype(torch::kFloat32));
  std::vector<float> zeros(static_cast<size_t>(S), 0.0F);
  at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> tmp(static_cast<size_t>(S));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (N * T), n = (r / T) % N, i = r % T;
      float* st = stats.data_ptr<float>() + 2 * r;
      vec::softmax_row_bf16(util::bf16_bits(scores) + r * S, br.row(b, n, i, zeros.data()),
                            mr.row(b, n, i, zeros.data()), util::bf16_bits(out) + r * S, S,
                            tmp.data(), st, st + 1);
    }
  });
  return {out, stats};
}

// dx = p (g - sum p g), p recomputed in float32 from the saved scores, bias, mask and stats.
torch::Tensor softmax_bf16_backward(const torch::Tensor& scores, const torch::Tensor& bias,
                                    const torch::Tensor& mask, const torch::Tensor& stats,
                                    const torch::Tensor& g_in) {
  auto g = g_in.to(torch::kBFloat16).contiguous();
  auto gs = torch::empty_like(scores);
  const int64_t B = scores.size(0), N = scores.size(1), T = scores.size(2), S = scores.size(3);
  BiasRows br(bias, B, N, T, S), mr(mask, B, N, T, S);
  std::vector<float> zeros(static_cast<size_t>(S), 0.0F);
  at::parallel_for(0, scores.numel() / S, 16, [&](int64_t r0, int64_t r1) {
    std::vector<float> tmp(static_cast<size_t>(S));
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t b = r / (N * T), n = (r / T) % N, i = r % T;
      const float* st = stats.data_ptr<float>() + 2 * r;
      vec::softmax_backward_row_bf16(util::bf16_bits(scores) + r * S, br.row(b, n, i, zeros.data()),
                                     mr.row(b, n, i, zeros.data()), st[0], st[1],
                                     util::bf16_bits(g) + r * S, util::bf16_bits(gs) + r * S, S,
                                     tmp.data());
    }
  });
  return gs;
}

// softmax(scores + bias + mask) over the last dim, in float32, written once as float32 (kept for
// the backward) and, when out_dtype differs, once more in out_dtype (what the P v matmul reads
// under bf16 autocast). The unfused ops make the sums and the casts in separate passes.
// Backward: dx = p (g - sum p g), one vectorised pass per row; the bias gets the sum of dx over
// its broadcast dims.
//
// bf16 scores and output with no bias gradient, on a CPU with util/vec_bf16.h's AVX-512 forms:
// the rows are read and written as bf16 (float32 in registers). The backward recomputes the
// float32 p from the saved bf16 scores and each row's max and 1 / sum (FlashAttention's
// recomputation, Dao et al. 2022): the same p as the float32 copy it replaces, which took twice
// the scores' memory.
struct MaskedSoftmax : public torch::autograd::Function<MaskedSoftmax> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& scores_in,
                               const torch::Tensor& bias, const torch::Tensor& mask,
                               c10::ScalarType out_dtype) {
    RECORD_FUNCTION("ropelab::masked_softmax", std::vector<c10::IValue>());
    auto scores = scores_in.contiguous();
    const int64_t B = scores.size(0), N = scores.size(1), T = scores.size(2), S = scores.size(3);
    ctx->saved_data["in_dtype"] = scores_in.scalar_type();
    ctx->saved_data["bias_sizes"] = bias.sizes().vec();
    ctx->saved_data["bias_dtype"] = bias.scalar_type();
    ctx->saved_data["bias_grad"] = bias.numel() > 0 && bias.requires_grad();
    const bool bf16 = scores.scalar_type() == torch::kBFloat16 && out_dtype == torch::kBFloat16 &&
                      vec::bf16_simd() && !(bias.numel() > 0 && bias.requires_grad());
    ctx->saved_data["recompute_bf16"] = bf16;
    if (bf16) {
      auto [out, stats] =
          softmax_bf16_forward(scores, BiasRows(bias, B, N, T, S), BiasRows(mask, B, N, T, S));
      ctx->save_for_backward({scores, bias, mask, stats});
      return {out};
    }
    auto f32 = scores.options().dtype(torch::kFloat32);
    auto p32 = torch::empty({B, N, T, S}, f32);
    const bool cast_out = out_dtype != torch::kFloat32;
    auto out = cast_out ? torch::empty({B, N, T, S}, f32.dtype(out_dtype)) : p32;
    BiasRows br(bias, B, N, T, S), mr(mask, B, N, T, S);
    std::vector<float> zeros(static_cast<size_t>(S), 0.0F);
    at::parallel_for(0, B * N * T, 16, [&](int64_t r0, int64_t r1) {
      std::vector<float> buf;
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / (N * T), n = (r / T) % N, i = r % T;
        float* p = p32.data_ptr<float>() + r * S;
        vec::softmax_row(util::float_run(scores, r * S, S, buf), br.row(b, n, i, zeros.data()),
                         mr.row(b, n, i, zeros.data()), p, S);
        if (cast_out) util::store_float_run(p, out, r * S, S);
      }
    });
    ctx->save_for_backward({p32});
    return {out};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    if (ctx->saved_data["recompute_bf16"].toBool())
      return {softmax_bf16_backward(saved[0], saved[1], saved[2], saved[3], grad_out[0]),
              torch::Tensor(), torch::Tensor(), torch::Tensor()};
    auto p32 = saved[0];
    auto g = grad_out[0].contiguous();
    const auto in_dtype = ctx->saved_data["in_dtype"].toScalarType();
    const bool bias_grad = ctx->saved_data["bias_grad"].toBool();
    const int64_t S = p32.size(-1), rows = p32.numel() / S;
    auto gs = torch::empty(p32.sizes(), p32.options().dtype(in_dtype));
    // The bias's gradient is summed from float32 rows.
    auto gs32 = in_dtype == torch::kFloat32 ? gs
                : bias_grad                 ? torch::empty_like(p32)
                                            : torch::Tensor();
    at::parallel_for(0, rows, 16, [&](int64_t r0, int64_t r1) {
      std::vector<float> gbuf, obuf(static_cast<size_t>(S));
      for (int64_t r = r0; r < r1; ++r) {
        float* dx = gs32.defined() ? gs32.data_ptr<float>() + r * S : obuf.data();
        vec::softmax_backward_row(p32.data_ptr<float>() + r * S, util::float_run(g, r * S, S, gbuf),
                                  dx, S);
        if (in_dtype != torch::kFloat32) util::store_float_run(dx, gs, r * S, S);
      }
    });
    torch::Tensor g_bias;
    if (bias_grad)
      g_bias = at::sum_to(gs32, ctx->saved_data["bias_sizes"].toIntVector())
                   .to(ctx->saved_data["bias_dtype"].toScalarType());
    return {gs, g_bias, torch::Tensor(), torch::Tensor()};
  }
};

// [..., M, K] @ [..., K, N] with equal leading dims, as one mm per leading index: libtorch 1.13's
// CPU bmm ran these shapes (64 x 256 x 64 x 256) at a fifth of the speed of the same gemms issued
// one by one (docs/platform-notes.md).
torch::Tensor mm_loop(const torch::Tensor& a, const torch::Tensor& b) {
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  auto a3 = a.reshape({-1, M, K}), b3 = b.reshape({-1, K, N});
  auto out = torch::empty({a3.size(0), M, N}, a.options());
  for (int64_t i = 0; i < a3.size(0); ++i) {
    auto o = out.select(0, i);
    matmul_into(o, a3.select(0, i), b3.select(0, i));
  }
  auto sizes = a.sizes().vec();
  sizes.back() = N;
  return out.view(sizes);
}

// a @ b through mm_loop, forward and backward (da = g b^T, db = a^T g).
struct LoopMatmul : public torch::autograd::Function<LoopMatmul> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a,
                               const torch::Tensor& b) {
    ctx->save_for_backward({a, b});
    return mm_loop(a, b);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    auto g = grad_out[0];
    torch::Tensor ga, gb;
    if (ctx->needs_input_grad(0)) ga = mm_loop(g, saved[1].transpose(-2, -1));
    if (ctx->needs_input_grad(1)) gb = mm_loop(saved[0].transpose(-2, -1), g);
    return {ga, gb};
  }
};

// a @ b on bf16 inputs under CPU autocast (leading dims equal), as torch::matmul: one bmm on the
// inputs flattened to 3-D (a copy only where a view cannot flatten, once, kept for the backward),
// but with b's gradient in b's layout: where b is a transposed view (k^T in q k^T), db = (g^T
// a)^T, so that k's gradient comes contiguous (libtorch's matmul gave it transposed, and RoPE's
// backward copied it).
struct Bf16Matmul : public torch::autograd::Function<Bf16Matmul> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& a,
                               const torch::Tensor& b) {
    const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
    auto a3 = a.reshape({-1, M, K}), b3 = b.reshape({-1, K, N});
    ctx->save_for_backward({a3, b3});
    ctx->saved_data["a_sizes"] = a.sizes();
    ctx->saved_data["b_sizes"] = b.sizes();
    auto sizes = a.sizes().vec();
    sizes.back() = N;
    return bf16_matmul(a3, b3).view(sizes);
  }
  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto &a3 = saved[0], &b3 = saved[1];
    auto g3 = grad_out[0].reshape({-1, a3.size(1), b3.size(2)});
    torch::Tensor ga, gb;
    if (ctx->needs_input_grad(0))
      ga = bf16_matmul(g3, b3.transpose(1, 2)).view(ctx->saved_data["a_sizes"].toIntVector());
    if (ctx->needs_input_grad(1))
      gb = (b3.stride(1) == 1 && b3.stride(2) != 1
                ? bf16_matmul(g3.transpose(1, 2), a3).transpose(1, 2)
                : bf16_matmul(a3.transpose(1, 2), g3))
               .view(ctx->saved_data["b_sizes"].toIntVector());
    return {ga, gb};
  }
};

// Whether a @ b (equal leading dims, on the CPU) is a bf16 product, or one that bf16 autocast
// makes one, where libtorch's bf16 matmul has no kernel of its own (slow, and summing in bf16:
// util/gemm.h). Such products go to Bf16Matmul, whose products are model::bf16_matmul's.
bool widened_bf16(const torch::Tensor& a, const torch::Tensor& b) {
  if (util::bf16_gemm_native() || !util::bf16_gemm_available() || !a.device().is_cpu() ||
      a.dim() < 3 || a.dim() != b.dim() ||
      a.sizes().slice(0, a.dim() - 2) != b.sizes().slice(0, b.dim() - 2))
    return false;
  auto low_or_float = [](const torch::Tensor& t) {
    return t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kFloat32;
  };
  const bool cast = compat::autocast_enabled(c10::DeviceType::CPU) &&
                    compat::autocast_dtype(c10::DeviceType::CPU) == torch::kBFloat16;
  return (a.scalar_type() == torch::kBFloat16 && b.scalar_type() == torch::kBFloat16) ||
         (cast && low_or_float(a) && low_or_float(b));
}

// torch::matmul, but a widened_bf16 product through Bf16Matmul (the linear attention's).
torch::Tensor products(const torch::Tensor& a, const torch::Tensor& b) {
  return widened_bf16(a, b) ? Bf16Matmul::apply(a.to(torch::kBFloat16), b.to(torch::kBFloat16))
                            : torch::matmul(a, b);
}

}  // namespace

torch::Tensor batched_matmul(const torch::Tensor& a, const torch::Tensor& b) {
  // The leading dims agree (no broadcasting), on the CPU.
  const bool batched = a.device().is_cpu() && a.dim() >= 3 && a.dim() == b.dim() &&
                       a.sizes().slice(0, a.dim() - 2) == b.sizes().slice(0, b.dim() - 2);
  const bool autocast = compat::autocast_enabled(c10::DeviceType::CPU);
  const bool grad = torch::GradMode::is_enabled() && (a.requires_grad() || b.requires_grad());
  // bf16 under autocast runs through oneDNN (fast); with autograd, b's gradient in b's layout.
  const bool bf16 = a.scalar_type() == torch::kBFloat16 && b.scalar_type() == torch::kBFloat16;
  if (batched && autocast && grad && bf16) return Bf16Matmul::apply(a, b);
  if (widened_bf16(a, b)) return Bf16Matmul::apply(a.to(torch::kBFloat16), b.to(torch::kBFloat16));
  // One mm per leading index: only float32 without autocast.
  if (!batched || autocast || a.scalar_type() != torch::kFloat32 ||
      b.scalar_type() != torch::kFloat32)
    return torch::matmul(a, b);
  return grad ? LoopMatmul::apply(a, b) : mm_loop(a, b);
}

torch::Tensor masked_softmax(const torch::Tensor& scores_BNTS, const torch::Tensor& bias,
                             const torch::Tensor& mask, c10::ScalarType out_dtype) {
  if (!scores_BNTS.device().is_cpu() || scores_BNTS.dim() != 4 ||
      (mask.defined() && mask.requires_grad())) {
    auto s = scores_BNTS.to(torch::kFloat32);
    if (bias.defined()) s = s + bias;
    if (mask.defined()) s = s + mask;
    return torch::softmax(s, -1).to(out_dtype);
  }
  // A custom autograd function takes no undefined tensor: an empty one stands for "none".
  auto none = torch::empty({0}, scores_BNTS.options().dtype(torch::kFloat32));
  return MaskedSoftmax::apply(scores_BNTS, bias.defined() ? bias : none,
                              mask.defined() ? mask : none, out_dtype)[0];
}

AttnMask AttnMask::with_bias(int64_t T, int64_t S, int64_t q_offset, torch::Device dev) const {
  AttnMask m = *this;
  if (!restricted()) return m;
  auto allowed = allowed_B1TS(*this, T, S, q_offset, dev);
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(dev);
  m.bias_B1TS =
      allowed.defined()
          ? torch::zeros(allowed.sizes(), opts).masked_fill_(allowed.logical_not(), kMasked)
          : torch::zeros({1, 1, T, S}, opts);
  return m;
}

bool uses_kernel_causal(const AttnMask& mask, bool has_bias, int64_t q_offset, int64_t T,
                        int64_t S) {
  // The kernels' own causal mask is aligned at the top left: it is this mask only when queries
  // and keys start together and nothing else is added. (bias_B1TS is only this mask again.)
  return mask.causal && !mask.key_pad_BS.defined() && mask.span().global() && mask.k_offset == 0 &&
         !mask.doc_BT.defined() && !has_bias && q_offset == 0 && T == S;
}

torch::Tensor fused_attention(const torch::Tensor& q, const torch::Tensor& k,
                              const torch::Tensor& v, const ScoreBias& score_bias,
                              const AttnMask& mask, int64_t q_offset, double dropout,
                              bool training) {
  const int64_t T = q.size(2), S = k.size(2), H = v.size(3);
  const torch::Tensor bias = score_bias.defined() ? score_bias.whole() : torch::Tensor();
  const bool own_causal = uses_kernel_causal(mask, bias.defined(), q_offset, T, S);
  torch::Tensor add;
  if (!own_causal) {
    add = mask.bias_B1TS;
    if (!add.defined() && mask.restricted())
      add = mask.with_bias(T, S, q_offset, q.device()).bias_B1TS;
    if (bias.defined()) add = add.defined() ? bias + add : bias;
  }
  // One dtype for all (under bf16 autocast the projections are bf16; rotated q and k may have
  // been promoted to float32 by their float32 tables).
  const auto dt = v.scalar_type();
  return compat::sdpa(q.to(dt), k.to(dt), v, add.defined() ? add.to(dt) : add,
                      training ? dropout : 0.0, own_causal,
                      1.0 / std::sqrt(static_cast<double>(H)));
}

namespace {
// The tiled kernel's form of a mask.
TileMask tile_mask_of(const AttnMask& mask, int64_t q_offset) {
  TileMask tm;
  static_cast<Span&>(tm) = mask.span();
  tm.q_offset = q_offset;
  tm.key_pad_BS = mask.key_pad_BS;
  tm.doc_q_BT = tm.doc_k_BS = mask.doc_BT;
  return tm;
}
}  // namespace

bool uses_tiled_attention(torch::Device dev, bool has_dense_bias, bool has_dropout, int64_t T,
                          int64_t S) {
  return dev.is_cpu() && !has_dense_bias && !has_dropout && T >= kTiledFrom && S >= kTiledFrom;
}

torch::Tensor log_visible_keys(const AttnMask& m, int64_t T, int64_t S, int64_t q_offset,
                               torch::Device dev) {
  if (m.doc_BT.defined()) {  // count the allowed keys of each row
    auto allowed = allowed_B1TS(AttnMask{{}, m.causal, {}, m.window, m.chunk, m.k_offset, m.doc_BT},
                                T, S, q_offset, dev);
    return allowed.sum(-1, true).clamp_min(1).to(torch::kFloat32).log();
  }
  return m.span()
      .visible_T(q_offset, T, m.k_offset, S)
      .clamp_min(1)
      .to(torch::kFloat32)
      .log()
      .to(dev)
      .view({1, 1, T, 1});
}

torch::Tensor softmax_attention(const torch::Tensor& q, const torch::Tensor& k,
                                const torch::Tensor& v, const ScoreBias& score_bias,
                                const AttnMask& mask, int64_t q_offset, double dropout,
                                bool training, const torch::Tensor& sink_N) {
  // On a GPU: libtorch's fused kernels (flash, memory-efficient or cuDNN attention, with their
  // dropout on the device's generator; the score-bias families and key padding as one additive
  // mask), unless the run must be bit-reproducible (run.deterministic).
  // The scale is 1/sqrt(head dim): the values' width (PoPE's q and k are twice as wide).
  int64_t T = q.size(2), S = k.size(2), H = v.size(3);
  // Where the tiled kernel computes the same function: a long sequence, no stored score bias
  // (CoPE, PaTH), no dropout on the probabilities, keys numbered from 0 (a cache that dropped its
  // oldest keys runs the quadratic form, which its decoding steps of a few queries do anyway).
  const bool tileable = score_bias.tileable() && !(dropout > 0 && training) && T >= kTiledFrom &&
                        S >= kTiledFrom && q.size(-1) == H && mask.k_offset == 0;
  // (The fused kernels take no sink column: sinks run the tiled or the unfused form.)
  if (q.is_cuda() && compat::has_sdpa() && !device::deterministic() && !sink_N.defined()) {
    // The fused kernels take a score bias only as a stored T x S mask: a long sequence with a
    // tileable bias (T5, ALiBi, Kerple, FIRE, FoX) takes the tiled kernel instead.
    if (!(score_bias.defined() && tileable))
      return fused_attention(q, k, v, score_bias, mask, q_offset, dropout, training);
    return tiled_attention(q, k, v, tile_mask_of(mask, q_offset), score_bias);
  }
  // Long sequences on the CPU (and with sinks on a GPU): the tiled kernel (O(T) memory, causal
  // and out-of-window tiles skipped, each tile's score bias computed on the fly).
  if (tileable && (q.device().is_cpu() || sink_N.defined()))
    return tiled_attention(q, k, v, tile_mask_of(mask, q_offset), score_bias, {}, sink_N);
  const torch::Tensor bias = score_bias.defined() ? score_bias.whole() : torch::Tensor();
  // The scores' matmul ran in the inputs' dtype (bf16 under autocast); the softmax reads them,
  // adds the position bias and the mask and normalises in float32 in one pass (masked_softmax).
  const double scale = 1.0 / std::sqrt(static_cast<double>(H));
  torch::Tensor mask_bias = mask.bias_B1TS;
  if (!mask_bias.defined() && mask.restricted())
    mask_bias = mask.with_bias(T, S, q_offset, q.device()).bias_B1TS;
  // bf16 on the CPU: 64 query rows of a head at a time, in cache (bf16_attention.h).
  if (!sink_N.defined() && !(dropout > 0 && training) &&
      uses_bf16_attention(q, k, v, bias, mask_bias))
    return bf16_attention(q, k, v, bias, mask_bias, scale);
  auto scores = batched_matmul(q * scale, k.transpose(-2, -1));
  if (sink_N.defined()) {  // one more column per row, the sink's, with no value
    auto s = scores.to(torch::kFloat32);
    if (bias.defined()) s = s + bias;
    if (mask_bias.defined()) s = s + mask_bias;
    const int64_t B = s.size(0), N = s.size(1);
    auto sink = sink_N.to(torch::kFloat32).view({1, N, 1, 1}).expand({B, N, T, 1});
    auto p = torch::softmax(torch::cat({s.expand({B, N, T, S}), sink}, -1), -1).narrow(-1, 0, S);
    return batched_matmul(model::dropout(p, dropout, training).to(v.scalar_type()), v);
  }
  if (dropout > 0 && training) {
    auto p = masked_softmax(scores, bias, mask_bias, torch::kFloat32);
    return batched_matmul(model::dropout(p, dropout, training).to(v.scalar_type()), v);
  }
  return batched_matmul(masked_softmax(scores, bias, mask_bias, v.scalar_type()), v);
}

torch::Tensor linear_attention_quadratic(const torch::Tensor& qn, const torch::Tensor& kn,
                                         const torch::Tensor& qd, const torch::Tensor& kd,
                                         const torch::Tensor& v, const AttnMask& mask,
                                         int64_t q_offset) {
  int64_t T = qn.size(2), S = kn.size(2);
  auto allowed = allowed_B1TS(mask, T, S, q_offset, qn.device());
  auto a =
      allowed.defined() ? allowed.to(qn.scalar_type()) : torch::ones({1, 1, T, S}, qn.options());
  auto num = products(products(qn, kn.transpose(-2, -1)) * a, v);
  auto den = (products(qd, kd.transpose(-2, -1)) * a).sum(-1, true);
  return num / (den + kEps);
}

torch::Tensor linear_attention(const torch::Tensor& qn, const torch::Tensor& kn_in,
                               const torch::Tensor& qd, const torch::Tensor& kd_in,
                               const torch::Tensor& v_in, const AttnMask& mask, int64_t q_offset) {
  int64_t T = qn.size(2), S = kn_in.size(2);
  // Documents (and a causal offset) need the exact masked form: the running sums cross them.
  if ((mask.causal && (q_offset != 0 || T != S)) || mask.doc_BT.defined())
    return linear_attention_quadratic(qn, kn_in, qd, kd_in, v_in, mask, q_offset);
  // Padded keys contribute nothing.
  auto kn = kn_in, kd = kd_in, v = v_in;
  if (mask.key_pad_BS.defined()) {
    auto m = mask.key_pad_BS.view({-1, 1, S, 1}).to(kn.scalar_type());
    kn = kn * m, kd = kd * m, v = v * m;
  }
  if (!mask.causal) {
    auto kv_BNFH = products(kn.transpose(-2, -1), v);
    auto num = products(qn, kv_BNFH);
    auto den = products(qd, kd.sum(2).unsqueeze(-1));  // [B,N,T,1]
    return num / (den + kEps);
  }
  // Causal (Eq. 19 with the prefix sums of Katharopoulos et al.): chunks of L positions. Inside a
  // chunk the exact masked form; across chunks, each chunk's queries read the sum of the earlier
  // chunks' key-value states, an exclusive prefix sum over chunks. Every chunk is in one batched
  // matmul: no loop over chunks, so the op count does not grow with the length (a loop ran 12
  // ops, and their backward, per chunk: 128 chunks at 8192). A ragged tail is padded with zeros,
  // which add nothing to a state; the padded queries' rows are dropped.
  const int64_t B = qn.size(0), N = qn.size(1), L = std::min(kChunk, T);
  const int64_t C = (T + L - 1) / L, pad = C * L - T;
  auto chunked = [&](const torch::Tensor& x_BNTX) {  // -> [B, N, C, L, X]
    auto x = pad > 0 ? torch::constant_pad_nd(x_BNTX, {0, 0, 0, pad}) : x_BNTX;
    return x.reshape({B, N, C, L, x.size(3)});
  };
  // Shift by one chunk along C, then sum: chunk c gets the sum over the chunks before it. A bf16
  // or fp16 state (under autocast) is summed in float32 and rounded once, in its own dtype.
  auto exclusive_prefix = [&](const torch::Tensor& x_BNCXY) {
    const auto st = x_BNCXY.scalar_type();
    const bool low = st == torch::kBFloat16 || st == torch::kHalf;
    auto shifted = torch::constant_pad_nd(x_BNCXY, {0, 0, 0, 0, 1, 0}).narrow(2, 0, C);
    return low ? shifted.cumsum(2, torch::kFloat32).to(st) : shifted.cumsum(2);
  };
  auto qn_c = chunked(qn), kn_c = chunked(kn), qd_c = chunked(qd), kd_c = chunked(kd);
  auto v_c = chunked(v);
  auto tri_LL =
      torch::ones({L, L}, torch::TensorOptions().dtype(qn.scalar_type()).device(qn.device()))
          .tril();
  auto state_BNCFH = exclusive_prefix(products(kn_c.transpose(-2, -1), v_c));
  auto zstate_BNCF1 = exclusive_prefix(kd_c.sum(3).unsqueeze(-1));
  auto num =
      products(products(qn_c, kn_c.transpose(-2, -1)) * tri_LL, v_c) + products(qn_c, state_BNCFH);
  auto den = (products(qd_c, kd_c.transpose(-2, -1)) * tri_LL).sum(-1, true) +
             products(qd_c, zstate_BNCF1);
  auto out = (num / (den + kEps)).reshape({B, N, C * L, v.size(3)});
  return pad > 0 ? out.narrow(2, 0, T) : out;
}

void KVCache::append(const torch::Tensor& k_new, const torch::Tensor& v_new) {
  int64_t len = k_BNSH.defined() ? k_BNSH.size(2) : 0, n = k_new.size(2);
  if (!k_buf.defined() || head + len + n > k_buf.size(2)) {
    // New buffers twice what they will hold, the live keys moved to the front: O(1) amortised
    // per key, and a layer that drops old keys stays at O(window) memory.
    int64_t cap = std::max<int64_t>(64, 2 * (len + n));
    auto fresh = [&](const torch::Tensor& old, const torch::Tensor& like) {
      auto sizes = like.sizes().vec();
      sizes[2] = cap;
      auto b = torch::empty(sizes, like.options());
      if (len > 0) b.narrow(2, 0, len).copy_(old.narrow(2, head, len));
      return b;
    };
    k_buf = fresh(k_buf, k_new);
    v_buf = fresh(v_buf, v_new);
    head = 0;
  }
  k_buf.narrow(2, head + len, n).copy_(k_new);
  v_buf.narrow(2, head + len, n).copy_(v_new);
  k_BNSH = k_buf.narrow(2, head, len + n);
  v_BNSH = v_buf.narrow(2, head, len + n);
}

void KVCache::drop_before(int64_t position) {
  if (position <= start) return;
  const int64_t len = k_BNSH.defined() ? k_BNSH.size(2) : 0;
  const int64_t d = std::min(position - start, len);
  start = position;
  if (d == 0) return;
  head += d;
  k_BNSH = k_buf.narrow(2, head, len - d);
  v_BNSH = v_buf.narrow(2, head, len - d);
}

void KVCache::reorder(const torch::Tensor& order_B) {
  if (!k_BNSH.defined()) return;
  if (pos_state.defined()) pos_state = pos_state.index_select(0, order_B);
  if (k_buf.defined()) {
    int64_t len = k_BNSH.size(2);
    k_buf = k_buf.index_select(0, order_B);
    v_buf = v_buf.index_select(0, order_B);
    k_BNSH = k_buf.narrow(2, head, len);
    v_BNSH = v_buf.narrow(2, head, len);
  } else {
    k_BNSH = k_BNSH.index_select(0, order_B);
    v_BNSH = v_BNSH.index_select(0, order_B);
  }
}

MultiHeadAttentionImpl::MultiHeadAttentionImpl(int64_t d_model, int64_t n_heads,
                                               const config::AttentionConfig& cfg,
                                               int64_t n_kv_heads, config::LinearBias bias,
                                               double norm_eps, int64_t head_dim,
                                               config::NormType norm_type)
    : n_heads_(n_heads),
      n_kv_heads_(n_kv_heads > 0 ? n_kv_heads : n_heads),
      head_dim_(head_dim > 0 ? head_dim : d_model / n_heads),
      cfg_(cfg) {
  auto proj = [](int64_t in, int64_t out, bool b) {
    return torch::nn::Linear(torch::nn::LinearOptions(in, out).bias(b));
  };
  const bool qkv_bias = bias != config::LinearBias::kNone;
  const int64_t kv = n_kv_heads_ * head_dim_;
  const int64_t q = n_heads_ * head_dim_;
  q_proj = register_module("q_proj", proj(d_model, q, qkv_bias));
  k_proj = register_module("k_proj", proj(d_model, kv, qkv_bias));
  v_proj = register_module("v_proj", proj(d_model, kv, qkv_bias));
  o_proj = register_module("o_proj", proj(q, d_model, bias == config::LinearBias::kAll));
  if (cfg.kernel == config::AttentionKernel::kLinear &&
      cfg.feature_map == config::FeatureMap::kFavor)
    favor_FH_ = register_buffer("favor_proj", torch::randn({cfg.num_features, head_dim_}));
  if (cfg.qk_norm) {
    // An RMSNorm, with the model's (1 + gain) where its norms have one (Gemma 3).
    const auto type =
        norm_type == config::NormType::kRmsNormOffset ? norm_type : config::NormType::kRmsNorm;
    const bool whole = cfg.qk_norm_over == config::QkNormOver::kProjection;
    q_norm = register_module("q_norm", Norm(whole ? q : head_dim_, norm_eps, type));
    k_norm = register_module("k_norm", Norm(whole ? kv : head_dim_, norm_eps, type));
  }
  if (cfg.sinks) sinks_N_ = register_parameter("sinks", torch::zeros({n_heads}));
  if (cfg.ssmax > 0) ssmax_N_ = register_parameter("ssmax", torch::full({n_heads}, cfg.ssmax));
}

ParamRole MultiHeadAttentionImpl::role_of(const std::string& local) const {
  (void)local;  // sinks, ssmax: the values they start with, not decayed
  return ParamRole::kOwnInit;
}

std::pair<torch::Tensor, torch::Tensor> MultiHeadAttentionImpl::fused(
    Fused& f, const std::vector<torch::nn::Linear>& ps) {
  std::vector<torch::Tensor> ws, bs;
  std::vector<int64_t> versions;
  for (const auto& p : ps) {
    ws.push_back(p->weight);
    versions.push_back(p->weight._version());
    versions.push_back(reinterpret_cast<int64_t>(p->weight.data_ptr()));
    if (p->bias.defined()) {  // all or none of a group have one (model.bias)
      bs.push_back(p->bias);
      versions.push_back(p->bias._version());
    }
  }
  auto cat = [](const std::vector<torch::Tensor>& ts) {
    return ts.empty() ? torch::Tensor() : torch::cat(ts);
  };
  if (torch::GradMode::is_enabled()) {
    f = {};  // autograd must see the cat to route gradients to each weight
    return {torch::cat(ws), cat(bs)};
  }
  if (!f.w.defined() || f.versions != versions || f.w.device() != ws[0].device())
    f = {torch::cat(ws), cat(bs), versions};
  return {f.w, f.b};
}

torch::Tensor MultiHeadAttentionImpl::features(const torch::Tensor& x, bool is_query) const {
  if (cfg_.feature_map == config::FeatureMap::kElu) return F::elu(x) + 1.0;
  // FAVOR+ positive random features for the softmax kernel exp(q.k / sqrt(H)):
  // phi(x) = exp(w.x' - |x'|^2 / 2 - max) / sqrt(m), x' = x / H^(1/4). The subtracted max is
  // per query row (cancels between numerator and denominator) and global for keys.
  auto xs = x.to(torch::kFloat32) / std::pow(static_cast<double>(head_dim_), 0.25);
  auto proj = torch::matmul(xs, favor_FH_.t());  // [..., F]
  auto sq = (xs * xs).sum(-1, true) / 2.0;
  auto logits = proj - sq;
  auto stab = is_query ? std::get<0>(logits.max(-1, true)) : logits.max();
  auto phi = torch::exp(logits - stab.detach()) / std::sqrt(static_cast<double>(favor_FH_.size(0)));
  return (phi + 1e-6).to(x.scalar_type());
}

std::optional<HeadRotation> MultiHeadAttentionImpl::projection_rotation(
    PositionModuleImpl* pos, const PosCache& pc, const KVCache* cache) const {
  // Only where nothing stands between the projection and the rotation (a QK-norm does) and the
  // rotation is the last thing done to q and k before the softmax kernel: no cache (its keys
  // are rotated with a step's own tables), no linear kernel (which rotates feature maps).
  if (pos == nullptr || cache != nullptr || q_norm || k_norm ||
      cfg_.kernel != config::AttentionKernel::kSoftmax || !pc.q_pos_T.defined())
    return std::nullopt;
  auto r = pos->rotation(pc, head_dim_);
  if (!r) return std::nullopt;
  return HeadRotation{r->cos_qF, r->sin_qF,   r->cos_kF, r->sin_kF,
                      n_heads_,  n_kv_heads_, head_dim_, r->interleaved};
}

torch::Tensor MultiHeadAttentionImpl::forward(const torch::Tensor& x, const torch::Tensor& kv,
                                              const AttnMask& mask, const PositionContext& ctx,
                                              int64_t q_offset, KVCache* cache) {
  int64_t B = x.size(0), T = x.size(1), S_new = kv.size(1);
  auto heads = [&](const torch::Tensor& t, int64_t len) {
    return t.view({B, len, n_heads_, head_dim_}).transpose(1, 2);  // [B,N,len,H]
  };
  // Keys and values: n_kv_heads heads, each repeated for its group of query heads.
  const int64_t group = n_heads_ / n_kv_heads_, D = n_heads_ * head_dim_,
                Dkv = n_kv_heads_ * head_dim_;
  auto kv_heads = [&](const torch::Tensor& t, int64_t len) {
    auto h = t.view({B, len, n_kv_heads_, head_dim_}).transpose(1, 2);  // [B,Nkv,len,H]
    return group == 1 ? h : h.repeat_interleave(group, 1);
  };
  // QK-norm, before the rotation: over the whole q and k projections before the split into
  // heads (OLMo 2), or over each head's channels after it (Qwen3).
  const bool whole = cfg_.qk_norm_over == config::QkNormOver::kProjection;
  auto norm_whole = [&](Norm& n, const torch::Tensor& t) {
    return n && whole ? n(t).to(t.dtype()) : t;
  };
  auto norm_head = [&](Norm& n, const torch::Tensor& t) {
    return n && !whole ? n(t).to(t.dtype()) : t;
  };
  bool self = x.is_same(kv);
  PositionModuleImpl* pos = ctx.module;
  static const PosCache kNoTables;
  const PosCache& pc = ctx.tables != nullptr ? *ctx.tables : kNoTables;
  torch::Tensor q, k, v;
  bool rotated = false;  // q and k rotated by the projection
  if (self) {
    // One matmul for q, k and v: [B, T, D + 2 Dkv] -> three [B, N, T, H] views.
    auto [w, b] = fused(fused_qkv_, {q_proj, k_proj, v_proj});
    auto rot = projection_rotation(pos, pc, cache);
    rotated = rot && fuses_rotation(x, w, b, *rot);
    auto qkv = split_columns(
        rotated ? model::linear_rotated(x, w, b, *rot) : model::linear(x, w, b), {D, Dkv, Dkv});
    q = heads(norm_whole(q_norm, qkv[0]), T);
    k = norm_head(k_norm, kv_heads(norm_whole(k_norm, qkv[1]), T));
    v = kv_heads(qkv[2], T);
  } else {
    q = heads(norm_whole(q_norm, model::linear(q_proj, x)), T);
  }
  q = norm_head(q_norm, q);
  // Softmax self-attention with a cache stores keys already rotated: each step rotates only its
  // own queries and keys (tables for those positions), never the whole past again. A rotation
  // that depends on the current length (dynamic NTK, LongRoPE) cannot: its keys are cached
  // unrotated and the whole past is rotated with this step's tables, as the queries are.
  bool rotate_new = cache != nullptr && !cache->fixed && pos != nullptr &&
                    cfg_.kernel == config::AttentionKernel::kSoftmax && !pos->depends_on_length();
  PosCache step_tables;
  if (rotate_new) {
    step_tables.length = pc.length;
    step_tables.q_pos_T = pc.q_pos_T;
    step_tables.k_pos_S = pc.k_pos_S.narrow(0, pc.k_pos_S.size(0) - S_new, S_new);
  }
  if (cache != nullptr && cache->fixed && cache->k_BNSH.defined()) {
    k = cache->k_BNSH;  // cross-attention: the memory was projected at the first step
    v = cache->v_BNSH;
  } else {
    if (!self) {
      auto [w, b] = fused(fused_kv_, {k_proj, v_proj});
      auto kv2 = model::linear(kv, w, b).chunk(2, -1);
      k = norm_head(k_norm, kv_heads(norm_whole(k_norm, kv2[0]), S_new));
      v = kv_heads(kv2[1], S_new);
    }
    if (cache != nullptr && cache->fixed) {
      cache->k_BNSH = k;
      cache->v_BNSH = v;
    } else if (cache != nullptr) {
      if (rotate_new) k = pos->rotate_k(k, step_tables);
      cache->drop_before(mask.k_offset);  // a local layer's keys its queries no longer see
      TORCH_CHECK(cache->start == mask.k_offset, "KV cache starts at ", cache->start,
                  ", the mask at ", mask.k_offset);
      cache->append(k, v);
      k = cache->k_BNSH;
      v = cache->v_BNSH;
    }
  }
  torch::Tensor out;
  if (cfg_.kernel == config::AttentionKernel::kSoftmax) {
    if (pos != nullptr && !rotated) {
      q = pos->rotate_q(q, rotate_new ? step_tables : pc);
      if (!rotate_new) k = pos->rotate_k(k, pc);
    }
    ScoreBias bias = pos != nullptr ? pos->score_bias(pc) : ScoreBias();
    AttnMask m = mask;
    // Context parallelism: q, k and v are this rank's share of a sequence split over its group.
    const dist::ContextGroup* ring = mask.context;
    const dist::ContextSplit split{ring != nullptr ? T * ring->size : T,
                                   ring != nullptr ? ring->size : 1};
    if (pos != nullptr && pos->uses_content()) {
      if (pos->content_reads_mask() && !m.bias_B1TS.defined() && m.restricted())
        m = m.with_bias(T, k.size(2), q_offset, q.device());
      torch::Tensor* state = cache != nullptr ? &cache->pos_state : nullptr;
      const torch::Tensor mask_B1TS = pos->content_reads_mask() ? m.bias_B1TS : torch::Tensor();
      LayerContent in{x, q, k, mask_B1TS, ctx.layer, state};
      if (ring != nullptr)
        in.whole_sequence = [ring, &split](const torch::Tensor& t) {
          return gather_sequence(t, *ring, split, 2);
        };
      bias = bias.plus(pos->content_bias(in, pc));
    }
    // Per-query factors after the rotation: the kind's temperature (Llama 4) and SSMax's
    // s log n (n: the keys each query may see).
    if (ctx.q_scale_T.defined())
      q = q * ctx.q_scale_T.view({ctx.q_scale_T.dim() == 2 ? B : 1, 1, T, 1}).to(q.dtype());
    // model.attention.scale_dim: the kernels divide by sqrt(head_dim); q carries the rest.
    if (cfg_.scale_dim > 0 && cfg_.scale_dim != static_cast<double>(head_dim_))
      q = q * std::sqrt(static_cast<double>(head_dim_) / cfg_.scale_dim);
    if (ssmax_N_.defined()) {
      auto log_n = ring == nullptr
                       ? log_visible_keys(m, T, k.size(2), q_offset, q.device())
                       : log_visible_keys(m, split.length, split.length, 0, q.device())
                             .index_select(2, split.positions(ring->member).to(q.device()));
      q = q * (ssmax_N_.view({1, n_heads_, 1, 1}) * log_n).to(q.dtype());
    }
    out =
        ring != nullptr
            ? ring_attention(q, k, v, *ring, split, tile_mask_of(m, 0), bias, {}, sinks_N_)
            : softmax_attention(q, k, v, bias, m, q_offset, cfg_.dropout, is_training(), sinks_N_);
  } else {
    torch::Tensor qn, kn, qd, kd;
    if (pos != nullptr && cfg_.rope_mode == config::RopeMode::kBeforePhi) {
      qn = qd = features(pos->rotate_q(q, pc), true);
      kn = kd = features(pos->rotate_k(k, pc), false);
    } else {
      qd = features(q, true);
      kd = features(k, false);
      qn = pos != nullptr ? pos->rotate_q(qd, pc) : qd;  // Eq. 19: rotate phi(q), phi(k)
      kn = pos != nullptr ? pos->rotate_k(kd, pc) : kd;
    }
    out = linear_attention(qn, kn, qd, kd, v, mask, q_offset);
  }
  return model::linear(o_proj, out.transpose(1, 2).reshape({B, T, n_heads_ * head_dim_}));
}

}  // namespace ropelab::model
