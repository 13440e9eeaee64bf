#include "model/dropout.h"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>
#include <torch/nn/functional/activation.h>
#include <torch/nn/functional/dropout.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "util/float_rows.h"
#include "util/vec_bf16.h"
#include "util/vec_kernels.h"

namespace ropelab::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// The mask of one dropout call: element i is kept when its 32-bit draw is >= p * 2^32
// (P(keep) = 1 - p, to 2^-32). One 64-bit hash gives the draws of elements 2j and 2j+1.
struct Mask {
  uint64_t seed = 0, threshold = 0;
  double p = 0;

  // One draw from torch's CPU generator (so torch::manual_seed governs the masks); the draw is a
  // CPU tensor, read directly (this path never runs on a device).
  static Mask draw(double p) {
    Mask m;
    m.p = p;
    m.seed = static_cast<uint64_t>(
        *torch::randint(std::numeric_limits<int64_t>::max(), {1}, torch::kInt64)
             .data_ptr<int64_t>());
    m.threshold = static_cast<uint64_t>(p * 4294967296.0);
    return m;
  }
  void save(AutogradContext* ctx) const {
    ctx->saved_data["seed"] = static_cast<int64_t>(seed);
    ctx->saved_data["p"] = p;
  }
  static Mask load(AutogradContext* ctx) {
    Mask m;
    m.p = ctx->saved_data["p"].toDouble();
    m.seed = static_cast<uint64_t>(ctx->saved_data["seed"].toInt());
    m.threshold = static_cast<uint64_t>(m.p * 4294967296.0);
    return m;
  }
};

bool fused_path(const torch::Tensor& t, double p, bool training) {
  const auto dt = t.scalar_type();
  return training && p > 0 && p < 1 && t.device().is_cpu() &&
         (dt == torch::kFloat32 || dt == torch::kBFloat16 || dt == torch::kHalf);
}

constexpr int64_t kDropoutChunk =
    2048;  // elements per task; even, so a hash's pair stays in one chunk

// 1/(1-p) rounded to dtype (as a multiply by a mask of that dtype applies it), as a float.
float keep_scale(c10::ScalarType dtype, double p) {
  float keep = 0;
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kBFloat16, at::kHalf, dtype, "keep", [&] {
    keep = static_cast<float>(static_cast<scalar_t>(1.0 / (1.0 - p)));
  });
  return keep;
}

// f(c0, n, mask) for every chunk of [0, numel), in parallel; mask[j] is element c0 + j's factor
// (0 or keep), vectorised (vec::dropout_factors).
template <class F>
void chunks(const Mask& m, int64_t numel, float keep, const F& f) {
  at::parallel_for(0, (numel + kDropoutChunk - 1) / kDropoutChunk, 1, [&](int64_t b, int64_t e) {
    std::vector<float> mask(kDropoutChunk);
    for (int64_t c = b; c < e; ++c) {
      const int64_t c0 = c * kDropoutChunk, n = std::min(kDropoutChunk, numel - c0);
      vec::dropout_factors(m.seed, m.threshold, c0, n, keep, mask.data());
      f(c0, n, mask.data());
    }
  });
}

// out[i] = a[i] * (keep ? 1/(1-p) : 0) in out_dtype: a is first rounded to out_dtype, the
// product is rounded to it (as a.to(out_dtype) * mask, with the mask in out_dtype).
torch::Tensor apply_mask(const Mask& m, const torch::Tensor& a_in, c10::ScalarType out_dtype) {
  auto a = a_in.contiguous();
  auto out = torch::empty(a.sizes(), a.options().dtype(out_dtype));
  if (a.scalar_type() == torch::kFloat32 && out_dtype == torch::kBFloat16 &&
      vec::bf16_rows_vectorised()) {
    chunks(m, a.numel(), keep_scale(out_dtype, m.p), [&](int64_t c0, int64_t n, const float* mask) {
      vec::mask_to_bf16(a.data_ptr<float>() + c0, mask, util::bf16_bits(out) + c0, n);
    });
    return out;
  }
  const bool cast = out_dtype != a.scalar_type();
  chunks(m, a.numel(), keep_scale(out_dtype, m.p), [&](int64_t c0, int64_t n, const float* mask) {
    std::vector<float> ab, yb(static_cast<size_t>(n));
    const float* af = util::float_run(a, c0, n, ab);
    if (cast) {
      std::copy(af, af + n, yb.data());
      util::round_float_run(yb.data(), n, out_dtype);
      af = yb.data();
    }
    vec::mul_into(af, mask, yb.data(), n);
    util::store_float_run(yb.data(), out, c0, n);
  });
  return out;
}

// y = x + h * mask (the product in h's dtype, the sum in the promoted dtype, as the unfused ops).
struct DropoutAdd : public torch::autograd::Function<DropoutAdd> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& h_in, double p) {
    RECORD_FUNCTION("ropelab::dropout_add", std::vector<c10::IValue>());
    auto m = Mask::draw(p);
    m.save(ctx);
    ctx->saved_data["x_dtype"] = x_in.scalar_type();
    ctx->saved_data["h_dtype"] = h_in.scalar_type();
    auto out_t = c10::promoteTypes(x_in.scalar_type(), h_in.scalar_type());
    auto x = x_in.to(out_t).contiguous();
    auto h = h_in.contiguous();
    auto out = torch::empty_like(x, at::MemoryFormat::Contiguous);
    const auto h_t = h.scalar_type();
    if (out_t == torch::kFloat32 && h_t == torch::kBFloat16 && vec::bf16_rows_vectorised()) {
      chunks(m, x.numel(), keep_scale(h_t, p), [&](int64_t c0, int64_t n, const float* mask) {
        vec::dropout_add_bf16(x.data_ptr<float>() + c0, util::bf16_bits(h) + c0, mask,
                              out.data_ptr<float>() + c0, n);
      });
      return out;
    }
    chunks(m, x.numel(), keep_scale(h_t, p), [&](int64_t c0, int64_t n, const float* mask) {
      std::vector<float> xb, hb, tb(static_cast<size_t>(n));
      vec::mul_into(util::float_run(h, c0, n, hb), mask, tb.data(), n);
      util::round_float_run(tb.data(), n, h_t);  // the product in h's dtype
      vec::add_into(util::float_run(x, c0, n, xb), tb.data(), tb.data(), n);
      util::store_float_run(tb.data(), out, c0, n);
    });
    return out;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto m = Mask::load(ctx);
    auto g = grad_out[0];
    auto x_t = ctx->saved_data["x_dtype"].toScalarType();
    auto h_t = ctx->saved_data["h_dtype"].toScalarType();
    return {g.to(x_t), apply_mask(m, g, h_t), torch::Tensor()};
  }
};

// The kernel's activation for config::Activation `act` (relu, gelu or gelu_tanh).
vec::Act kernel_act(int64_t act) {
  switch (static_cast<config::Activation>(act)) {
    case config::Activation::kGelu:
      return vec::Act::kGelu;
    case config::Activation::kGeluTanh:
      return vec::Act::kGeluTanh;
    default:
      return vec::Act::kRelu;
  }
}

// The bf16 forms of ActDropout below (util/vec_bf16.h).
torch::Tensor act_dropout_bf16_forward(AutogradContext* ctx, const Mask& m, const torch::Tensor& h,
                                       vec::Act kind) {
  auto y = torch::empty_like(h), d = torch::empty_like(h);
  chunks(m, h.numel(), keep_scale(torch::kBFloat16, m.p),
         [&](int64_t c0, int64_t n, const float* mask) {
           vec::act_mask_forward_bf16(util::bf16_bits(h) + c0, mask, util::bf16_bits(y) + c0,
                                      util::bf16_bits(d) + c0, n, kind);
         });
  ctx->save_for_backward({d});
  ctx->saved_data["derivative"] = true;
  return y;
}

// y = act(h) * mask in one pass per chunk; backward: grad * mask * act'(h), one pass
// (util/vec_kernels.h: libtorch 1.13's CPU GELU ran at 7-9 ns per element here). The
// activation runs in float32 whatever h's dtype; the kept scale is 1/(1-p) rounded to h's dtype,
// as dropout() applies it.
//
// bf16 on a CPU with the AVX-512 forms (util/vec_bf16.h): the forward reads and writes bf16 in
// place and keeps d = act'(h) * mask (bf16, the size of h, which it keeps instead); the backward
// is one product, dh = g d.
struct ActDropout : public torch::autograd::Function<ActDropout> {
  static torch::Tensor forward(AutogradContext* ctx, const torch::Tensor& h_in, int64_t act,
                               double p) {
    RECORD_FUNCTION("ropelab::act_dropout", std::vector<c10::IValue>());
    auto m = Mask::draw(p);
    m.save(ctx);
    ctx->saved_data["act"] = act;
    auto h = h_in.contiguous();
    const vec::Act kind = kernel_act(act);
    if (h.scalar_type() == torch::kBFloat16 && vec::bf16_rows_vectorised())
      return act_dropout_bf16_forward(ctx, m, h, kind);
    ctx->save_for_backward({h});
    ctx->saved_data["derivative"] = false;
    auto y = torch::empty_like(h);
    const bool f32 = h.scalar_type() == torch::kFloat32;
    chunks(m, h.numel(), keep_scale(h.scalar_type(), p),
           [&](int64_t c0, int64_t n, const float* mask) {
             std::vector<float> hb, yb(f32 ? 0 : kDropoutChunk);
             float* yp = f32 ? y.data_ptr<float>() + c0 : yb.data();
             vec::act_mask_forward(util::float_run(h, c0, n, hb), mask, yp, n, kind);
             util::store_float_run(yp, y, c0, n);
           });
    return y;
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto m = Mask::load(ctx);
    auto h = ctx->get_saved_variables()[0];
    if (ctx->saved_data["derivative"].toBool())
      return {act_dropout_backward_bf16(h, grad_out[0]), torch::Tensor(), torch::Tensor()};
    auto g = grad_out[0].contiguous();
    const vec::Act kind = kernel_act(ctx->saved_data["act"].toInt());
    auto dh = torch::empty_like(h);
    const bool f32 = h.scalar_type() == torch::kFloat32;
    chunks(m, h.numel(), keep_scale(h.scalar_type(), m.p),
           [&](int64_t c0, int64_t n, const float* mask) {
             std::vector<float> hb, gb, ob(f32 ? 0 : kDropoutChunk);
             float* op = f32 ? dh.data_ptr<float>() + c0 : ob.data();
             vec::act_mask_backward(util::float_run(h, c0, n, hb), util::float_run(g, c0, n, gb),
                                    mask, op, n, kind);
             util::store_float_run(op, dh, c0, n);
           });
    return {dh, torch::Tensor(), torch::Tensor()};
  }
};

torch::Tensor activation(const torch::Tensor& h, config::Activation act) {
  switch (act) {
    case config::Activation::kGelu:
      return torch::gelu(h);
    case config::Activation::kGeluTanh:
      return torch::gelu(h, "tanh");
    default:
      return torch::relu(h);
  }
}

}  // namespace

torch::Tensor dropout(const torch::Tensor& x, double p, bool training) {
  if (p <= 0 || !training) return x;
  if (!fused_path(x, p, training))
    return torch::nn::functional::dropout(
        x, torch::nn::functional::DropoutFuncOptions().p(p).training(true));
  auto m = Mask::draw(p);
  auto mask = torch::empty(x.sizes(), x.options().requires_grad(false));
  chunks(m, mask.numel(), keep_scale(x.scalar_type(), p),
         [&](int64_t c0, int64_t n, const float* f) { util::store_float_run(f, mask, c0, n); });
  return x * mask;
}

torch::Tensor dropout_add(const torch::Tensor& x, const torch::Tensor& h, double p, bool training) {
  if (!fused_path(h, p, training) || x.sizes() != h.sizes() || !x.device().is_cpu())
    return x + model::dropout(h, p, training);
  return DropoutAdd::apply(x, h, p);
}

bool fuses_act_dropout(const torch::Tensor& t, double p, bool training) {
  return fused_path(t, p, training) && vec::bf16_rows_vectorised();
}

ActDropoutBlocks::ActDropoutBlocks(config::Activation act, double p)
    : act_(act), keep_(keep_scale(torch::kBFloat16, p)) {
  const Mask m = Mask::draw(p);
  seed_ = m.seed;
  threshold_ = m.threshold;
}

void ActDropoutBlocks::apply(int64_t start, int64_t n, const uint16_t* h, uint16_t* y, uint16_t* d,
                             float* mask) const {
  vec::dropout_factors(seed_, threshold_, start, n, keep_, mask);
  vec::act_mask_forward_bf16(h, mask, y, d, n, kernel_act(static_cast<int64_t>(act_)));
}

torch::Tensor act_dropout_backward_bf16(const torch::Tensor& d, const torch::Tensor& g_in) {
  auto g = g_in.to(torch::kBFloat16).contiguous();
  auto dh = torch::empty_like(d);
  at::parallel_for(0, d.numel(), kDropoutChunk, [&](int64_t b, int64_t e) {
    vec::mul_bf16(util::bf16_bits(g) + b, util::bf16_bits(d) + b, util::bf16_bits(dh) + b, e - b);
  });
  return dh;
}

torch::Tensor act_dropout(const torch::Tensor& h, config::Activation act, double p, bool training) {
  if (!fused_path(h, p, training)) return model::dropout(activation(h, act), p, training);
  return ActDropout::apply(h, static_cast<int64_t>(act), p);
}

}  // namespace ropelab::model
