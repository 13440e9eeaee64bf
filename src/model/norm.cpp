#include "model/norm.h"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <vector>

#include "compat/torch_compat.h"
#include "util/float_rows.h"
#include "util/vec_bf16.h"

namespace ropelab::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

constexpr int64_t kRowBlock = 64;  // rows per task; each block sums its own dw, db

// LayerNorm of float32 rows written as bf16 (util/vec_bf16.h), for the matmul that reads it under
// CPU bf16 autocast: the values autocast's cast of the float32 norm would give, without writing
// that float32 output and reading it back. Inputs x [..., D] float32, w, b [D] float32; the
// backward takes the bf16 gradient and gives dx in float32, dw and db summed over the rows in a
// fixed order (blocks of kRowBlock rows, then the blocks in order: the same bits for any number
// of threads).
//
// Its second output is x itself (a view), for a pre-norm block's residual add: x's gradient
// through it arrives at this node with the norm's, and the backward adds the two in its own pass
// over dx (no separate add of two [rows, D] float32 gradients by autograd).
struct Bf16LayerNorm : public torch::autograd::Function<Bf16LayerNorm> {
  static variable_list forward(AutogradContext* ctx, const torch::Tensor& x_in,
                               const torch::Tensor& w_in, const torch::Tensor& b_in, double eps) {
    RECORD_FUNCTION("ropelab::layer_norm", std::vector<c10::IValue>());
    auto x = x_in.contiguous(), w = w_in.contiguous(), b = b_in.contiguous();
    const int64_t D = x.size(-1), rows = x.numel() / D;
    auto y = torch::empty(x.sizes(), x.options().dtype(torch::kBFloat16));
    auto stats = torch::empty({rows, 2}, x.options());
    const float* xp = x.data_ptr<float>();
    float* st = stats.data_ptr<float>();
    uint16_t* yp = util::bf16_bits(y);
    at::parallel_for(0, rows, kRowBlock, [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r)
        vec::layer_norm_row_bf16(xp + r * D, D, w.data_ptr<float>(), b.data_ptr<float>(),
                                 static_cast<float>(eps), yp + r * D, st + 2 * r, st + 2 * r + 1);
    });
    ctx->save_for_backward({x, w, stats});
    return {y, x_in};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_out) {
    auto saved = ctx->get_saved_variables();
    const auto& x = saved[0];
    const auto& w = saved[1];
    const float* st = saved[2].data_ptr<float>();
    auto g = grad_out[0].to(torch::kBFloat16).contiguous();
    auto res = grad_out[1].defined() ? grad_out[1].to(torch::kFloat32).contiguous() : grad_out[1];
    const float* dres = res.defined() ? res.data_ptr<float>() : nullptr;
    const int64_t D = x.size(-1), rows = x.numel() / D;
    const int64_t blocks = (rows + kRowBlock - 1) / kRowBlock;
    auto dx = torch::empty_like(x);
    std::vector<float> acc(static_cast<size_t>(blocks * 2 * D), 0.0F);  // per block: dw, db
    at::parallel_for(0, blocks, 1, [&](int64_t k0, int64_t k1) {
      for (int64_t k = k0; k < k1; ++k) {
        float* dw = acc.data() + k * 2 * D;
        for (int64_t r = k * kRowBlock; r < std::min(rows, (k + 1) * kRowBlock); ++r)
          vec::layer_norm_backward_row_bf16(x.data_ptr<float>() + r * D, D, w.data_ptr<float>(),
                                            st[2 * r], st[2 * r + 1], util::bf16_bits(g) + r * D,
                                            dres != nullptr ? dres + r * D : nullptr,
                                            dx.data_ptr<float>() + r * D, dw, dw + D);
      }
    });
    auto dwb = torch::zeros({2, D}, x.options());
    float* out = dwb.data_ptr<float>();
    for (int64_t k = 0; k < blocks; ++k)
      for (int64_t j = 0; j < 2 * D; ++j) out[j] += acc[static_cast<size_t>(k * 2 * D + j)];
    return {dx, dwb[0], dwb[1], torch::Tensor()};
  }
};

}  // namespace

NormImpl::NormImpl(int64_t d, double eps, config::NormType type) : d_(d), eps_(eps), type_(type) {
  weight = register_parameter(
      "weight", type == config::NormType::kRmsNormOffset ? torch::zeros({d}) : torch::ones({d}));
  if (type == config::NormType::kLayerNorm) bias = register_parameter("bias", torch::zeros({d}));
}

torch::Tensor NormImpl::forward(const torch::Tensor& x_in) {
  if (type_ == config::NormType::kLayerNorm)
    return torch::layer_norm(x_in.to(weight.scalar_type()), {d_}, weight, bias, eps_);
  auto x = x_in.to(torch::kFloat32);
  auto y = x * torch::rsqrt(x.pow(2).mean(-1, /*keepdim=*/true) + eps_);
  if (type_ == config::NormType::kRmsNormOffset) return (weight + 1.0) * y.to(weight.scalar_type());
  return weight * y.to(weight.scalar_type());
}

bool NormImpl::bf16_path(const torch::Tensor& x) const {
  return type_ == config::NormType::kLayerNorm && x.device().is_cpu() && x.numel() > 0 &&
         compat::autocast_enabled(c10::DeviceType::CPU) &&
         compat::autocast_dtype(c10::DeviceType::CPU) == torch::kBFloat16 &&
         vec::bf16_rows_vectorised() && weight.scalar_type() == torch::kFloat32 &&
         bias.scalar_type() == torch::kFloat32 &&
         (x.scalar_type() == torch::kFloat32 || x.scalar_type() == torch::kBFloat16);
}

torch::Tensor NormImpl::matmul_input(const torch::Tensor& x) {
  if (bf16_path(x)) return Bf16LayerNorm::apply(x.to(torch::kFloat32), weight, bias, eps_)[0];
  return forward(x);
}

std::pair<torch::Tensor, torch::Tensor> NormImpl::matmul_input_and_residual(
    const torch::Tensor& x) {
  if (!bf16_path(x)) return {forward(x), x};
  // A bf16 residual stream goes to the node as float32, a new tensor: x goes on apart.
  if (x.scalar_type() != torch::kFloat32) return {matmul_input(x), x};
  auto out = Bf16LayerNorm::apply(x, weight, bias, eps_);
  return {out[0], out[1]};
}

ParamRole NormImpl::role_of(const std::string& local) const {
  // An offset gain starts at 0 as a shift does (init_weights zeroes kNormShift).
  if (type_ == config::NormType::kRmsNormOffset) return ParamRole::kNormShift;
  return local == "weight" ? ParamRole::kNormGain : ParamRole::kNormShift;
}

}  // namespace ropelab::model
