// A task knows what data to feed, how to build the model for it, and how to score a batch
// (fairseq's task / criterion split). The trainer knows none of that.
//
// Implemented: clm (causal LM: loss, perplexity, bits per byte for byte-level data) and mlm
// (masked LM: loss on the selected positions, masked-token accuracy). Translation and GLUE
// plug in through the same interface (their issues add them).
#pragma once
#include <map>
#include <memory>
#include <string>

#include "config/schema.h"
#include "data/batches.h"
#include "data/prepare.h"
#include "model/transformer.h"

namespace ropelab::tasks {

// Sums over a batch (or many): divide to get means, so evaluation over many batches weights
// every target equally.
struct Stats {
  double loss_sum = 0;  // summed cross-entropy (nats) over targets
  double targets = 0;   // positions that carry loss
  double correct = 0;   // argmax == target
  double tokens = 0;    // input tokens processed
  void add(const Stats& o) {
    loss_sum += o.loss_sum, targets += o.targets, correct += o.correct, tokens += o.tokens;
  }
};

class Task {
 public:
  virtual ~Task() = default;
  virtual std::string name() const = 0;
  // The mean loss to backpropagate and the batch's stats.
  virtual torch::Tensor loss(model::TransformerImpl& m, const data::Batch& b,
                             Stats* stats) const = 0;
  // Metrics from accumulated stats: always "loss"; plus "ppl", "acc", "bpb" as they apply.
  virtual std::map<std::string, double> metrics(const Stats& s) const = 0;
  // A stream over a prepared split. `train` = shuffled, full batches; otherwise in order.
  virtual std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                                    int64_t seq_len) const = 0;
  virtual model::Transformer build_model() const = 0;
};

// Builds the task a config names.
std::unique_ptr<Task> make_task(const config::Config& c, int64_t vocab,
                                const std::string& tokenizer_kind);

}  // namespace ropelab::tasks
