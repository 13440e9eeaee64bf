#include "model/score_bias.h"

#include <utility>

namespace ropelab::model {

ScoreBias::ScoreBias(torch::Tensor dense_bias) : dense(std::move(dense_bias)) {
  if (dense.defined()) {
    T = dense.size(-2);
    S = dense.size(-1);
  }
}

torch::Tensor ScoreBias::tile(int64_t q0, int64_t q1, int64_t k0, int64_t k1) const {
  const int64_t tq = q1 - q0, tk = k1 - k0;
  torch::Tensor out;
  auto add = [&out](const torch::Tensor& x) { out = out.defined() ? out + x : x; };
  if (rel_NR.defined()) {
    const auto opts = torch::TensorOptions().dtype(torch::kInt64).device(rel_NR.device());
    auto idx =
        (torch::arange(q0, q1, opts).view({tq, 1}) - torch::arange(k0, k1, opts).view({1, tk}))
            .add_(S - 1);
    add(rel_NR.index_select(1, idx.flatten()).view({1, -1, tq, tk}));
  }
  if (row_BNT.defined())
    add(row_BNT.narrow(2, q0, tq).unsqueeze(-1) + col_BNS.narrow(2, k0, tk).unsqueeze(-2));
  if (fn) add(fn(q0, q1, k0, k1));
  if (dense.defined()) add(dense.narrow(-2, q0, tq).narrow(-1, k0, tk));
  return out;
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
  b.rel_NR = rel_of(torch::arange(T + S - 1, opts).add_(q_offset - k_offset - (S - 1)));
  return b;
}

}  // namespace ropelab::model
