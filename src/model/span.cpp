// The span rule (model/span.h).
#include "model/span.h"

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <vector>

#include "config/schema.h"

namespace ropelab::model {

namespace {
constexpr int64_t kFar = std::numeric_limits<int64_t>::max() / 4;  // no bound
}  // namespace

Span Span::of(const config::LayerKindConfig& kind, bool causal) {
  return Span{causal, kind.window.has ? kind.window.value : 0,
              kind.chunk.has ? kind.chunk.value : 0};
}

KeyInterval Span::keys(int64_t p) const {
  KeyInterval r{-kFar, kFar};
  if (causal) r.hi = p + 1;
  if (window > 0) {
    r.lo = p - window + 1;
    if (!causal) r.hi = p + window;
  }
  if (chunk > 0) {
    const int64_t start = p / chunk * chunk;
    r.lo = std::max(r.lo, start);
    r.hi = std::min(r.hi, start + chunk);
  }
  return r;
}

Span::Block Span::block(int64_t p_first, int64_t p_last, int64_t k_first, int64_t k_last) const {
  const KeyInterval any = keys(p_first, p_last);
  if (k_last < any.lo || k_first >= any.hi) return Block::kEmpty;
  // The last query sees the fewest early keys, the first the fewest late ones.
  if (keys(p_last).lo <= k_first && keys(p_first).hi > k_last) return Block::kFull;
  return Block::kPartial;
}

int64_t Span::first_key(int64_t p) const { return std::max<int64_t>(0, keys(p).lo); }

torch::Tensor Span::allowed_TS(int64_t q_first, int64_t T, int64_t k_first, int64_t S,
                               torch::Device dev) const {
  if (block(q_first, q_first + T - 1, k_first, k_first + S - 1) == Block::kFull) return {};
  std::vector<int64_t> lo(static_cast<size_t>(T)), hi(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const KeyInterval r = keys(q_first + t);
    lo[static_cast<size_t>(t)] = r.lo;
    hi[static_cast<size_t>(t)] = r.hi;
  }
  const auto opts = torch::TensorOptions().dtype(torch::kInt64);
  auto lo_T1 = torch::tensor(lo, opts).view({T, 1}).to(dev);
  auto hi_T1 = torch::tensor(hi, opts).view({T, 1}).to(dev);
  auto k_1S = torch::arange(k_first, k_first + S, opts.device(dev)).view({1, S});
  return (k_1S >= lo_T1) & (k_1S < hi_T1);
}

torch::Tensor Span::visible_T(int64_t q_first, int64_t T, int64_t k_first, int64_t S) const {
  std::vector<int64_t> n(static_cast<size_t>(T));
  for (int64_t t = 0; t < T; ++t) {
    const KeyInterval r = keys(q_first + t);
    n[static_cast<size_t>(t)] =
        std::max<int64_t>(0, std::min(r.hi, k_first + S) - std::max(r.lo, k_first));
  }
  return torch::tensor(n, torch::TensorOptions().dtype(torch::kInt64));
}

torch::Tensor restrict_to_tokens(torch::Tensor allowed, const torch::Tensor& key_pad_BS,
                                 const torch::Tensor& doc_q_BT, const torch::Tensor& doc_k_BS) {
  auto both = [&allowed](const torch::Tensor& x) { allowed = allowed.defined() ? allowed & x : x; };
  if (allowed.defined() && allowed.dim() == 2) allowed = allowed.unsqueeze(0).unsqueeze(0);
  if (key_pad_BS.defined()) both(key_pad_BS.view({key_pad_BS.size(0), 1, 1, key_pad_BS.size(1)}));
  if (doc_q_BT.defined()) both(doc_q_BT.unsqueeze(2).eq(doc_k_BS.unsqueeze(1)).unsqueeze(1));
  return allowed;
}

}  // namespace ropelab::model
