#include "tasks/task.h"

#include <spdlog/fmt/fmt.h>

#include <cmath>

#include "dist/world.h"
#include "tasks/loss.h"
#include "util/device.h"
#include "util/error.h"
#include "util/signals.h"

namespace ropelab::tasks {

dist::ContextGroup context_group(const TaskSetup& s) {
  const auto& w = dist::world();
  const int n = static_cast<int>(s.context_parallel);
  if (w.size() % n != 0)
    throw UserError(fmt::format(
        "train.context_parallel: {} ranks share each sequence, but this run has {} rank{} (not "
        "a multiple of {}); start it with `ropelab launch --nproc {} ...` (or a multiple), or set "
        "train.context_parallel=1",
        n, w.size(), w.size() == 1 ? "" : "s", n, n));
  return dist::ContextGroup::of(w, n);
}

data::StreamOptions stream_options(const TaskSetup& s, bool train, int64_t seq_len,
                                   int64_t batch_size) {
  data::StreamOptions o;
  o.seed = static_cast<uint64_t>(s.seed);
  o.batch_size = batch_size;
  o.seq_len = seq_len;
  o.shuffle = train;
  o.rank = dist::world().rank();
  o.world = dist::world().size();
  if (s.context_parallel > 1) {  // the groups share the data; a group's members, each batch
    const auto g = context_group(s);
    o.rank /= g.size;
    o.world /= g.size;
    o.context_parts = g.size;
    o.context_member = g.member;
  }
  std::visit(
      [&](const auto& t) {
        if constexpr (std::is_same_v<std::decay_t<decltype(t)>, config::ClmTaskConfig> ||
                      std::is_same_v<std::decay_t<decltype(t)>, config::MlmTaskConfig>)
          o.documents = t.packing == config::Packing::kDocuments;
      },
      s.task.opts);
  return o;
}

std::string format_metrics(const Metrics& m) {
  std::string s;
  for (const auto& [k, v] : m) s += fmt::format("{}{} {:.4g}", s.empty() ? "" : " ", k, v);
  return s;
}

Forward token_forward(const CrossEntropy& ce, torch::Device dev, int64_t num_tokens) {
  Forward out;
  out.loss_sum = ce.loss_sum;
  out.sums = StepSums(dev);
  out.sums.set(Sum::kNll, ce.nll_sum)
      .set(Sum::kTargets, ce.targets)
      .set(Sum::kCorrect, ce.correct)
      .set(Sum::kTokens, static_cast<double>(num_tokens));
  return out;
}

CrossEntropy head_cross_entropy(model::ModelImpl& m, const torch::Tensor& h_BTD,
                                const torch::Tensor& target_BT, double a, double b) {
  auto w_VD = m.logits_weight();
  if (w_VD.defined())
    return linear_cross_entropy(h_BTD.reshape({-1, h_BTD.size(-1)}), w_VD, target_BT.reshape({-1}),
                                a, b);
  auto logits = m.logits(h_BTD);
  return cross_entropy(logits.reshape({-1, logits.size(-1)}), target_BT.reshape({-1}), a, b);
}

Metrics token_metrics(const HostSums& s) {
  double n = s.targets;
  double loss = n > 0 ? s.nll / n : 0.0;
  return {{"loss", loss},
          {"ppl", std::exp(std::min(loss, 50.0))},
          {"acc", n > 0 ? s.correct / n : 0.0}};
}

EvalBatch Task::eval_batch(model::ModelImpl& m, const data::Batch& b, bool labeled) const {
  (void)labeled;
  return {forward(m, b).sums, {}};
}

SplitPass evaluate_split(const Task& t, model::ModelImpl& m, const data::TokenDataset& ds,
                         const data::BatchStream& s, const EvalOptions& o) {
  SplitPass pass;
  for (float l : ds.labels()) pass.labeled = pass.labeled && l >= 0;
  bool was_training = m.is_training();
  m.eval();
  torch::NoGradGuard ng;
  StepSums total(o.device);
  std::vector<torch::Tensor> pred, index;  // per batch: device predictions, their CPU rows
  int64_t n = s.batches_per_epoch();
  if (o.max_batches > 0) n = std::min(n, o.max_batches);
  for (int64_t i = 0; i < n && !signals::stop_requested(); ++i) {
    auto b = s.batch(0, i);
    EvalBatch e;
    {
      device::Autocast ac(o.device, o.bf16);
      e = t.eval_batch(m, b.to(o.device), pass.labeled);
    }
    total.add(e.sums);
    if (e.prediction_B.defined()) {
      pred.push_back(e.prediction_B.to(torch::kFloat64));
      index.push_back(b.index_B);
    }
  }
  if (was_training) m.train();
  over_ranks(total, o.device, "summing the evaluation");
  pass.sums = total.read();
  if (pred.empty() && !t.predicts()) return pass;
  // Every example's prediction: each rank adds (value, 1) where it made one, then the ranks sum.
  const size_t n_ex = ds.labels().size();
  std::vector<double> v(2 * n_ex, 0.0);
  if (!pred.empty()) {
    auto p = torch::cat(pred).to(torch::kCPU);
    auto idx = torch::cat(index);
    const double* pp = p.data_ptr<double>();
    const int64_t* ip = idx.data_ptr<int64_t>();
    for (int64_t r = 0; r < p.numel(); ++r) {
      auto e = static_cast<size_t>(ip[r]);
      v[e] = pp[r];
      v[n_ex + e] = 1;
    }
  }
  v = dist::world().sum(std::move(v), "gathering the predictions");
  pass.predictions.resize(n_ex);
  for (size_t e = 0; e < n_ex; ++e) pass.predictions[e] = v[n_ex + e] > 0 ? v[e] : std::nan("");
  return pass;
}

EvalResult Task::evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                          const data::BatchStream& s, const EvalOptions& o) const {
  auto pass = evaluate_split(*this, m, ds, s, o);
  EvalResult r;
  r.metrics = metrics(pass.sums);
  r.tokens = pass.sums.tokens;
  return r;
}

}  // namespace ropelab::tasks
