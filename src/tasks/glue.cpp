#include "tasks/glue.h"

#include <spdlog/fmt/fmt.h>
#include <torch/nn/functional.h>

#include "dist/world.h"
#include "tasks/glue_metrics.h"
#include "text/builtin.h"
#include "util/device.h"
#include "util/error.h"
#include "util/signals.h"

namespace ropelab::tasks {

namespace F = torch::nn::functional;

namespace {
// The head's outputs [B, C] in fp32.
torch::Tensor outputs(model::ModelImpl& m, const data::Batch& b) {
  return m.logits(m.backbone->encode(b.input_BT, b.pad_BT, b.segment_BT)).to(torch::kFloat32);
}
}  // namespace

text::GlueTask glue_task_of(const config::DataConfig& d) { return text::glue_task_of(d); }

std::string leaderboard_file(const text::GlueTask& task, const std::string& split) {
  if (task.name == "MNLI")
    return split.find("mismatched") != std::string::npos ? "MNLI-mm.tsv" : "MNLI-m.tsv";
  return task.name + ".tsv";
}

GlueTask::GlueTask(const config::Config& c, int64_t vocab)
    : c_(c), vocab_(vocab), glue_(glue_task_of(c.data)) {}

model::Model GlueTask::build_model() const {
  model::Transformer backbone(c_.model, vocab_);  // constructed in this order: backbone, head
  int64_t outputs = glue_.regression ? 1 : static_cast<int64_t>(glue_.label_names.size());
  auto head = std::make_shared<model::ClassificationHeadImpl>(c_.model, outputs);
  return model::Model(backbone, head, c_.model.init_std);
}

std::unique_ptr<data::BatchStream> GlueTask::stream(const data::TokenDataset& ds, bool train,
                                                    int64_t seq_len, int64_t batch_size) const {
  return data::make_glue_stream(ds, stream_options(c_, train, seq_len, batch_size));
}

Forward GlueTask::forward(model::ModelImpl& m, const data::Batch& b) const {
  auto f = score(outputs(m, b), b.label_B);
  f.sums.v["tokens"] = static_cast<double>(b.num_tokens);
  return f;
}

Forward GlueTask::score(const torch::Tensor& out_BC, const torch::Tensor& label_B) const {
  Forward f;
  const auto& b = label_B;
  const double n = static_cast<double>(b.size(0));
  if (glue_.regression) {
    auto err = out_BC.squeeze(-1) - b.to(torch::kFloat32);
    f.loss_sum = (err * err).sum();
    f.sums.v = {{"nll", f.loss_sum.item<double>()}};
  } else {
    auto opts = F::CrossEntropyFuncOptions().reduction(torch::kSum);
    f.loss_sum = F::cross_entropy(out_BC, b, opts.label_smoothing(c_.task.label_smoothing));
    torch::NoGradGuard ng;
    double nll = c_.task.label_smoothing > 0
                     ? F::cross_entropy(out_BC, b, opts.label_smoothing(0.0)).item<double>()
                     : f.loss_sum.item<double>();
    f.sums.v = {{"nll", nll},
                {"correct", static_cast<double>((out_BC.argmax(-1) == b).sum().item<int64_t>())}};
  }
  f.sums.v["targets"] = n;
  return f;
}

Metrics GlueTask::metrics(const Sums& s) const {
  double n = s("targets");
  Metrics m = {{"loss", n > 0 ? s("nll") / n : 0.0}};
  if (!glue_.regression) m["acc"] = n > 0 ? s("correct") / n : 0.0;
  return m;
}

Selection GlueTask::selection() const { return {glue_main_metric(glue_), true}; }

EvalResult GlueTask::evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                              const data::BatchStream& s, const EvalOptions& o) const {
  bool labeled = !ds.labels.empty();
  for (float l : ds.labels) labeled = labeled && l >= 0;
  bool was_training = m.is_training();
  m.eval();
  torch::NoGradGuard ng;
  const size_t n_ex = ds.labels.size();
  std::vector<int64_t> pred(n_ex, -1), gold(n_ex, -1);
  std::vector<double> pred_score(n_ex, 0.0), gold_score(n_ex, 0.0);
  Sums total;
  for (int64_t i = 0; i < s.batches_per_epoch() && !signals::stop_requested(); ++i) {
    auto b = s.batch(0, i);
    auto idx = b.index_B.accessor<int64_t, 1>();
    auto bd = b.to(o.device);
    torch::Tensor out_BC;
    {
      device::Autocast ac(o.device, o.bf16);
      out_BC = outputs(m, bd);
    }
    if (labeled) total.add(score(out_BC, bd.label_B).sums);
    total.v["tokens"] += static_cast<double>(b.num_tokens);
    out_BC = out_BC.cpu();
    for (int64_t r = 0; r < out_BC.size(0); ++r) {
      auto e = static_cast<size_t>(idx[r]);
      if (glue_.regression)
        pred_score[e] = out_BC[r][0].item<double>();
      else
        pred[e] = out_BC[r].argmax().item<int64_t>();
      gold[e] = static_cast<int64_t>(ds.labels[e]);
      gold_score[e] = ds.labels[e];
    }
  }
  if (was_training) m.train();
  total = over_ranks(total, "summing the evaluation");
  if (dist::world().distributed()) {
    // Each rank saw every world-th example: the sum of (pred + 1, or 0 if unseen) and of the
    // scores is every example's prediction.
    std::vector<double> v(2 * n_ex);
    for (size_t e = 0; e < n_ex; ++e)
      v[e] = static_cast<double>(pred[e] + 1), v[n_ex + e] = pred_score[e];
    v = dist::world().sum(std::move(v), "gathering the predictions");
    for (size_t e = 0; e < n_ex; ++e) {
      pred[e] = static_cast<int64_t>(v[e]) - 1, pred_score[e] = v[n_ex + e];
      gold[e] = static_cast<int64_t>(ds.labels[e]), gold_score[e] = ds.labels[e];
    }
  }
  EvalResult r;
  r.tokens = total("tokens");
  if (labeled) {
    r.metrics = metrics(total);
    for (const auto& [k, v] : glue_metrics(glue_, pred, gold, pred_score, gold_score))
      r.metrics[k] = v;
  }
  if (o.full) {
    r.predictions_file = leaderboard_file(glue_, ds.split);
    r.predictions.reserve(n_ex);
    for (size_t e = 0; e < n_ex; ++e)
      r.predictions.push_back(glue_.regression
                                  ? fmt::format("{:.3f}", pred_score[e])
                                  : glue_.label_names.at(static_cast<size_t>(pred[e])));
  }
  return r;
}

}  // namespace ropelab::tasks
