#include "model/score_bias.h"

#include <ATen/Parallel.h>

#include <utility>

#include "util/vec_kernels.h"

namespace ropelab::model {

ScoreBias::ScoreBias(torch::Tensor dense_bias) : dense(std::move(dense_bias)) {
  if (dense.defined()) {
    T = dense.size(-2);
    S = dense.size(-1);
  }
}

namespace {

// tile[n, t, s] = rel[n, c + t - s] with c = q0 - k0 + S - 1: a Toeplitz matrix. Read with the
// key axis reversed (s' = tk - 1 - s) it is rel[n, c - tk + 1 + t + s'], a strided view of rel
// (strides 1 and 1); one flip makes it the tile. No gather.
torch::Tensor toeplitz_tile(const torch::Tensor& rel_NR, int64_t S, int64_t q0, int64_t q1,
                            int64_t k0, int64_t k1) {
  const int64_t tq = q1 - q0, tk = k1 - k0, c = q0 - k0 + S - 1;
  auto rel = rel_NR.contiguous();
  auto view = rel.as_strided({rel.size(0), tq, tk}, {rel.stride(0), 1, 1},
                             rel.storage_offset() + c - tk + 1);
  return view.flip(-1);
}

// The Toeplitz tile with its gradient as diagonal sums (autograd's own as_strided backward
// would scatter element by element).
struct RelativeTile : public torch::autograd::Function<RelativeTile> {
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& rel_NR,
                               int64_t S, int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
    ctx->saved_data["S"] = S;
    ctx->saved_data["q0"] = q0;
    ctx->saved_data["k0"] = k0;
    ctx->saved_data["R"] = rel_NR.size(1);
    ctx->saved_data["dtype"] = rel_NR.scalar_type();
    return toeplitz_tile(rel_NR, S, q0, q1, k0, k1);
  }
  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_out) {
    const auto& g = grad_out[0];
    auto grad_NR =
        torch::zeros({g.size(0), ctx->saved_data["R"].toInt()}, g.options().dtype(torch::kFloat32));
    relative_tile_grad(grad_NR, g.to(torch::kFloat32), ctx->saved_data["S"].toInt(),
                       ctx->saved_data["q0"].toInt(), ctx->saved_data["k0"].toInt());
    return {grad_NR.to(ctx->saved_data["dtype"].toScalarType()), {}, {}, {}, {}, {}};
  }
};

}  // namespace

torch::Tensor relative_tile(const torch::Tensor& rel_NR, int64_t S, int64_t q0, int64_t q1,
                            int64_t k0, int64_t k1) {
  return RelativeTile::apply(rel_NR, S, q0, q1, k0, k1);
}

void relative_tile_grad(torch::Tensor& grad_NR, const torch::Tensor& ds_NTS, int64_t S, int64_t q0,
                        int64_t k0) {
  // grad[n, c + t - s] += ds[n, t, s]: sums along the tile's diagonals, into the band of
  // tq + tk - 1 distances that starts at c - (tk - 1), c = q0 - k0 + S - 1 (t = s = 0).
  const int64_t N = ds_NTS.size(0), tq = ds_NTS.size(1), tk = ds_NTS.size(2), W = tq + tk - 1;
  auto band = grad_NR.narrow(1, q0 - k0 + S - 1 - (tk - 1), W);
  if (ds_NTS.is_cpu() && grad_NR.is_contiguous() && grad_NR.scalar_type() == torch::kFloat32) {
    auto ds = ds_NTS.to(torch::kFloat32).contiguous();
    const float* x = ds.data_ptr<float>();
    float* g = band.data_ptr<float>();
    const int64_t R = grad_NR.size(1);
    at::parallel_for(0, N, 1, [&](int64_t n0, int64_t n1) {
      for (int64_t n = n0; n < n1; ++n) vec::add_diagonal_sums(x + n * tq * tk, tq, tk, g + n * R);
    });
    return;
  }
  // Elsewhere: row t of ds written into row t of a zero [N, tq, W] canvas at column
  // tq - 1 - t + s (a strided view, row stride W - 1), so that column u' holds the diagonal
  // t - s = tq - 1 - u'; the canvas's column sums, flipped, are the band.
  auto canvas = torch::zeros({N, tq, W}, ds_NTS.options());
  canvas.as_strided({N, tq, tk}, {tq * W, W - 1, 1}, tq - 1).copy_(ds_NTS);
  band.add_(canvas.sum(1).flip(-1).to(band.scalar_type()));
}

torch::Tensor ScoreBias::tile(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
  auto rest = non_relative_tile(q0, q1, k0, k1);
  if (!rel_NR.defined()) return rest;
  auto rel = relative_tile(rel_NR, S, q0, q1, k0, k1).unsqueeze(0);
  return rest.defined() ? rel + rest : rel;
}

torch::Tensor ScoreBias::non_relative_tile(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
  const int64_t tq = q1 - q0, tk = k1 - k0;
  torch::Tensor out;
  auto add = [&out](const torch::Tensor& x) { out = out.defined() ? out + x : x; };
  if (row_BNT.defined())
    add(row_BNT.narrow(2, q0, tq).unsqueeze(-1) + col_BNS.narrow(2, k0, tk).unsqueeze(-2));
  if (fn) add(fn(q0, q1, k0, k1));
  if (dense.defined()) add(dense.narrow(-2, q0, tq).narrow(-1, k0, tk));
  return out;
}

void ScoreBias::add_tile_to(torch::Tensor& s, int64_t q0, int64_t q1, int64_t k0, int64_t k1,
                            bool fused) const {
  torch::NoGradGuard no_grad;
  const int64_t tq = q1 - q0, tk = k1 - k0;
  if (rel_NR.defined()) {
    if (fused && s.is_cpu() && s.is_contiguous() && rel_NR.is_contiguous() &&
        rel_NR.scalar_type() == torch::kFloat32) {
      // Row (b, n, t) gets rel[n, c + t - s] for s = 0..tk-1: read backwards from c + t.
      const int64_t N = rel_NR.size(0), R = rel_NR.size(1), c = q0 - k0 + S - 1;
      const float* rel = rel_NR.data_ptr<float>();
      float* out = s.data_ptr<float>();
      at::parallel_for(0, s.size(0) * N * tq, 16, [&](int64_t r0, int64_t r1) {
        for (int64_t r = r0; r < r1; ++r)
          vec::add_reversed(out + r * tk, rel + ((r / tq) % N) * R + c + r % tq, tk);
      });
    } else {
      s.add_(relative_tile(rel_NR, S, q0, q1, k0, k1).unsqueeze(0).to(s.scalar_type()));
    }
  }
  auto rest = non_relative_tile(q0, q1, k0, k1);
  if (rest.defined()) s.add_(rest.to(s.scalar_type()));
}

torch::Tensor ScoreBias::whole() const {
  if (!whole_->defined()) *whole_ = tile(0, T, 0, S);
  return *whole_;
}

ScoreBias ScoreBias::plus(const ScoreBias& other) const {
  if (!other.defined()) return *this;
  if (!defined()) return other;
  TORCH_CHECK(T == other.T && S == other.S, "ScoreBias::plus: biases of different passes");
  ScoreBias sum = *this;
  sum.whole_ = std::make_shared<torch::Tensor>();
  auto both = [](const torch::Tensor& a, const torch::Tensor& b) {
    return !a.defined() ? b : !b.defined() ? a : a + b;
  };
  sum.rel_NR = both(rel_NR, other.rel_NR);
  sum.row_BNT = both(row_BNT, other.row_BNT);
  sum.col_BNS = both(col_BNS, other.col_BNS);
  sum.dense = both(dense, other.dense);
  if (other.fn) {
    if (fn) {
      sum.fn = [a = fn, b = other.fn](int64_t q0, int64_t q1, int64_t k0, int64_t k1) {
        return a(q0, q1, k0, k1) + b(q0, q1, k0, k1);
      };
    } else {
      sum.fn = other.fn;
    }
    sum.params.insert(sum.params.end(), other.params.begin(), other.params.end());
  }
  return sum;
}

ScoreBias relative_bias(int64_t T, int64_t S, int64_t q_offset, int64_t k_offset, torch::Device dev,
                        const RelativeFn& rel_of) {
  ScoreBias b;
  b.T = T;
  b.S = S;
  const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(dev);
  // Contiguous once here: each tile reads it as a strided view.
  b.rel_NR =
      rel_of(torch::arange(T + S - 1, opts).add_(q_offset - k_offset - (S - 1))).contiguous();
  return b;
}

}  // namespace ropelab::model
