#include "tasks/translation.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "dist/world.h"
#include "scoring/bleu.h"
#include "tasks/loss.h"
#include "util/device.h"
#include "util/signals.h"

namespace ropelab::tasks {

using tokenizers::Special;

TranslationTask::TranslationTask(const TaskSetup& s, const config::TranslationTaskConfig& t)
    : s_(s), t_(t) {}

model::Model TranslationTask::build_model() const {
  model::Transformer backbone(s_.model, s_.vocab,
                              s_.source_vocab);  // constructed in this order: backbone, head
  auto head = std::make_shared<model::LmHeadImpl>(s_.model, s_.vocab);
  return model::Model(backbone, head, s_.model.init_std);
}

std::unique_ptr<data::BatchStream> TranslationTask::stream(const data::TokenDataset& ds, bool train,
                                                           int64_t seq_len,
                                                           int64_t batch_size) const {
  auto o = stream_options(s_, train, seq_len, batch_size);
  o.max_tokens = t_.max_tokens;
  return data::make_translation_stream(ds, o);
}

Forward TranslationTask::forward(model::ModelImpl& m, const data::Batch& b) const {
  auto memory = m.backbone->encode(b.src_BS, b.src_pad_BS);
  auto h_BTD = m.backbone->decode(b.input_BT, memory, b.src_pad_BS);
  // fairseq's label smoothing: eps_i = eps / (V - 1), a = 1 - eps - eps_i, b = eps_i.
  const int64_t V = s_.vocab;
  double eps = s_.task.label_smoothing;
  double eps_i = eps > 0 ? eps / static_cast<double>(V - 1) : 0.0;
  auto ce = head_cross_entropy(m, h_BTD, b.target_BT, 1.0 - eps - eps_i, eps_i);
  return token_forward(ce, h_BTD.device(), b.num_tokens);
}

Metrics TranslationTask::metrics(const HostSums& s) const { return token_metrics(s); }

Selection TranslationTask::selection() const {
  if (t_.best_by == config::BestBy::kBleu && t_.valid_bleu_sentences > 0 && s_.tokenizer != nullptr)
    return {"bleu", true};
  return {};
}

model::DecodeOptions TranslationTask::decode_options(int64_t beam) const {
  model::DecodeOptions d;
  d.beam = beam;
  d.lenpen = t_.lenpen;
  d.max_len_a = t_.max_len_a;
  d.max_len_b = t_.max_len_b;
  return d;
}

EvalResult TranslationTask::evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                                     const data::BatchStream& s, const EvalOptions& o) const {
  EvalResult r = Task::evaluate(m, ds, s, o);
  const auto& src = ds.parallel().src;
  const auto& tgt = ds.parallel().tgt;
  int64_t n = o.full ? src.size() : std::min(src.size(), t_.valid_bleu_sentences);
  if (s_.tokenizer == nullptr || n == 0) return r;
  // Each rank decodes every world-th sentence; the hypotheses are gathered for the scores.
  const auto& w = dist::world();
  std::vector<std::vector<int32_t>> sources;
  std::vector<std::string> refs;
  for (int64_t i = 0; i < n; ++i) {
    if (i % w.size() == w.rank()) sources.emplace_back(src.begin(i), src.begin(i) + src.length(i));
    refs.push_back(s_.tokenizer->decode({tgt.begin(i), tgt.begin(i) + tgt.length(i)}));
  }
  bool was_training = m.is_training();
  m.eval();
  int64_t budget = std::max<int64_t>(t_.max_tokens, s_.batch_size * s_.task.seq_len);
  auto ids = translate_ids(m, sources, decode_options(o.full ? t_.beam : 1), budget,
                           s_.task.seq_len, o.device, o.bf16, nullptr);
  if (was_training) m.train();
  std::vector<std::string> hyps;
  hyps.reserve(ids.size());
  for (const auto& h : ids) hyps.push_back(s_.tokenizer->decode({h.begin(), h.end()}));
  if (w.distributed()) {
    // Length-prefixed hypotheses; rank r's k-th is sentence k * world + r.
    std::string mine;
    for (const auto& h : hyps) {
      auto len = static_cast<uint64_t>(h.size());
      mine.append(reinterpret_cast<const char*>(&len), sizeof len).append(h);
    }
    auto all = w.gather(mine, "gathering the translations");
    hyps.assign(static_cast<size_t>(n), "");
    for (int rk = 0; rk < w.size(); ++rk) {
      const std::string& b = all[static_cast<size_t>(rk)];
      int64_t i = rk;
      for (size_t p = 0; p + sizeof(uint64_t) <= b.size(); i += w.size()) {
        uint64_t len = 0;
        std::memcpy(&len, b.data() + p, sizeof len);
        hyps[static_cast<size_t>(i)] = b.substr(p + sizeof len, len);
        p += sizeof len + len;
      }
    }
  }
  r.metrics["bleu"] = scoring::corpus_bleu(hyps, {refs}).score;
  r.metrics["chrf"] = scoring::corpus_chrf(hyps, {refs});
  if (o.full) {  // a final evaluation: `eval` keeps the translations for paired tests
    r.predictions = std::move(hyps);
    r.references = std::move(refs);
    r.predictions_file = "translations.txt";
  }
  return r;
}

std::vector<std::vector<int64_t>> translate_ids(model::ModelImpl& m,
                                                const std::vector<std::vector<int32_t>>& sources,
                                                const model::DecodeOptions& d, int64_t batch_tokens,
                                                int64_t max_source, torch::Device dev, bool bf16,
                                                Progress* bar) {
  torch::NoGradGuard ng;
  auto len = [&](size_t i) {
    return std::max<int64_t>(
        1, std::min<int64_t>(static_cast<int64_t>(sources[i].size()), max_source));
  };
  std::vector<size_t> order(sources.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return len(a) < len(b); });
  std::vector<std::vector<int64_t>> out(sources.size());
  int64_t done = 0;
  for (size_t start = 0; start < order.size() && !signals::stop_requested();) {
    // The longest source of a run of sorted sentences sets its padded size. Beams multiply
    // the rows, so the budget is divided by the beam.
    size_t end = start + 1;
    int64_t rows_budget = std::max<int64_t>(1, batch_tokens / std::max<int64_t>(1, d.beam));
    while (end < order.size() &&
           len(order[end]) * static_cast<int64_t>(end - start + 1) <= rows_budget)
      ++end;
    int64_t B = static_cast<int64_t>(end - start), S = len(order[end - 1]);
    auto src = torch::full({B, S}, Special::kPad, torch::kInt64);
    auto acc = src.accessor<int64_t, 2>();
    for (int64_t b = 0; b < B; ++b) {
      const auto& x = sources[order[start + static_cast<size_t>(b)]];
      for (int64_t t = 0; t < std::min<int64_t>(static_cast<int64_t>(x.size()), S); ++t)
        acc[b][t] = x[t];
      if (x.empty()) acc[b][0] = Special::kEos;  // an empty line still gets one real token
    }
    auto pad = src != Special::kPad;
    src = src.to(dev);
    pad = pad.to(dev);
    std::vector<std::vector<int64_t>> hyps;
    {
      device::Autocast ac(dev, bf16);
      hyps = model::generate(m, src, pad, d);
    }
    for (int64_t b = 0; b < B; ++b) out[order[start + static_cast<size_t>(b)]] = std::move(hyps[b]);
    done += B;
    if (bar != nullptr) bar->update(done);
    start = end;
  }
  return out;
}

}  // namespace ropelab::tasks
