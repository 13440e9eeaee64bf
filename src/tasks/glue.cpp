#include "tasks/glue.h"

#include <spdlog/fmt/fmt.h>
#include <torch/nn/functional.h>

#include "corpora/builtin.h"
#include "tasks/glue_metrics.h"
#include "util/error.h"

namespace ropelab::tasks {

namespace F = torch::nn::functional;

namespace {
// The head's outputs [B, C] in fp32.
torch::Tensor outputs(model::ModelImpl& m, const data::Batch& b) {
  return m.logits(m.backbone->encode(b.input_BT, b.pad_BT, b.segment_BT)).to(torch::kFloat32);
}
}  // namespace

std::string leaderboard_file(const corpora::GlueTask& task, const std::string& split) {
  bool mismatched = split.find("mismatched") != std::string::npos;
  return mismatched && !task.leaderboard_file_mismatched.empty() ? task.leaderboard_file_mismatched
                                                                 : task.leaderboard_file;
}

GlueTask::GlueTask(const TaskSetup& s) : s_(s) {}

model::Model GlueTask::build_model() const {
  model::Transformer backbone(s_.model, s_.vocab);  // constructed in this order: backbone, head
  int64_t outputs = s_.glue.regression ? 1 : static_cast<int64_t>(s_.glue.label_names.size());
  auto head = std::make_shared<model::ClassificationHeadImpl>(s_.model, outputs);
  return model::Model(backbone, head, s_.model.init_std);
}

std::unique_ptr<data::BatchStream> GlueTask::stream(const data::TokenDataset& ds, bool train,
                                                    int64_t seq_len, int64_t batch_size) const {
  return data::make_glue_stream(ds, stream_options(s_, train, seq_len, batch_size));
}

Forward GlueTask::forward(model::ModelImpl& m, const data::Batch& b) const {
  auto f = score(outputs(m, b), b.label_B);
  f.sums.set(Sum::kTokens, static_cast<double>(b.num_tokens));
  return f;
}

Forward GlueTask::score(const torch::Tensor& out_BC, const torch::Tensor& label_B) const {
  Forward f;
  f.sums = StepSums(out_BC.device());
  const auto& b = label_B;
  if (s_.glue.regression) {
    auto err = out_BC.squeeze(-1) - b.to(torch::kFloat32);
    f.loss_sum = (err * err).sum();
    f.sums.set(Sum::kNll, f.loss_sum);
  } else {
    auto opts = F::CrossEntropyFuncOptions().reduction(torch::kSum);
    f.loss_sum = F::cross_entropy(out_BC, b, opts.label_smoothing(s_.task.label_smoothing));
    torch::NoGradGuard ng;
    f.sums.set(Sum::kNll, s_.task.label_smoothing > 0
                              ? F::cross_entropy(out_BC, b, opts.label_smoothing(0.0))
                              : f.loss_sum);
    f.sums.set(Sum::kCorrect, (out_BC.argmax(-1) == b).sum());
  }
  f.sums.set(Sum::kTargets, static_cast<double>(b.size(0)));
  return f;
}

Metrics GlueTask::metrics(const HostSums& s) const {
  double n = s.targets;
  Metrics m = {{"loss", n > 0 ? s.nll / n : 0.0}};
  if (!s_.glue.regression) m["acc"] = n > 0 ? s.correct / n : 0.0;
  return m;
}

Selection GlueTask::selection() const { return {glue_main_metric(s_.glue), true}; }

EvalBatch GlueTask::eval_batch(model::ModelImpl& m, const data::Batch& b, bool labeled) const {
  auto out_BC = outputs(m, b);
  EvalBatch e;
  if (labeled)
    e.sums = score(out_BC, b.label_B).sums;
  else
    e.sums = StepSums(out_BC.device());
  e.sums.set(Sum::kTokens, static_cast<double>(b.num_tokens));
  e.prediction_B = s_.glue.regression ? out_BC.select(1, 0) : out_BC.argmax(-1);
  return e;
}

EvalResult GlueTask::evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                              const data::BatchStream& s, const EvalOptions& o) const {
  EvalOptions whole = o;
  whole.max_batches = 0;  // always the whole split (see glue.h)
  auto pass = evaluate_split(*this, m, ds, s, whole);
  const auto& labels = ds.labels();
  const size_t n_ex = labels.size();
  std::vector<int64_t> pred(n_ex, -1), gold(n_ex, -1);
  std::vector<double> pred_score(n_ex, 0.0), gold_score(n_ex, 0.0);
  for (size_t e = 0; e < n_ex; ++e) {
    double p = pass.predictions[e];
    if (s_.glue.regression)
      pred_score[e] = std::isnan(p) ? 0.0 : p;
    else
      pred[e] = std::isnan(p) ? -1 : static_cast<int64_t>(p);
    gold[e] = static_cast<int64_t>(labels[e]);
    gold_score[e] = labels[e];
  }
  EvalResult r;
  r.tokens = pass.sums.tokens;
  if (pass.labeled && n_ex > 0) {
    r.metrics = metrics(pass.sums);
    for (const auto& [k, v] : glue_metrics(s_.glue, pred, gold, pred_score, gold_score))
      r.metrics[k] = v;
  }
  if (o.full) {
    r.predictions_file = leaderboard_file(s_.glue, ds.split);
    r.predictions.reserve(n_ex);
    for (size_t e = 0; e < n_ex; ++e)
      r.predictions.push_back(s_.glue.regression ? fmt::format("{:.3f}", pred_score[e])
                                                 : s_.glue.label_names.at(static_cast<size_t>(
                                                       std::max<int64_t>(pred[e], 0))));
  }
  return r;
}

}  // namespace ropelab::tasks
