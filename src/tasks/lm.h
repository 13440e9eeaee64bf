// Language-modelling tasks.
//   clm: causal LM, next-token cross-entropy (GPT); metrics loss, ppl, acc, and bpb (bits per
//        byte) with the byte tokenizer.
//   mlm: BERT's masked LM, cross-entropy on the selected positions only; metrics loss, ppl,
//        acc (masked-token accuracy). Only selected positions go through the vocabulary
//        projection.
//   answer: causal LM over synthetic examples (data/synthetic.h), trained and scored on the
//        answer tokens only; metrics loss, ppl, acc (answer tokens) and exact (examples whose
//        every answer token is the argmax given the true prefix: teacher-forced exact match,
//        the same as greedy decoding's). The best checkpoint is the one with the highest exact.
#pragma once
#include "tasks/task.h"

namespace ropelab::tasks {

class CausalLmTask : public Task {
 public:
  explicit CausalLmTask(const TaskSetup& s);
  const char* name() const override { return config::ClmTaskConfig::kName; }
  model::Model build_model() const override;
  std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                            int64_t seq_len, int64_t batch_size) const override;
  Forward forward(model::ModelImpl& m, const data::Batch& b) const override;
  Metrics metrics(const HostSums& s) const override;

 protected:
  TaskSetup s_;
};

class MaskedLmTask : public Task {
 public:
  MaskedLmTask(const TaskSetup& s, const config::MlmTaskConfig& t);
  const char* name() const override { return config::MlmTaskConfig::kName; }
  model::Model build_model() const override;
  std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                            int64_t seq_len, int64_t batch_size) const override;
  Forward forward(model::ModelImpl& m, const data::Batch& b) const override;
  Metrics metrics(const HostSums& s) const override;

 private:
  TaskSetup s_;
  config::MlmTaskConfig t_;
};

class AnswerTask : public CausalLmTask {
 public:
  explicit AnswerTask(const TaskSetup& s) : CausalLmTask(s) {}
  const char* name() const override { return config::AnswerTaskConfig::kName; }
  std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                            int64_t seq_len, int64_t batch_size) const override;
  Forward forward(model::ModelImpl& m, const data::Batch& b) const override;
  Metrics metrics(const HostSums& s) const override;
  Selection selection() const override { return {"exact", true}; }
};

}  // namespace ropelab::tasks
