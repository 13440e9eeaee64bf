#include "model/tiled_attention.h"
#include "model/tile_blocks.h"

#include <ATen/Parallel.h>

#include "compat/torch_compat.h"
#include "model/attention.h"
#include "util/vec_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace ropelab::model {

namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;
constexpr float kInf = std::numeric_limits<float>::infinity();

// One tile of a block: its local rows and columns, and where they are in the other numberings.
struct Tile {
  int64_t q0, q1, k0, k1;
  int64_t q_pos, k_pos, q_at, k_at;
  int64_t tq() const { return q1 - q0; }
  int64_t tk() const { return k1 - k0; }
};

// The allowed pairs of one tile, [1 or B, 1, tq, tk] bool; undefined when every pair is allowed.
torch::Tensor tile_allowed(const TileMask& m, const Tile& t, torch::Device dev) {
  const int64_t tq = t.tq(), tk = t.tk();
  auto span = m.allowed_TS(t.q_pos, tq, t.k_pos, tk, dev);
  auto narrow = [](const torch::Tensor& x, int64_t from, int64_t n) {
    return x.defined() ? x.narrow(1, from, n) : x;
  };
  return restrict_to_tokens(span.defined() ? span.view({1, 1, tq, tk}) : span,
                            narrow(m.key_pad_BS, t.k_at, tk), narrow(m.doc_q_BT, t.q_at, tq),
                            narrow(m.doc_k_BS, t.k_at, tk));
}

// exp(x) in place, with exp(x) = 0 where x < -60. Far-away keys under a steep bias (ALiBi's
// slopes reach 0.5 a position) would otherwise give exp of -100 and below: subnormal floats,
// which x86 CPUs compute in microcode, 8x slower in exp and 70x slower in the matmul that
// reads them. A weight of e^-60 (1e-26) of the row's largest is below float32's resolution
// of a sum of even 2^30 terms, so dropping it changes no result.
torch::Tensor& exp_dropping_negligible_(torch::Tensor& x) {
  return at::threshold_(x, vec::kNegligibleExp, -kInf).exp_();
}

// One tile's scores: scale q k^T (q is scaled already; the tile's rows and columns of q and k)
// plus the tile's bias, with
// vec::kMaskedScore (finite: the row kernels are built with -ffast-math) where the mask says
// no. [B, N, tq, tk] float32, contiguous.
torch::Tensor tile_scores(const torch::Tensor& q, const torch::Tensor& k, const TilePlan& plan,
                          const Tile& t) {
  auto s = batched_matmul(q.narrow(2, t.q0, t.tq()), k.narrow(2, t.k0, t.tk()).transpose(-2, -1))
               .contiguous();
  if (plan.bias.defined())
    plan.bias.add_tile_to(s, t.q_at, t.q_at + t.tq(), t.k_at, t.k_at + t.tk(), plan.fused(q));
  auto allowed = tile_allowed(plan.mask, t, q.device());
  if (allowed.defined()) s.masked_fill_(allowed.logical_not(), vec::kMaskedScore);
  return s;
}

// f(r, row) for each row r of a [B, N, tq, tk] tile, row = its index in a [B, N, T, 1] tensor
// of per-query values (the tile's first query is q0), on ATen's threads.
template <class F>
void each_row(const torch::Tensor& s, int64_t T, int64_t q0, const F& f) {
  const int64_t tq = s.size(2);
  at::parallel_for(0, s.size(0) * s.size(1) * tq, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) f(r, (r / tq) * T + q0 + r % tq);
  });
}

// The forward pass's softmax step on a tile: s becomes P = exp(S - m'), the running max m_run
// and sum l_run [B, N, T, 1] of the tile's rows are updated, and the rows' decay
// exp(m - m') [B, N, tq, 1] is returned (for the output accumulator). On the CPU one fused pass
// per row (util/vec_kernels.h, `fused`); otherwise the same in ATen ops.
torch::Tensor online_softmax_(torch::Tensor& s, torch::Tensor& m_run, torch::Tensor& l_run,
                              int64_t q0, bool fused) {
  const int64_t tq = s.size(2), tk = s.size(3), T = m_run.size(2);
  if (fused) {
    auto decay = torch::empty({s.size(0), s.size(1), tq, 1}, s.options());
    float *sp = s.data_ptr<float>(), *mp = m_run.data_ptr<float>(), *lp = l_run.data_ptr<float>(),
          *dp = decay.data_ptr<float>();
    each_row(s, T, q0, [&](int64_t r, int64_t row) {
      vec::online_softmax_row(sp + r * tk, tk, mp + row, lp + row, dp + r);
    });
    return decay;
  }
  auto m_old = m_run.narrow(2, q0, tq);
  auto m_new = torch::maximum(m_old, std::get<0>(s.max(-1, true)));
  // A row that has seen no key yet shifts by 0: its masked scores stay far below the cutoff.
  auto shift = torch::where(m_new <= vec::kMaskedBelow, torch::zeros_like(m_new), m_new);
  exp_dropping_negligible_(s.sub_(shift));
  auto decay = m_old - shift;
  exp_dropping_negligible_(decay);
  l_run.narrow(2, q0, tq).mul_(decay).add_(s.sum(-1, true));
  m_old.copy_(m_new);
  return decay;
}

// The backward pass's P = exp(S - L) of a tile, in place (L: the rows' log-sum-exp [B, N, T, 1]).
void exp_shifted_(torch::Tensor& s, const torch::Tensor& lse, int64_t q0, bool fused) {
  if (fused) {
    const int64_t tk = s.size(3);
    float* sp = s.data_ptr<float>();
    const float* lp = lse.data_ptr<float>();
    each_row(s, lse.size(2), q0,
             [&](int64_t r, int64_t row) { vec::exp_shifted_row(sp + r * tk, tk, lp[row]); });
    return;
  }
  exp_dropping_negligible_(s.sub_(lse.narrow(2, q0, s.size(2))));
}

// dS = P o (dP - D), in place in p (D: rowsum(dO o O) [B, N, T, 1]).
void softmax_grad_(torch::Tensor& p, const torch::Tensor& dp, const torch::Tensor& D, int64_t q0,
                   bool fused) {
  if (fused) {
    const int64_t tk = p.size(3);
    float* pp = p.data_ptr<float>();
    const float *dpp = dp.data_ptr<float>(), *Dp = D.data_ptr<float>();
    each_row(p, D.size(2), q0, [&](int64_t r, int64_t row) {
      vec::softmax_grad_row(pp + r * tk, dpp + r * tk, tk, Dp[row]);
    });
    return;
  }
  p.mul_(dp.sub_(D.narrow(2, q0, p.size(2))));
}

// The tiles of a block: query tiles of sizes.q rows and, for each, the key tiles of sizes.k
// columns it may see (tiles counted from the block's first row and column).
template <class F>
void each_tile(const TileMask& m, const TileBlock& b, TileSizes sizes, F&& f) {
  for (int64_t q0 = b.q0; q0 < b.q1; q0 += sizes.q) {
    const int64_t q1 = std::min(b.q1, q0 + sizes.q);
    const int64_t p0 = b.q_pos + (q0 - b.q0), p1 = b.q_pos + (q1 - 1 - b.q0);
    auto [lo, hi] = m.keys(p0, p1);  // positions, not clipped
    lo = std::max(lo, b.k_pos) - b.k_pos;
    hi = std::min(hi, b.k_pos + (b.k1 - b.k0)) - b.k_pos;  // the block's columns [lo, hi)
    for (int64_t k = lo / sizes.k * sizes.k; k < hi; k += sizes.k) {
      const int64_t k0 = b.k0 + k, k1 = std::min(b.k1, k0 + sizes.k);
      const Tile t{q0, q1, k0, k1, p0, b.k_pos + k, b.q_at + (q0 - b.q0), b.k_at + k};
      if (m.block(p0, p1, t.k_pos, t.k_pos + t.tk() - 1) != Span::Block::kEmpty) f(t);
    }
  }
}

// The gradients of one tile's bias parts from dS [B, N, tq, tk], added into grads (one per
// input of the function).
void bias_grads(const TilePlan& plan, const torch::Tensor& ds, const Tile& t,
                variable_list& grads) {
  const ScoreBias& b = plan.bias;
  const int64_t q0 = t.q_at, q1 = t.q_at + t.tq(), k0 = t.k_at, k1 = t.k_at + t.tk();
  if (plan.rel >= 0)
    relative_tile_grad(grads[plan.rel], ds.size(0) == 1 ? ds.select(0, 0) : ds.sum(0), b.S, q0, k0);
  if (plan.row >= 0)
    grads[plan.row]
        .narrow(2, q0, t.tq())
        .add_(at::sum_to(ds.sum(-1), b.row_BNT.narrow(2, q0, t.tq()).sizes()));
  if (plan.col >= 0)
    grads[plan.col]
        .narrow(2, k0, t.tk())
        .add_(at::sum_to(ds.sum(-2), b.col_BNS.narrow(2, k0, t.tk()).sizes()));
  if (plan.params >= 0) {  // the function part: its tile again, with autograd
    torch::AutoGradMode grad_on(true);
    auto tile = b.fn(q0, q1, k0, k1);
    auto g = torch::autograd::grad(
        {tile}, b.params, {at::sum_to(ds, tile.sizes()).to(tile.dtype())}, false, false, true);
    for (size_t i = 0; i < g.size(); ++i)
      if (g[i].defined()) grads[plan.params + static_cast<int64_t>(i)].add_(g[i]);
  }
}

struct TiledAttention : public torch::autograd::Function<TiledAttention> {
  // inputs: q (already scaled by 1/sqrt(H)), k, v, all float32, then the bias parts of `plan`.
  static variable_list forward(AutogradContext* ctx, at::TensorList inputs,
                               const c10::intrusive_ptr<TilePlan>& plan) {
    const auto &q = inputs[0], &k = inputs[1], &v = inputs[2];
    OnlineSoftmax state(q, v.size(3), plan->sink_N);
    forward_block(q, k, v, *plan, whole_pass(plan->mask, q.size(2), k.size(2)), state);
    return {save_pass(ctx, q, k, v, state, plan)};
  }

  static variable_list backward(AutogradContext* ctx, const variable_list& grad_out) {
    const SavedPass p(ctx, grad_out);
    NoAutocast no_autocast(p.q.device().type());
    auto grads = p.zero_grads();
    backward_block(p.q, p.k, p.v, p.dout, p.lse, p.D, *p.plan,
                   whole_pass(p.plan->mask, p.q.size(2), p.k.size(2)), grads);
    return p.returned(std::move(grads));
  }
};

}  // namespace

NoAutocast::NoAutocast(c10::DeviceType type) : type_(type), was_(compat::autocast_enabled(type)) {
  if (was_) compat::set_bf16_autocast(type_, false);
}

NoAutocast::~NoAutocast() {
  if (was_) compat::set_bf16_autocast(type_, true);
}

TileBlock whole_pass(const TileMask& mask, int64_t T, int64_t S) {
  return TileBlock{0, T, 0, S, mask.q_offset, 0, 0, 0};
}

bool block_may_attend(const TileMask& m, const TileBlock& b) {
  if (b.q1 <= b.q0 || b.k1 <= b.k0) return false;
  if (m.block(b.q_pos, b.q_pos + (b.q1 - b.q0) - 1, b.k_pos, b.k_pos + (b.k1 - b.k0) - 1) ==
      Span::Block::kEmpty)
    return false;
  if (!m.doc_q_BT.defined()) return true;
  auto dq = m.doc_q_BT.narrow(1, b.q_at, b.q1 - b.q0),
       dk = m.doc_k_BS.narrow(1, b.k_at, b.k1 - b.k0);
  return dq.min().item<int64_t>() <= dk.max().item<int64_t>() &&
         dk.min().item<int64_t>() <= dq.max().item<int64_t>();
}

variable_list bias_inputs(TilePlan& plan) {
  variable_list parts;
  auto take = [&parts](const torch::Tensor& x, int64_t& index) {
    if (!x.defined() || !x.requires_grad()) return;
    index = 3 + static_cast<int64_t>(parts.size());
    parts.push_back(x);
  };
  const ScoreBias& b = plan.bias;
  take(b.rel_NR, plan.rel);
  take(b.row_BNT, plan.row);
  take(b.col_BNS, plan.col);
  bool any = false;
  for (const auto& p : b.params) any = any || p.requires_grad();
  if (b.fn && any) {
    plan.params = 3 + static_cast<int64_t>(parts.size());
    parts.insert(parts.end(), b.params.begin(), b.params.end());
  }
  take(plan.sink_N, plan.sink);
  return parts;
}

variable_list kernel_inputs(const torch::Tensor& q_BNTH, const torch::Tensor& k,
                            const torch::Tensor& v, const TileMask& mask, const ScoreBias& bias,
                            TileSizes tiles, const torch::Tensor& sink_N, TilePlan& plan) {
  const double scale = 1.0 / std::sqrt(static_cast<double>(q_BNTH.size(-1)));
  variable_list inputs{(q_BNTH.to(torch::kFloat32) * scale).contiguous(),
                       k.to(torch::kFloat32).contiguous(), v.to(torch::kFloat32).contiguous()};
  plan.mask = mask;
  plan.sizes = tiles;
  plan.bias = bias;
  plan.sink_N = sink_N;
  auto parts = bias_inputs(plan);
  inputs.insert(inputs.end(), parts.begin(), parts.end());
  return inputs;
}

torch::Tensor save_pass(AutogradContext* ctx, const torch::Tensor& q, const torch::Tensor& k,
                        const torch::Tensor& v, const OnlineSoftmax& state,
                        const c10::intrusive_ptr<TilePlan>& plan) {
  auto [out, lse] = state.finish();
  ctx->save_for_backward({q, k, v, out, lse});
  ctx->saved_data["plan"] = c10::IValue::make_capsule(plan);
  return out;
}

SavedPass::SavedPass(AutogradContext* ctx, const variable_list& grad_out) {
  auto saved = ctx->get_saved_variables();
  q = saved[0], k = saved[1], v = saved[2], out = saved[3], lse = saved[4];
  plan = c10::static_intrusive_pointer_cast<TilePlan>(ctx->saved_data["plan"].toCapsule());
  dout = grad_out[0].to(torch::kFloat32).contiguous();
  D = (dout * out).sum(-1, true);
}

variable_list TilePlan::parts() const {
  std::vector<std::pair<int64_t, torch::Tensor>> at{
      {rel, bias.rel_NR}, {row, bias.row_BNT}, {col, bias.col_BNS}, {sink, sink_N}};
  for (size_t i = 0; params >= 0 && i < bias.params.size(); ++i)
    at.emplace_back(params + static_cast<int64_t>(i), bias.params[i]);
  variable_list out;
  for (const auto& [index, x] : at) {
    if (index < 0) continue;
    if (static_cast<size_t>(index - 3) >= out.size()) out.resize(static_cast<size_t>(index - 2));
    out[static_cast<size_t>(index - 3)] = x;
  }
  return out;
}

variable_list SavedPass::zero_grads() const {
  variable_list grads{torch::zeros_like(q), torch::zeros_like(k), torch::zeros_like(v)};
  for (const auto& x : plan->parts()) grads.push_back(torch::zeros(x.sizes(), q.options()));
  return grads;
}

variable_list SavedPass::returned(variable_list grads) const {
  if (plan->sink >= 0) grads[plan->sink] = sink_grad(*plan, lse, D);
  auto parts = plan->parts();
  for (size_t i = 0; i < parts.size(); ++i) grads[3 + i] = grads[3 + i].to(parts[i].dtype());
  grads.emplace_back();  // the plan
  return grads;
}

OnlineSoftmax::OnlineSoftmax(const torch::Tensor& q, int64_t Hv, const torch::Tensor& sink_N) {
  const int64_t B = q.size(0), N = q.size(1), T = q.size(2);
  auto f32 = q.options().dtype(torch::kFloat32);
  acc_BNTH = torch::zeros({B, N, T, Hv}, f32);
  const bool sinks = sink_N.defined();
  m_BNT1 = sinks ? sink_N.to(f32).view({1, N, 1, 1}).expand({B, N, T, 1}).clone()
                 : torch::full({B, N, T, 1}, vec::kMaskedScore, f32);
  l_BNT1 = sinks ? torch::ones({B, N, T, 1}, f32) : torch::zeros({B, N, T, 1}, f32);
}

std::pair<torch::Tensor, torch::Tensor> OnlineSoftmax::finish() const {
  auto seen = l_BNT1 > 0;
  auto out = torch::where(seen, acc_BNTH / l_BNT1.clamp_min(1e-30), torch::zeros_like(acc_BNTH));
  auto lse = torch::where(seen, m_BNT1 + l_BNT1.clamp_min(1e-30).log(),
                          torch::full_like(m_BNT1, -vec::kMaskedScore));
  return {out, lse};
}

void forward_block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                   const TilePlan& plan, const TileBlock& b, OnlineSoftmax& state) {
  const bool fused = plan.fused(q);
  each_tile(plan.mask, b, plan.sizes, [&](const Tile& t) {
    auto s = tile_scores(q, k, plan, t);
    auto decay = online_softmax_(s, state.m_BNT1, state.l_BNT1, t.q0, fused);  // s is P now
    state.acc_BNTH.narrow(2, t.q0, t.tq())
        .mul_(decay)
        .add_(batched_matmul(s, v.narrow(2, t.k0, t.tk())));
  });
}

void backward_block(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                    const torch::Tensor& dout, const torch::Tensor& lse, const torch::Tensor& D,
                    const TilePlan& plan, const TileBlock& b, variable_list& grads) {
  const bool fused = plan.fused(q);
  auto &dq = grads[0], &dk = grads[1], &dv = grads[2];
  each_tile(plan.mask, b, plan.sizes, [&](const Tile& t) {
    const int64_t tq = t.tq(), tk = t.tk();
    auto qt = q.narrow(2, t.q0, tq), kt = k.narrow(2, t.k0, tk), vt = v.narrow(2, t.k0, tk);
    auto s = tile_scores(q, k, plan, t);
    exp_shifted_(s, lse, t.q0, fused);  // s is P now
    auto dot = dout.narrow(2, t.q0, tq);
    dv.narrow(2, t.k0, tk).add_(batched_matmul(s.transpose(-2, -1), dot));
    auto dp = batched_matmul(dot, vt.transpose(-2, -1)).contiguous();
    softmax_grad_(s, dp, D, t.q0, fused);  // s is dS now
    const auto& ds = s;
    dq.narrow(2, t.q0, tq).add_(batched_matmul(ds, kt));
    dk.narrow(2, t.k0, tk).add_(batched_matmul(ds.transpose(-2, -1), qt));
    bias_grads(plan, ds, t, grads);
  });
}

torch::Tensor sink_grad(const TilePlan& plan, const torch::Tensor& lse, const torch::Tensor& D) {
  return -(torch::exp(plan.sink_N.to(torch::kFloat32).view({1, -1, 1, 1}) - lse) * D)
              .sum({0, 2, 3});
}

bool tile_may_attend(const TileMask& m, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
  return m.block(m.q_offset + q0, m.q_offset + q1 - 1, k0, k1 - 1) != Span::Block::kEmpty;
}

torch::Tensor tiled_attention(const torch::Tensor& q_BNTH, const torch::Tensor& k_BNSH,
                              const torch::Tensor& v_BNSH, const TileMask& mask,
                              const ScoreBias& bias, TileSizes tiles, const torch::Tensor& sink_N) {
  TORCH_CHECK(tiles.q > 0 && tiles.k > 0, "tiled_attention: tile sizes must be positive");
  TORCH_CHECK(bias.tileable(), "tiled_attention: a stored (dense) score bias cannot be tiled");
  TORCH_CHECK(!bias.defined() || (bias.T == q_BNTH.size(2) && bias.S == k_BNSH.size(2)),
              "tiled_attention: the score bias was made for other lengths");
  NoAutocast no_autocast(q_BNTH.device().type());
  auto plan = c10::make_intrusive<TilePlan>();
  auto inputs = kernel_inputs(q_BNTH, k_BNSH, v_BNSH, mask, bias, tiles, sink_N, *plan);
  // A TensorList (not a vector) so that autograd sees each tensor as an input.
  return TiledAttention::apply(at::TensorList(inputs), plan)[0].to(v_BNSH.scalar_type());
}

torch::Tensor tiled_attention_reference(const torch::Tensor& q_BNTH, const torch::Tensor& k_BNSH,
                                        const torch::Tensor& v_BNSH, const TileMask& mask,
                                        const ScoreBias& bias, const torch::Tensor& sink_N) {
  const int64_t T = q_BNTH.size(2), S = k_BNSH.size(2);
  const double scale = 1.0 / std::sqrt(static_cast<double>(q_BNTH.size(-1)));
  // float64 inputs stay float64 (the tests' reference); anything else computes in float32.
  const auto dt = q_BNTH.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
  auto q = q_BNTH.to(dt) * scale;
  auto s = torch::matmul(q, k_BNSH.to(dt).transpose(-2, -1));
  if (bias.defined()) s = s + bias.tile(0, T, 0, S).to(dt);
  auto allowed = tile_allowed(mask, Tile{0, T, 0, S, mask.q_offset, 0, 0, 0}, q.device());
  if (!allowed.defined()) allowed = torch::ones({1, 1, T, S}, s.options().dtype(torch::kBool));
  s = s.masked_fill(allowed.logical_not(), -kInf);
  auto any = allowed.any(-1, true);
  torch::Tensor p;
  if (sink_N.defined()) {  // one more column, the sink's, with no value
    const auto B = s.size(0), N = s.size(1);
    auto col = sink_N.to(dt).view({1, N, 1, 1}).expand({B, N, T, 1});
    p = torch::softmax(torch::cat({s.expand({B, N, T, S}), col}, -1), -1).narrow(-1, 0, S);
  } else {
    // softmax of a row of -inf is NaN: such rows get 0 scores, then 0 weights.
    p = torch::softmax(torch::where(any, s, torch::zeros_like(s)), -1) * any;
  }
  return torch::matmul(p, v_BNSH.to(dt)).to(v_BNSH.scalar_type());
}

}  // namespace ropelab::model
