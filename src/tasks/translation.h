// Translation: an encoder-decoder (Transformer-base, Vaswani et al. 2017) on sentence pairs.
//   loss: label-smoothed cross-entropy in fairseq's form, over real target tokens only:
//         (1 - eps - eps/(V-1)) * nll + eps/(V-1) * sum_j -log p_j   (eps = task.label_smoothing)
//   batches: pairs grouped by length under a token budget (task.max_tokens);
//   metrics: loss, ppl, acc over target tokens; on validation also bleu and chrf (sacreBLEU's
//         defaults, scoring/bleu.h) of greedy translations of the first valid_bleu_sentences
//         sentences against their detokenised references; `ropelab eval` decodes the whole
//         split with beam search instead.
// RoPE (and every position module) acts in the encoder's and the decoder's self-attention only:
// cross-attention compares target positions with source positions, which index different
// sequences, so a relative offset m - n between them means nothing (the paper applies RoPE to
// self-attention; the stacks never hand cross-attention a position module).
#pragma once
#include "model/decode.h"
#include "tasks/task.h"
#include "util/progress.h"

namespace ropelab::tasks {

class TranslationTask : public Task {
 public:
  // s.tokenizer: the target side's (for BLEU); s.source_vocab > 0: separate source embeddings.
  TranslationTask(const TaskSetup& s, const config::TranslationTaskConfig& t);
  const char* name() const override { return config::TranslationTaskConfig::kName; }
  model::Model build_model() const override;
  std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                            int64_t seq_len, int64_t batch_size) const override;
  Forward forward(model::ModelImpl& m, const data::Batch& b) const override;
  Metrics metrics(const HostSums& s) const override;
  Selection selection() const override;
  EvalResult evaluate(model::ModelImpl& m, const data::TokenDataset& ds, const data::BatchStream& s,
                      const EvalOptions& o) const override;

  // The decoding settings of this task (beam 1 = greedy).
  model::DecodeOptions decode_options(int64_t beam) const;

 private:
  TaskSetup s_;
  config::TranslationTaskConfig t_;
};

// Translates token sequences (sources longer than max_source tokens are cut), batched by
// length under `batch_tokens` source tokens; returns the hypotheses in input order. `bar`
// (optional) counts sentences.
std::vector<std::vector<int64_t>> translate_ids(model::ModelImpl& m,
                                                const std::vector<std::vector<int32_t>>& sources,
                                                const model::DecodeOptions& d, int64_t batch_tokens,
                                                int64_t max_source, torch::Device dev, bool bf16,
                                                Progress* bar);

}  // namespace ropelab::tasks
