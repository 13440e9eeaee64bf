// GLUE-style sentence(-pair) classification and regression (BERT's fine-tuning, Devlin et al.
// 2019, as used for the paper's Table 2): [CLS] a [SEP] b [SEP] through the encoder, a pooler
// (dense + tanh) on [CLS], dropout, and a linear layer to the classes (or to one score for
// STS-B).
//   loss: cross-entropy over the classes (label smoothing task.label_smoothing), or the squared
//         error of the score for regression; one target per example.
//   metrics: in training, loss and (classification) acc; on a whole split, GLUE's own metrics
//         for the task (tasks/glue_metrics.h): mcc for CoLA, f1 + acc for MRPC and QQP,
//         pearson + spearman for STS-B, acc otherwise. The best checkpoint is chosen by the
//         task's main metric (the one the paper's Table 2 reports).
//   predictions: a final evaluation (`ropelab eval`) also returns the leaderboard file
//         (`<Task>.tsv`, `index<TAB>prediction`, label names where GLUE uses them), also for
//         unlabeled test splits, where it reports no metrics.
#pragma once
#include "corpora/glue.h"
#include "tasks/task.h"

namespace ropelab::tasks {

class GlueTask : public Task {
 public:
  explicit GlueTask(const TaskSetup& s);
  const char* name() const override { return config::GlueTaskConfig::kName; }
  model::Model build_model() const override;
  std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                            int64_t seq_len, int64_t batch_size) const override;
  Forward forward(model::ModelImpl& m, const data::Batch& b) const override;
  Metrics metrics(const HostSums& s) const override;
  Selection selection() const override;
  EvalBatch eval_batch(model::ModelImpl& m, const data::Batch& b, bool labeled) const override;
  bool predicts() const override { return true; }
  // Always over the whole split: correlation metrics over a part of it would select
  // checkpoints on noise. Validation splits of GLUE are small (at most 10k examples but QQP's).
  EvalResult evaluate(model::ModelImpl& m, const data::TokenDataset& ds, const data::BatchStream& s,
                      const EvalOptions& o) const override;
  const corpora::GlueTask& glue() const { return s_.glue; }

 private:
  // The loss and sums that the head's outputs [B, C] give against the labels.
  Forward score(const torch::Tensor& out_BC, const torch::Tensor& label_B) const;

  TaskSetup s_;
};

// The leaderboard's file name for predictions of `task` on `split` ("CoLA.tsv", "MNLI-m.tsv").
std::string leaderboard_file(const corpora::GlueTask& task, const std::string& split);

}  // namespace ropelab::tasks
