// Long-text pair ranking, the paper's §4.5 (CAIL2019-SCM): given (A, B, C), is B closer to A
// than C is? A cross-encoder scores each pair: [CLS] A [SEP] B [SEP] and [CLS] A [SEP] C [SEP]
// through the encoder, the pooler on [CLS] and a linear layer to one score s; the two scores of
// an example are the logits of a two-way softmax.
//   loss: cross-entropy of softmax(s_AB, s_AC) against the label (0: B closer, 1: C closer).
//   metrics: acc (the paper's Table 5), over the whole split.
//   predictions: `ropelab eval` writes RUN/predictions/SPLIT/<task>.tsv (index, B or C).
// The maximum length (task.seq_len) bounds each pair; the longer side is cut first, so each
// text gets about half of it.
#pragma once
#include "corpora/glue.h"
#include "tasks/task.h"

namespace ropelab::tasks {

class RankTask : public Task {
 public:
  explicit RankTask(const TaskSetup& s);
  const char* name() const override { return config::RankTaskConfig::kName; }
  model::Model build_model() const override;
  std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                            int64_t seq_len, int64_t batch_size) const override;
  Forward forward(model::ModelImpl& m, const data::Batch& b) const override;
  Metrics metrics(const HostSums& s) const override;
  Selection selection() const override { return {"acc", true}; }
  EvalBatch eval_batch(model::ModelImpl& m, const data::Batch& b, bool labeled) const override;
  bool predicts() const override { return true; }
  EvalResult evaluate(model::ModelImpl& m, const data::TokenDataset& ds, const data::BatchStream& s,
                      const EvalOptions& o) const override;

 private:
  // The two scores of each example as logits [B, 2] (fp32).
  static torch::Tensor logits(model::ModelImpl& m, const data::Batch& b);
  static Forward score(const torch::Tensor& logits_B2, const torch::Tensor& label_B);

  TaskSetup s_;
};

}  // namespace ropelab::tasks
