// An additive [1 or B, 1 or N, T, S] score bias or mask (Vaswani et al. 2017, Eq. 1: the terms
// added to q k^T before the softmax) seen as [B, N, T, S] float32 rows, for the row kernels of
// util/vec_bf16.h and util/vec_kernels.h (model/attention.cpp, model/bf16_attention.cpp).
#pragma once
#include <torch/torch.h>

#include <cstdint>

namespace ropelab::model {

struct BiasRows {
  torch::Tensor t;  // keeps the (contiguous-rows) storage alive
  const float* base = nullptr;
  int64_t sb = 0, sn = 0, st = 0;
  // An empty bias (numel 0) or an undefined one stands for none: row() then gives `zeros`.
  BiasRows(const torch::Tensor& bias, int64_t B, int64_t N, int64_t T, int64_t S) {
    if (!bias.defined() || bias.numel() == 0) return;
    t = bias.to(torch::kFloat32);
    if (t.stride(-1) != 1) t = t.contiguous();
    auto e = t.expand({B, N, T, S});
    base = e.data_ptr<float>();
    sb = e.stride(0), sn = e.stride(1), st = e.stride(2);
  }
  // The row of (b, n, i): S floats.
  const float* row(int64_t b, int64_t n, int64_t i, const float* zeros) const {
    return base == nullptr ? zeros : base + b * sb + n * sn + i * st;
  }
};

}  // namespace ropelab::model
