#include "tasks/rank.h"

#include <torch/nn/functional.h>

#include <cmath>

#include "corpora/builtin.h"
#include "util/error.h"

namespace ropelab::tasks {

namespace F = torch::nn::functional;

RankTask::RankTask(const TaskSetup& s) : s_(s) {}

model::Model RankTask::build_model() const {
  model::Transformer backbone(s_.model, s_.vocab);  // constructed in this order: backbone, head
  auto head = std::make_shared<model::ClassificationHeadImpl>(s_.model, 1);
  return model::Model(backbone, head, s_.model.init_std);
}

std::unique_ptr<data::BatchStream> RankTask::stream(const data::TokenDataset& ds, bool train,
                                                    int64_t seq_len, int64_t batch_size) const {
  if (!ds.glue().ranking())
    throw UserError(ds.split +
                    " split holds no ranking triplets (a, b, c); run `ropelab prepare` "
                    "again with a ranking layout");
  return data::make_glue_stream(ds, stream_options(s_, train, seq_len, batch_size));
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
  f.sums = StepSums(logits_B2.device());
  f.sums.set(Sum::kNll, f.loss_sum)
      .set(Sum::kCorrect, (logits_B2.argmax(-1) == label_B).sum())
      .set(Sum::kTargets, static_cast<double>(label_B.size(0)));
  return f;
}

Forward RankTask::forward(model::ModelImpl& m, const data::Batch& b) const {
  auto f = score(logits(m, b), b.label_B);
  f.sums.set(Sum::kTokens, static_cast<double>(b.num_tokens));
  return f;
}

Metrics RankTask::metrics(const HostSums& s) const {
  double n = s.targets;
  return {{"loss", n > 0 ? s.nll / n : 0.0}, {"acc", n > 0 ? s.correct / n : 0.0}};
}

EvalBatch RankTask::eval_batch(model::ModelImpl& m, const data::Batch& b, bool labeled) const {
  auto l_B2 = logits(m, b);
  EvalBatch e;
  e.sums = labeled ? score(l_B2, b.label_B).sums : StepSums(l_B2.device());
  e.sums.set(Sum::kTokens, static_cast<double>(b.num_tokens));
  e.prediction_B = l_B2.argmax(-1);
  return e;
}

EvalResult RankTask::evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                              const data::BatchStream& s, const EvalOptions& o) const {
  EvalOptions whole = o;
  whole.max_batches = 0;  // accuracy over the whole split
  auto pass = evaluate_split(*this, m, ds, s, whole);
  EvalResult r;
  r.tokens = pass.sums.tokens;
  if (pass.labeled && !ds.labels().empty()) r.metrics = metrics(pass.sums);
  if (o.full) {
    r.predictions_file = s_.glue.leaderboard_file;
    for (double p : pass.predictions)  // (a stopped evaluation leaves some unseen; not written)
      r.predictions.push_back(s_.glue.label_names.at(std::isnan(p) ? 0 : static_cast<size_t>(p)));
  }
  return r;
}

}  // namespace ropelab::tasks
