#include "tasks/rank.h"

#include <torch/nn/functional.h>

#include "dist/world.h"
#include "text/builtin.h"
#include "util/device.h"
#include "util/error.h"
#include "util/signals.h"

namespace ropelab::tasks {

namespace F = torch::nn::functional;

RankTask::RankTask(const config::Config& c, int64_t vocab)
    : c_(c), vocab_(vocab), layout_(text::glue_task_of(c.data)) {}

model::Model RankTask::build_model() const {
  model::Transformer backbone(c_.model, vocab_);  // constructed in this order: backbone, head
  auto head = std::make_shared<model::ClassificationHeadImpl>(c_.model, 1);
  return model::Model(backbone, head, c_.model.init_std);
}

std::unique_ptr<data::BatchStream> RankTask::stream(const data::TokenDataset& ds, bool train,
                                                    int64_t seq_len, int64_t batch_size) const {
  if (ds.seqs.count("c") == 0)
    throw UserError(ds.split +
                    " split holds no ranking triplets (a, b, c); run `ropelab prepare` "
                    "again with a ranking layout");
  return data::make_glue_stream(ds, stream_options(c_, train, seq_len, batch_size));
}

torch::Tensor RankTask::logits(model::ModelImpl& m, const data::Batch& b) {
  auto s_R = m.logits(m.backbone->encode(b.input_BT, b.pad_BT, b.segment_BT)).to(torch::kFloat32);
  return s_R.view({-1, 2});  // rows 2i and 2i+1: (A, B) and (A, C) of example i
}

Forward RankTask::score(const torch::Tensor& logits_B2, const torch::Tensor& label_B) {
  Forward f;
  f.loss_sum =
      F::cross_entropy(logits_B2, label_B, F::CrossEntropyFuncOptions().reduction(torch::kSum));
  torch::NoGradGuard ng;
  f.sums.v = {
      {"nll", f.loss_sum.item<double>()},
      {"correct", static_cast<double>((logits_B2.argmax(-1) == label_B).sum().item<int64_t>())},
      {"targets", static_cast<double>(label_B.size(0))}};
  return f;
}

Forward RankTask::forward(model::ModelImpl& m, const data::Batch& b) const {
  auto f = score(logits(m, b), b.label_B);
  f.sums.v["tokens"] = static_cast<double>(b.num_tokens);
  return f;
}

Metrics RankTask::metrics(const Sums& s) const {
  double n = s("targets");
  return {{"loss", n > 0 ? s("nll") / n : 0.0}, {"acc", n > 0 ? s("correct") / n : 0.0}};
}

EvalResult RankTask::evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                              const data::BatchStream& s, const EvalOptions& o) const {
  bool labeled = !ds.labels.empty();
  for (float l : ds.labels) labeled = labeled && l >= 0;
  bool was_training = m.is_training();
  m.eval();
  torch::NoGradGuard ng;
  std::vector<int64_t> pred(ds.labels.size(), -1);  // -1: not seen (yet)
  Sums total;
  for (int64_t i = 0; i < s.batches_per_epoch() && !signals::stop_requested(); ++i) {
    auto b = s.batch(0, i);
    auto bd = b.to(o.device);
    torch::Tensor l_B2;
    {
      device::Autocast ac(o.device, o.bf16);
      l_B2 = logits(m, bd);
    }
    if (labeled) total.add(score(l_B2, bd.label_B).sums);
    total.v["tokens"] += static_cast<double>(b.num_tokens);
    auto p = l_B2.argmax(-1).cpu();
    auto idx = b.index_B.accessor<int64_t, 1>();
    for (int64_t r = 0; r < p.size(0); ++r)
      pred[static_cast<size_t>(idx[r])] = p[r].item<int64_t>();
  }
  if (was_training) m.train();
  total = over_ranks(total, "summing the evaluation");
  if (dist::world().distributed()) {  // each rank saw every world-th example
    std::vector<double> v(pred.begin(), pred.end());
    for (double& x : v) x += 1;  // 0: not seen by this rank
    v = dist::world().sum(std::move(v), "gathering the predictions");
    for (size_t e = 0; e < pred.size(); ++e) pred[e] = static_cast<int64_t>(v[e]) - 1;
  }
  EvalResult r;
  r.tokens = total("tokens");
  if (labeled) r.metrics = metrics(total);
  if (o.full) {
    r.predictions_file = layout_.name + ".tsv";
    for (int64_t p : pred)  // (an evaluation stopped by a signal leaves some unseen; not written)
      r.predictions.push_back(layout_.label_names.at(static_cast<size_t>(std::max<int64_t>(p, 0))));
  }
  return r;
}

}  // namespace ropelab::tasks
