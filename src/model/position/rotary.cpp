#include "model/position/rotary.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>

#include <vector>

#include "model/position/rope_frequencies.h"
#include "util/float_rows.h"
#include "util/vec_bf16.h"
#include "util/vec_kernels.h"

namespace ropelab::model {

RotaryImpl::RotaryImpl(const config::RopeConfig& c, const PositionDims& d)
    : PositionModuleImpl(d),
      base_(c.base),
      fraction_(c.fraction),
      interleaved_(c.pairing == config::RopePairing::kInterleaved),
      rotary_dim_(c.rotary_dim),
      nope_every_(c.nope_every),
      nope_layers_(c.nope_layers.begin(), c.nope_layers.end()),
      scaling_(c.scaling) {}

bool RotaryImpl::acts_in_layer(int64_t layer) const {
  if (nope_every_ > 0 && (layer + 1) % nope_every_ == 0) return false;
  return nope_layers_.count(layer) == 0;
}

bool RotaryImpl::depends_on_length() const { return model::depends_on_length(scaling_); }

RotaryImpl::RotaryImpl(const config::XposConfig& c, const PositionDims& d)
    : PositionModuleImpl(d), base_(c.base), scale_base_(c.scale_base), xpos_(true) {}

const RotaryImpl::Frequencies& RotaryImpl::frequencies(int64_t r, int64_t length,
                                                       torch::Device dev) const {
  auto key = std::make_tuple(r, depends_on_length() ? length : int64_t{0}, dev.str());
  auto it = frequencies_.find(key);
  if (it != frequencies_.end()) return it->second;
  RopeFrequencies f = rope_frequencies(scaling_, base_, r, length);
  keep_fastest(f.theta, fraction_);
  Frequencies out;
  out.theta_R = torch::tensor(f.theta, torch::kFloat64)
                    .to(torch::TensorOptions().dtype(torch::kFloat32).device(dev));
  out.attention_factor = f.attention_factor;
  return frequencies_.emplace(key, std::move(out)).first->second;
}

const PosCache::Tables& RotaryImpl::tables(const PosCache& c, int64_t width) const {
  auto it = c.rot.find(width);
  if (it != c.rot.end()) return it->second;
  ++table_count_;
  // Partial rotary applies to the head; a linear kernel's feature maps are rotated whole.
  int64_t r = (rotary_dim_ > 0 && width == dims_.head_dim) ? rotary_dim_ : width;
  auto opts = torch::TensorOptions().dtype(torch::kFloat32).device(c.q_pos_T.device());
  const Frequencies& f = frequencies(r, c.length, c.q_pos_T.device());
  const auto& inv_freq_R = f.theta_R;  // theta_i
  double af = f.attention_factor;
  auto table = [&](const torch::Tensor& pos) {
    auto angle = torch::outer(pos, inv_freq_R);  // [T, r/2]
    if (af == 1.0) return std::make_pair(torch::cos(angle), torch::sin(angle));
    return std::make_pair(torch::cos(angle) * af, torch::sin(angle) * af);
  };
  PosCache::Tables t;
  std::tie(t.cos_q, t.sin_q) = table(c.q_pos_T);
  std::tie(t.cos_k, t.sin_k) = table(c.k_pos_S);
  t.cos_qF = spread(t.cos_q, interleaved_, false);
  t.sin_qF = spread(t.sin_q, interleaved_, true);
  t.cos_kF = spread(t.cos_k, interleaved_, false);
  t.sin_kF = spread(t.sin_k, interleaved_, true);
  if (xpos_) {
    // zeta_i = (2i/r + 0.4) / 1.4 ; queries scaled by zeta^(m/gamma), keys by zeta^(-n/gamma).
    auto i = torch::arange(0, r / 2, opts);
    auto zeta = (2.0 * i / static_cast<double>(r) + 0.4) / 1.4;
    t.scale_q = torch::pow(zeta.unsqueeze(0), c.q_pos_T.unsqueeze(1) / scale_base_);
    t.scale_k = torch::pow(zeta.unsqueeze(0), -c.k_pos_S.unsqueeze(1) / scale_base_);
  }
  return c.rot.emplace(width, std::move(t)).first->second;
}

torch::Tensor RotaryImpl::spread(const torch::Tensor& t, bool interleaved, bool signed_first) {
  auto first = signed_first ? -t : t;
  if (interleaved) return torch::stack({first, t}, -1).flatten(-2);  // [c0 c0 c1 c1 ...]
  return torch::cat({first, t}, -1);                                 // [c0 c1 ... c0 c1 ...]
}

namespace {

// x * cos + swap_pairs(x) * sin in one pass per row on the CPU (vec::rope_row, or
// vec::rope_row_bf16 on bf16 without a float32 staging copy), forward and backward: x [B, N, T, W]
// read in place through its strides (q and k are views of the fused QKV projection's output), the
// result contiguous in x's dtype, computed in float32; tables [T, W] float32 without gradients. The
// unfused ops (a flip or a cat, two multiplies, an add and the casts) each made a pass and a
// tensor.
struct FusedRope : public torch::autograd::Function<FusedRope> {
  // y = rope(x) (or its backward) row by row: x [B, N, T, W] through its strides (the last one
  // 1), y contiguous. bf16 on a CPU with the AVX-512 forms: vec::rope_row_bf16 reads and writes
  // bf16 directly; otherwise each row is staged in float32 for vec::rope_row(_backward).
  // y_btnw: y's storage laid out [B, T, N, W] (returned as its [B, N, T, W] transposed view).
  static torch::Tensor rows(const torch::Tensor& x, const torch::Tensor& cos_TF,
                            const torch::Tensor& sin_TF, bool interleaved, bool backward,
                            bool y_btnw) {
    const int64_t B = x.size(0), N = x.size(1), T = x.size(2), W = x.size(3);
    auto y = y_btnw
                 ? torch::empty({B, T, N, W}, x.options()).transpose(1, 2)
                 : torch::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
    const float* c = cos_TF.data_ptr<float>();
    const float* s = sin_TF.data_ptr<float>();
    const bool bf16 = x.scalar_type() == torch::kBFloat16 && vec::bf16_simd();
    const bool f32 = y.scalar_type() == torch::kFloat32;
    const auto* xb = bf16 ? util::bf16_bits(x) : nullptr;
    auto* yb = bf16 ? util::bf16_bits(y) : nullptr;
    at::parallel_for(0, x.numel() / W, bf16 ? 64 : 16, [&](int64_t r0, int64_t r1) {
      std::vector<float> ib, ob(f32 || bf16 ? 0 : static_cast<size_t>(W));
      for (int64_t r = r0; r < r1; ++r) {
        const int64_t b = r / (N * T), n = (r / T) % N, t = r % T;
        const int64_t off = b * x.stride(0) + n * x.stride(1) + t * x.stride(2);
        const int64_t y_off = y_btnw ? ((b * T + t) * N + n) * W : r * W;
        if (bf16) {
          vec::rope_row_bf16(xb + off, c + t * W, s + t * W, yb + y_off, W, interleaved, backward);
          continue;
        }
        float* o = f32 ? y.data_ptr<float>() + y_off : ob.data();
        const float* xr = util::float_run(x, off, W, ib);
        if (backward)
          vec::rope_row_backward(xr, c + t * W, s + t * W, o, W, interleaved);
        else
          vec::rope_row(xr, c + t * W, s + t * W, o, W, interleaved);
        util::store_float_run(o, y, y_off, W);
      }
    });
    return y;
  }

  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& cos_TF, const torch::Tensor& sin_TF,
                               bool interleaved) {
    RECORD_FUNCTION("ropelab::rope", std::vector<c10::IValue>());
    ctx->save_for_backward({cos_TF, sin_TF});
    ctx->saved_data["interleaved"] = interleaved;
    // q and k are views [B, N, T, W] of a [B, T, N, W] layout (the heads of a projection): their
    // gradient is written in that layout, so that the heads' merge in the backward is a view.
    ctx->saved_data["btnw"] = x.stride(2) > x.stride(1);
    return rows(x, cos_TF, sin_TF, interleaved, false, false);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    // The gradient as it comes (k's is a transposed view: read through its strides, not copied).
    auto g = grad_out[0].stride(3) == 1 ? grad_out[0] : grad_out[0].contiguous();
    auto gx = rows(g, saved[0], saved[1], ctx->saved_data["interleaved"].toBool(), true,
                   ctx->saved_data["btnw"].toBool());
    return {gx, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

bool fused_rope_applies(const torch::Tensor& x, const torch::Tensor& cos_TF,
                        const torch::Tensor& sin_TF) {
  auto table_ok = [&](const torch::Tensor& t) {
    return t.device().is_cpu() && t.scalar_type() == torch::kFloat32 && t.dim() == 2 &&
           t.size(0) == x.size(2) && t.size(1) == x.size(3) && !t.requires_grad();
  };
  return x.device().is_cpu() && x.dim() == 4 && x.numel() > 0 && x.stride(3) == 1 &&
         x.size(3) % 2 == 0 &&
         (x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16) &&
         table_ok(cos_TF) && table_ok(sin_TF);
}

}  // namespace

torch::Tensor RotaryImpl::rotate_spread(const torch::Tensor& x, const torch::Tensor& cos_TF,
                                        const torch::Tensor& sin_TF, bool interleaved) {
  int64_t r = cos_TF.size(-1);
  int64_t width = x.size(-1);
  if (r == width && fused_rope_applies(x, cos_TF, sin_TF))
    return FusedRope::apply(x, cos_TF.contiguous(), sin_TF.contiguous(), interleaved);
  auto xr = r == width ? x : x.narrow(-1, 0, r);
  // swap_pairs: (x1, x2) -> (x2, x1) in each pair, so that
  //   [x1, x2] -> [x1 cos - x2 sin, x2 cos + x1 sin]   (RoFormer Eq. 34)
  // is x * cos + swap_pairs(x) * sin with the sign folded into the table. A bf16 x meets the
  // float32 tables and is rotated in float32.
  torch::Tensor swapped;
  if (interleaved) {
    swapped = xr.unflatten(-1, {r / 2, 2}).flip(-1).flatten(-2);
  } else {
    swapped = torch::cat({xr.narrow(-1, r / 2, r / 2), xr.narrow(-1, 0, r / 2)}, -1);
  }
  if (swapped.scalar_type() != sin_TF.scalar_type()) swapped = swapped.to(sin_TF.scalar_type());
  auto y = torch::addcmul(xr * cos_TF, swapped, sin_TF).to(x.scalar_type());
  return r == width ? y : torch::cat({y, x.narrow(-1, r, width - r)}, -1);
}

torch::Tensor RotaryImpl::rotate(const torch::Tensor& x, const torch::Tensor& cos_TR,
                                 const torch::Tensor& sin_TR, bool interleaved) {
  return rotate_spread(x, spread(cos_TR, interleaved, false), spread(sin_TR, interleaved, true),
                       interleaved);
}

namespace {
torch::Tensor apply_scale(const torch::Tensor& y, const torch::Tensor& scale_TR, bool interleaved) {
  if (!scale_TR.defined()) return y;
  // Each pair shares its decay factor. (Not repeat_interleave: with a count it sums the repeats
  // on the host to size its output, a device sync.)
  auto s = interleaved ? scale_TR.unsqueeze(-1).expand({-1, -1, 2}).flatten(-2)
                       : torch::cat({scale_TR, scale_TR}, -1);
  int64_t r = s.size(-1);
  if (r == y.size(-1)) return (y.to(torch::kFloat32) * s).to(y.scalar_type());
  auto head = (y.narrow(-1, 0, r).to(torch::kFloat32) * s).to(y.scalar_type());
  return torch::cat({head, y.narrow(-1, r, y.size(-1) - r)}, -1);
}
}  // namespace

torch::Tensor RotaryImpl::rotate_q(const torch::Tensor& x, const PosCache& c) {
  const auto& t = tables(c, x.size(-1));
  return apply_scale(rotate_spread(x, t.cos_qF, t.sin_qF, interleaved_), t.scale_q, interleaved_);
}

torch::Tensor RotaryImpl::rotate_k(const torch::Tensor& x, const PosCache& c) {
  const auto& t = tables(c, x.size(-1));
  return apply_scale(rotate_spread(x, t.cos_kF, t.sin_kF, interleaved_), t.scale_k, interleaved_);
}

std::optional<PositionModuleImpl::Rotation> RotaryImpl::rotation(const PosCache& c,
                                                                 int64_t width) const {
  const auto& t = tables(c, width);
  if (xpos_ || t.cos_qF.size(-1) != width) return std::nullopt;
  return Rotation{t.cos_qF, t.sin_qF, t.cos_kF, t.sin_kF, interleaved_};
}

PositionModule make_position(const config::RopeConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<RotaryImpl>(c, d)));
}
PositionModule make_position(const config::XposConfig& c, const PositionDims& d) {
  return PositionModule(std::shared_ptr<PositionModuleImpl>(std::make_shared<RotaryImpl>(c, d)));
}

}  // namespace ropelab::model
