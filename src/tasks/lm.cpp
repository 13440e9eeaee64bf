#include "tasks/lm.h"

#include <torch/nn/functional.h>

#include "tasks/loss.h"

namespace ropelab::tasks {

namespace {

// PyTorch's label smoothing eps over V classes as the loss's weights: a = 1 - eps, b = eps / V
// (tasks/loss.h).
struct Smoothing {
  double a, b;
  Smoothing(double eps, int64_t V) : a(1.0 - eps), b(eps / static_cast<double>(V)) {}
};

// Cross-entropy summed over positions whose target is not -100, always in fp32, and the sums
// the LM metrics need.
Forward scored_ce(const torch::Tensor& logits_BTV, const torch::Tensor& target_BT, double smoothing,
                  int64_t num_tokens) {
  int64_t V = logits_BTV.size(-1);
  const Smoothing w(smoothing, V);
  auto ce = cross_entropy(logits_BTV.reshape({-1, V}), target_BT.reshape({-1}), w.a, w.b);
  return token_forward(ce, logits_BTV.device(), num_tokens);
}

// The rows of a flattened [B*T, ...] selected by the batch's scored positions (found on the
// host by the stream: no nonzero() on the device).
const torch::Tensor& scored(const data::Batch& b, const char* task) {
  if (!b.scored_N.defined())
    throw std::logic_error(std::string(task) + ": batch without scored_N (data::scored_positions)");
  return b.scored_N;
}

}  // namespace

// ---- causal LM

CausalLmTask::CausalLmTask(const TaskSetup& s) : s_(s) {}

model::Model CausalLmTask::build_model() const {
  model::Transformer backbone(s_.model, s_.vocab);  // constructed in this order: backbone, head
  if (s_.context_parallel > 1) backbone->set_context_parallel(context_group(s_));
  auto head = std::make_shared<model::LmHeadImpl>(s_.model, s_.vocab);
  return model::Model(backbone, head, s_.model.init_std);
}

std::unique_ptr<data::BatchStream> CausalLmTask::stream(const data::TokenDataset& ds, bool train,
                                                        int64_t seq_len, int64_t batch_size) const {
  return data::make_lm_stream(ds, stream_options(s_, train, seq_len, batch_size));
}

Forward CausalLmTask::forward(model::ModelImpl& m, const data::Batch& b) const {
  auto h_BTD = m.backbone->decode(b.input_BT, {}, {}, nullptr, b.doc_BT);
  const Smoothing w(s_.task.label_smoothing, s_.vocab);
  auto ce = head_cross_entropy(m, h_BTD, b.target_BT, w.a, w.b);
  return token_forward(ce, h_BTD.device(), b.num_tokens);
}

Metrics CausalLmTask::metrics(const HostSums& s) const {
  auto m = token_metrics(s);
  // One token per byte: bits per byte is the loss in bits.
  if (s_.byte_tokens) m["bpb"] = m["loss"] / std::log(2.0);
  return m;
}

// ---- masked LM

MaskedLmTask::MaskedLmTask(const TaskSetup& s, const config::MlmTaskConfig& t) : s_(s), t_(t) {}

model::Model MaskedLmTask::build_model() const {
  model::Transformer backbone(s_.model, s_.vocab);
  if (s_.context_parallel > 1) backbone->set_context_parallel(context_group(s_));
  auto head = std::make_shared<model::MlmHeadImpl>(s_.model, s_.vocab);
  return model::Model(backbone, head, s_.model.init_std);
}

std::unique_ptr<data::BatchStream> MaskedLmTask::stream(const data::TokenDataset& ds, bool train,
                                                        int64_t seq_len, int64_t batch_size) const {
  auto o = stream_options(s_, train, seq_len, batch_size);
  o.mask_prob = t_.mask_prob;
  o.mask_token_frac = t_.mask_token_frac;
  o.random_token_frac = t_.random_token_frac;
  return data::make_mlm_stream(ds, o);
}

Forward MaskedLmTask::forward(model::ModelImpl& m, const data::Batch& b) const {
  auto h = m.backbone->encode(b.input_BT, b.pad_BT, {}, b.doc_BT);
  // Only the selected positions go through the vocabulary projection.
  const auto& idx = scored(b, "mlm");
  auto h_sel = h.reshape({-1, h.size(-1)}).index_select(0, idx);
  auto logits = m.logits(h_sel.unsqueeze(0));
  auto target = b.target_BT.reshape({-1}).index_select(0, idx).unsqueeze(0);
  return scored_ce(logits, target, s_.task.label_smoothing, b.num_tokens);
}

Metrics MaskedLmTask::metrics(const HostSums& s) const { return token_metrics(s); }

// ---- answer (synthetic probes)

std::unique_ptr<data::BatchStream> AnswerTask::stream(const data::TokenDataset& ds, bool train,
                                                      int64_t seq_len, int64_t batch_size) const {
  return data::make_synthetic_stream(ds, stream_options(s_, train, seq_len, batch_size));
}

Forward AnswerTask::forward(model::ModelImpl& m, const data::Batch& b) const {
  auto h_BTD = m.backbone->decode(b.input_BT);
  const int64_t B = h_BTD.size(0), T = h_BTD.size(1);
  // Only answer positions go through the vocabulary projection.
  auto sel_BT = b.target_BT != -100;
  const auto& idx_N = scored(b, "answer");
  auto h_ND = h_BTD.reshape({B * T, -1}).index_select(0, idx_N);
  auto logits_1NV = m.logits(h_ND.unsqueeze(0));
  auto target_N = b.target_BT.reshape({-1}).index_select(0, idx_N);
  Forward out = scored_ce(logits_1NV, target_N.unsqueeze(0), s_.task.label_smoothing, b.num_tokens);
  // An example is right when none of its answer tokens is wrong.
  torch::NoGradGuard no_grad;
  auto wrong_N = (logits_1NV.squeeze(0).argmax(-1) != target_N).to(torch::kLong);
  auto row_N = idx_N.div(T, "floor");
  auto wrong_B = torch::zeros({B}, wrong_N.options()).index_add_(0, row_N, wrong_N);
  auto has_B = sel_BT.any(1);
  out.sums.set(Sum::kExamples, has_B.sum()).set(Sum::kExact, (has_B & (wrong_B == 0)).sum());
  return out;
}

Metrics AnswerTask::metrics(const HostSums& s) const {
  auto m = token_metrics(s);
  m["exact"] = s.examples > 0 ? s.exact / s.examples : 0.0;
  return m;
}

}  // namespace ropelab::tasks
