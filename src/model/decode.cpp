#include "model/decode.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tokenizers/tokenizer.h"

namespace ropelab::model {

namespace {

using tokenizers::Special;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Log-probabilities of the next token for every row, fp32 [R, V]. `seq_RT` holds every row's
// tokens so far (BOS first); with a cache only the last one is fed.
torch::Tensor next_logprobs(ModelImpl& m, const torch::Tensor& seq_RT, const torch::Tensor& mem,
                            const torch::Tensor& mem_pad, DecodeState* state) {
  auto in = state != nullptr ? seq_RT.narrow(1, seq_RT.size(1) - 1, 1) : seq_RT;
  auto h = m.backbone->decode(in, mem, mem_pad, state);
  auto logits = m.logits(h.select(1, h.size(1) - 1)).to(torch::kFloat32);
  auto lp = torch::log_softmax(logits, -1);
  lp.select(1, Special::kPad).fill_(kNegInf);
  lp.select(1, Special::kBos).fill_(kNegInf);
  return lp;
}

std::vector<int64_t> max_lengths(const torch::Tensor& src_pad_BS, const DecodeOptions& o) {
  auto n = src_pad_BS.sum(1).to(torch::kCPU);
  std::vector<int64_t> out;
  for (int64_t b = 0; b < n.size(0); ++b)
    out.push_back(static_cast<int64_t>(o.max_len_a * static_cast<double>(n[b].item<int64_t>())) +
                  o.max_len_b);
  return out;
}

struct Finished {
  double score;
  std::vector<int64_t> tokens;
};

}  // namespace

std::vector<std::vector<int64_t>> generate(ModelImpl& m, const torch::Tensor& src_BS,
                                           const torch::Tensor& src_pad_BS,
                                           const DecodeOptions& o) {
  torch::NoGradGuard ng;
  const int64_t B = src_BS.size(0), K = std::max<int64_t>(1, o.beam);
  const int64_t R = B * K;
  auto dev = src_BS.device();
  auto max_len = max_lengths(src_pad_BS, o);
  auto memory = m.backbone->encode(src_BS, src_pad_BS);
  auto mem = K > 1 ? memory.repeat_interleave(K, 0) : memory;
  auto mem_pad = K > 1 ? src_pad_BS.repeat_interleave(K, 0) : src_pad_BS;

  DecodeState state;
  DecodeState* st = o.use_cache ? &state : nullptr;
  auto seq =
      torch::full({R, 1}, Special::kBos, torch::TensorOptions().dtype(torch::kInt64).device(dev));
  std::vector<std::vector<int64_t>> hyp(static_cast<size_t>(R));          // active rows' tokens
  std::vector<double> cum(static_cast<size_t>(R), kNegInf);               // their summed log-probs
  for (int64_t b = 0; b < B; ++b) cum[static_cast<size_t>(b * K)] = 0.0;  // one live beam
  std::vector<std::vector<Finished>> fin(static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), false);

  for (int64_t t = 0;; ++t) {
    auto lp = next_logprobs(m, seq, mem, mem_pad, st);
    // At its maximum length a sentence can only end.
    for (int64_t b = 0; b < B; ++b)
      if (!done[b] && t >= max_len[b]) {
        auto rows = lp.narrow(0, b * K, K);
        auto eos = rows.select(1, Special::kEos).clone();
        rows.fill_(kNegInf);
        rows.select(1, Special::kEos).copy_(eos);
      }
    int64_t V = lp.size(1);
    auto cum_t = torch::tensor(cum, torch::kFloat64).to(torch::kFloat32).to(dev).view({R, 1});
    auto scores = (lp + cum_t).view({B, K * V});
    auto [top_v, top_i] = scores.topk(std::min<int64_t>(2 * K, K * V), 1);
    top_v = top_v.to(torch::kCPU).to(torch::kFloat64);
    top_i = top_i.to(torch::kCPU);
    auto tv = top_v.accessor<double, 2>();
    auto ti = top_i.accessor<int64_t, 2>();

    std::vector<int64_t> origin(static_cast<size_t>(R)), next_tok(static_cast<size_t>(R));
    std::vector<double> next_cum(static_cast<size_t>(R), kNegInf);
    std::vector<std::vector<int64_t>> next_hyp(static_cast<size_t>(R));
    for (int64_t b = 0; b < B; ++b) {
      int64_t kept = 0;
      if (!done[b]) {
        for (int64_t j = 0; j < top_v.size(1) && kept < K; ++j) {
          double s = tv[b][j];
          if (!std::isfinite(s)) break;
          int64_t beam = ti[b][j] / V, tok = ti[b][j] % V;
          const auto& prefix = hyp[static_cast<size_t>(b * K + beam)];
          if (tok == Special::kEos) {
            // Only end-of-sentence among the k best candidates finishes a hypothesis.
            if (j < K && static_cast<int64_t>(fin[b].size()) < K) {
              double len = static_cast<double>(prefix.size() + 1);
              fin[b].push_back({s / std::pow(len, o.lenpen), prefix});
            }
            continue;
          }
          size_t r = static_cast<size_t>(b * K + kept);
          origin[r] = b * K + beam;
          next_tok[r] = tok;
          next_cum[r] = s;
          next_hyp[r] = prefix;
          next_hyp[r].push_back(tok);
          ++kept;
        }
        // Early stopping: k finished; or nothing left to extend (at the maximum length).
        if (static_cast<int64_t>(fin[b].size()) >= K || kept == 0 || t >= max_len[b])
          done[b] = true;
      }
      for (int64_t k = kept; k < K; ++k) {  // dead rows: keep feeding something harmless
        size_t r = static_cast<size_t>(b * K + k);
        origin[r] = b * K;
        next_tok[r] = Special::kEos;
      }
    }
    if (std::all_of(done.begin(), done.end(), [](bool d) { return d; })) break;
    auto order = torch::tensor(origin, torch::kInt64).to(dev);
    seq = torch::cat(
        {seq.index_select(0, order), torch::tensor(next_tok, torch::kInt64).to(dev).view({R, 1})},
        1);
    if (st != nullptr) st->reorder(order);
    hyp = std::move(next_hyp);
    cum = std::move(next_cum);
  }
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) {
    auto best =
        std::max_element(fin[b].begin(), fin[b].end(),
                         [](const Finished& x, const Finished& y) { return x.score < y.score; });
    if (best != fin[b].end()) out[b] = best->tokens;
  }
  return out;
}

}  // namespace ropelab::model
