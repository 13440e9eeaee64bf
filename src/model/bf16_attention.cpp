#include "model/bf16_attention.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "model/bias_rows.h"
#include "util/float_rows.h"
#include "util/vec_bf16.h"

namespace ropelab::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// A group's bf16 scores at most this size (about a core's L2), or one head.
constexpr int64_t kGroupBytes = int64_t{1} << 20;
// A thread keeps its scratch between calls up to this size.
constexpr int64_t kKeptBytes = int64_t{8} << 20;

// The heads are taken flat (b n), G at a time. q, k and v may be views (the heads of the fused QKV
// projection, [B, T, N, W] memory): a group gathers its heads' rows into its scratch.
struct Shape {
  int64_t B, N, T, S, W, H, G;  // W: q and k's width; H: v's; G: heads per group
  Shape(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v)
      : B(q.size(0)), N(q.size(1)), T(q.size(2)), S(k.size(2)), W(q.size(3)), H(v.size(3)), G(0) {
    G = std::clamp<int64_t>(kGroupBytes / (T * S * 2), 1, B * N);
  }
  // A thread's scratch, in elements: `count` [G, T, S] buffers, the rows of the output (or its
  // gradient) [G, T, H], the gathered q [G, T, W], k [G, S, W] and v [G, S, H], and a gradient
  // of one of them on its way out.
  int64_t scratch(int64_t count) const {
    return count * G * T * S + G * (T * H + (T + S) * W + S * H) + grad_size();
  }
  int64_t grad_size() const { return G * std::max(T, S) * std::max(W, H); }
};

// Copies row t of flat head h0 + i between `r` ([g, T, W] contiguous) and [B, N, T, W] `t4` (any
// strides, the last 1), for the g heads from h0.
template <bool kGather>
void copy_heads(const torch::Tensor& t4, int64_t h0, int64_t g, uint16_t* r) {
  const int64_t N = t4.size(1), T = t4.size(2), W = t4.size(3);
  uint16_t* base = util::bf16_bits(t4);  // element [0, 0, 0, 0]
  for (int64_t i = 0; i < g * T; ++i) {
    const int64_t h = h0 + i / T, t = i % T;
    uint16_t* x = base + (h / N) * t4.stride(0) + (h % N) * t4.stride(1) + t * t4.stride(2);
    if (kGather)
      std::memcpy(r + i * W, x, sizeof(uint16_t) * static_cast<size_t>(W));
    else
      std::memcpy(x, r + i * W, sizeof(uint16_t) * static_cast<size_t>(W));
  }
}

// A group: heads h0..h0+g of the flat B N, with a thread's scratch (Shape::scratch) and S floats
// of tmp.
struct Group {
  int64_t h0, g;
  torch::Tensor scratch, rows, q, k, v, grad;  // q, k, v: where gathered; grad: flat
  float* tmp;
  // Its heads of a contiguous [B, N, *, *] tensor, as [g, *, *].
  torch::Tensor of(const torch::Tensor& t) const {
    return t.view({-1, t.size(2), t.size(3)}).narrow(0, h0, g);
  }
  // Its heads of q, k or v as [g, *, *]: a view where contiguous, else gathered into `into`.
  torch::Tensor operand(const torch::Tensor& t, const torch::Tensor& into) const {
    if (t.is_contiguous()) return of(t);
    copy_heads<true>(t, h0, g, static_cast<uint16_t*>(into.data_ptr()));
    return into.narrow(0, 0, g);
  }
  torch::Tensor buffer(int64_t i) const { return scratch[i].narrow(0, 0, g); }
  torch::Tensor rows_g() const { return rows.narrow(0, 0, g); }
  // The rows between `rows` and [B, N, T, H] `t4`: the output goes out in the [B, T, N, H]
  // layout that the heads' merge reads as a view, and its gradient comes in from that layout,
  // without a pass over memory of their own.
  template <bool kGather>
  void copy_rows(const torch::Tensor& t4) const {
    copy_heads<kGather>(t4, h0, g, static_cast<uint16_t*>(rows.data_ptr()));
  }
  // d's heads = a b (a bmm): in place where d is contiguous, else through `grad` and scattered
  // into d's layout.
  void product(const torch::Tensor& d, const torch::Tensor& a, const torch::Tensor& b) const {
    if (d.is_contiguous()) {
      auto d_g = of(d);
      at::bmm_out(d_g, a, b);
      return;
    }
    auto r = grad.narrow(0, 0, g * d.size(2) * d.size(3)).view({g, d.size(2), d.size(3)});
    at::bmm_out(r, a, b);
    copy_heads<false>(d, h0, g, static_cast<uint16_t*>(r.data_ptr()));
  }
};

// An empty gradient for t [B, N, L, W] in t's layout: [B, L, N, W] memory for the heads of a
// projection (whose split's backward is then a view, not a copy), else contiguous.
torch::Tensor grad_like(const torch::Tensor& t) {
  if (t.stride(1) >= t.stride(2)) return torch::empty(t.sizes(), t.options());
  return torch::empty({t.size(0), t.size(2), t.size(1), t.size(3)}, t.options()).transpose(1, 2);
}

// Runs f(group) over the groups, split among the threads.
template <class F>
void for_each_group(const Shape& sh, int64_t count, const F& f) {
  const int64_t heads = sh.B * sh.N, groups = (heads + sh.G - 1) / sh.G;
  at::parallel_for(0, groups, 1, [&](int64_t i0, int64_t i1) {
    // bmm_out takes no input that requires a gradient (and grad mode is per thread).
    const torch::NoGradGuard no_grad;
    // Kept by each thread from call to call where small (no allocation and no page faults per
    // call); a long sequence's (one head's T x S beyond kGroupBytes) is freed after the call.
    thread_local std::vector<uint16_t> kept;
    std::vector<uint16_t> once;
    const int64_t total = sh.scratch(count);
    auto& buf = 2 * total <= kKeptBytes ? kept : once;
    if (static_cast<int64_t>(buf.size()) < total) buf.resize(static_cast<size_t>(total));
    std::vector<float> tmp(static_cast<size_t>(sh.S));
    uint16_t* at = buf.data();
    auto take = [&](const std::vector<int64_t>& sizes) {
      auto t = torch::from_blob(at, sizes, torch::kBFloat16);
      at += t.numel();
      return t;
    };
    Group gr{0,
             0,
             take({count, sh.G, sh.T, sh.S}),
             take({sh.G, sh.T, sh.H}),
             take({sh.G, sh.T, sh.W}),
             take({sh.G, sh.S, sh.W}),
             take({sh.G, sh.S, sh.H}),
             take({sh.grad_size()}),
             tmp.data()};
    for (int64_t i = i0; i < i1; ++i) {
      gr.h0 = i * sh.G;
      gr.g = std::min(sh.G, heads - gr.h0);
      f(gr);
    }
  });
}

struct Bf16Attention : public torch::autograd::Function<Bf16Attention> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& q_in,
                               const torch::Tensor& k_in, const torch::Tensor& v_in,
                               const torch::Tensor& bias, const torch::Tensor& mask,
                               double scale_d) {
    RECORD_FUNCTION("ropelab::bf16_attention", std::vector<c10::IValue>());
    const auto scale = static_cast<float>(scale_d);
    // Views are read through their strides (each group gathers its heads), never copied whole.
    const auto &q = q_in, &k = k_in, &v = v_in;
    const Shape sh(q, k, v);
    auto scores = torch::empty({sh.B, sh.N, sh.T, sh.S}, q.options());
    auto stats = torch::empty({sh.B * sh.N * sh.T, 2}, q.options().dtype(torch::kFloat32));
    // [B, N, T, H], laid out [B, T, N, H] (the heads' merge is then a view).
    auto out = torch::empty({sh.B, sh.T, sh.N, sh.H}, q.options()).transpose(1, 2);
    const BiasRows br(bias, sh.B, sh.N, sh.T, sh.S), mr(mask, sh.B, sh.N, sh.T, sh.S);
    const std::vector<float> zeros(static_cast<size_t>(sh.S), 0.0F);
    float* st = stats.data_ptr<float>();
    for_each_group(sh, 1, [&](const Group& gr) {
      auto s_g = gr.of(scores), p_g = gr.buffer(0);
      at::bmm_out(s_g, gr.operand(q, gr.q),
                  gr.operand(k, gr.k).transpose(1, 2));  // S = q k^T (scaled by the rows)
      const uint16_t* s = util::bf16_bits(s_g);
      uint16_t* p = util::bf16_bits(p_g);
      for (int64_t j = 0; j < gr.g * sh.T; ++j) {  // P = softmax(S scale + bias + mask)
        const int64_t h = gr.h0 + j / sh.T, t = j % sh.T, r = gr.h0 * sh.T + j;
        vec::softmax_row_bf16(s + j * sh.S, br.row(h / sh.N, h % sh.N, t, zeros.data()),
                              mr.row(h / sh.N, h % sh.N, t, zeros.data()), p + j * sh.S, sh.S,
                              gr.tmp, st + 2 * r, st + 2 * r + 1, scale);
      }
      auto o_g = gr.rows_g();
      at::bmm_out(o_g, p_g, gr.operand(v, gr.v));  // O = P v
      gr.copy_rows<false>(out);
    });
    ctx->save_for_backward({q, k, v, scores, stats, bias, mask});
    ctx->saved_data["scale"] = scale_d;
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    RECORD_FUNCTION("ropelab::bf16_attention_backward", std::vector<c10::IValue>());
    auto saved = ctx->get_saved_variables();
    const auto &q = saved[0], &k = saved[1], &v = saved[2], &scores = saved[3];
    const Shape sh(q, k, v);
    // dO as it comes (the heads' split of the next layer's gradient: [B, T, N, H] memory), each
    // group's rows gathered into the cache.
    auto go = grad_out[0].to(torch::kBFloat16);
    if (go.stride(3) != 1) go = go.contiguous();
    auto dq = grad_like(q), dk = grad_like(k), dv = grad_like(v);
    const BiasRows br(saved[5], sh.B, sh.N, sh.T, sh.S), mr(saved[6], sh.B, sh.N, sh.T, sh.S);
    const std::vector<float> zeros(static_cast<size_t>(sh.S), 0.0F);
    const float* st = saved[4].data_ptr<float>();
    const auto scale = static_cast<float>(ctx->saved_data["scale"].toDouble());
    for_each_group(sh, 3, [&](const Group& gr) {
      gr.copy_rows<true>(go);
      auto dp_g = gr.buffer(0), ds_g = gr.buffer(1), p_g = gr.buffer(2), go_g = gr.rows_g();
      auto q_g = gr.operand(q, gr.q), k_g = gr.operand(k, gr.k);
      at::bmm_out(dp_g, go_g, gr.operand(v, gr.v).transpose(1, 2));  // dP = dO v^T
      const uint16_t *s = util::bf16_bits(gr.of(scores)), *dp = util::bf16_bits(dp_g);
      uint16_t *ds = util::bf16_bits(ds_g), *p = util::bf16_bits(p_g);
      // dS = P (dP - rowsum(P dP)) scale (the gradient of q k^T), and P
      for (int64_t j = 0; j < gr.g * sh.T; ++j) {
        const int64_t h = gr.h0 + j / sh.T, t = j % sh.T, r = gr.h0 * sh.T + j, o = j * sh.S;
        vec::softmax_backward_row_bf16(s + o, br.row(h / sh.N, h % sh.N, t, zeros.data()),
                                       mr.row(h / sh.N, h % sh.N, t, zeros.data()), st[2 * r],
                                       st[2 * r + 1], dp + o, ds + o, sh.S, gr.tmp, p + o, scale);
      }
      gr.product(dv, p_g.transpose(1, 2), go_g);  // dv = P^T dO
      gr.product(dq, ds_g, k_g);                  // dq = dS k
      gr.product(dk, ds_g.transpose(1, 2), q_g);  // dk = dS^T q
    });
    return {dq, dk, dv, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// ROPELAB_BF16_ATTENTION=off: the unfused form everywhere (to compare the two).
bool turned_off() {
  const char* v = std::getenv("ROPELAB_BF16_ATTENTION");
  return v != nullptr && std::strcmp(v, "off") == 0;
}

bool no_grad_float(const torch::Tensor& t) {
  return !t.defined() ||
         (t.device().is_cpu() && !t.requires_grad() &&
          (t.scalar_type() == torch::kFloat32 || t.scalar_type() == torch::kBFloat16));
}

}  // namespace

bool uses_bf16_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                         const torch::Tensor& bias, const torch::Tensor& mask) {
  auto bf16_cpu = [](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kBFloat16 && t.dim() == 4 &&
           t.stride(3) == 1;
  };
  return !turned_off() && vec::bf16_simd() && bf16_cpu(q) && bf16_cpu(k) && bf16_cpu(v) &&
         k.size(0) == q.size(0) && v.size(0) == q.size(0) && k.size(1) == q.size(1) &&
         v.size(1) == q.size(1) && k.size(3) == q.size(3) && v.size(2) == k.size(2) &&
         q.size(2) > 1 && q.numel() > 0 && k.numel() > 0 && no_grad_float(bias) &&
         no_grad_float(mask);
}

torch::Tensor bf16_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                             const torch::Tensor& bias, const torch::Tensor& mask, double scale) {
  // A custom autograd function takes no undefined tensor: an empty one stands for "none".
  auto none = torch::empty({0}, q.options().dtype(torch::kFloat32));
  return Bf16Attention::apply(q, k, v, bias.defined() ? bias : none, mask.defined() ? mask : none,
                              scale);
}

}  // namespace ropelab::model
