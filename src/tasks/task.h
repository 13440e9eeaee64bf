// A task knows what data to feed, which head to put on the backbone, how to score a batch and
// how to evaluate a split (fairseq's task / criterion split). The trainer knows none of that.
//
// Sums, not means: forward() returns the training loss *summed* over the batch's targets and
// named sums (targets, tokens, nll, correct, ...). The trainer divides by the number of targets
// of the whole step (all micro-batches; later all ranks), so accumulation, padding and data
// parallelism weight every target equally. metrics() turns accumulated sums into the metrics a
// task reports, under names the task chooses; compare and eval print whatever was logged.
//
// Implemented: clm, mlm and answer (tasks/lm.h), translation (tasks/translation.h), glue
// (tasks/glue.h). A new task: its config struct (config/schema.h), a Task subclass in its own file,
// and one line in tasks/factory.cpp.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "config/schema.h"
#include "data/batches.h"
#include "model/model.h"
#include "text/tokenizer.h"

namespace ropelab::tasks {

using Metrics = std::map<std::string, double>;

// Named sums over a batch or many ("targets" always: positions that carry loss).
struct Sums {
  std::map<std::string, double> v;
  double operator()(const std::string& k) const {
    auto it = v.find(k);
    return it == v.end() ? 0.0 : it->second;
  }
  void add(const Sums& o) {
    for (const auto& [k, x] : o.v) v[k] += x;
  }
};

// The sums of every rank of a data-parallel run, added (a collective: every rank calls it;
// names one rank lacks count as 0 there). One process: `s` itself.
Sums over_ranks(const Sums& s, const char* what);

struct Forward {
  torch::Tensor loss_sum;  // scalar: training loss summed over the batch's targets
  Sums sums;
};

struct EvalOptions {
  int64_t max_batches = 0;  // 0 = the whole split
  torch::Device device = torch::kCPU;
  bool bf16 = false;
  // A final evaluation (`ropelab eval`): generation tasks decode the whole split with their
  // test settings (beam search), instead of the quick validation subset.
  bool full = false;
};

struct EvalResult {
  Metrics metrics;
  double tokens = 0;  // input tokens evaluated (for the evaluation speed)
  // A final evaluation's per-example outputs in split order, where the task has a file format
  // for them (GLUE: the leaderboard's `index<TAB>prediction` file named predictions_file).
  std::vector<std::string> predictions;
  std::string predictions_file;
};

// Which metric picks the best checkpoint, and in which direction.
struct Selection {
  std::string metric = "loss";
  bool higher_is_better = false;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const char* name() const = 0;
  // The backbone and this task's head, initialised (model/init.h).
  virtual model::Model build_model() const = 0;
  // A stream over a prepared split. `train` = shuffled, full batches; otherwise in order.
  virtual std::unique_ptr<data::BatchStream> stream(const data::TokenDataset& ds, bool train,
                                                    int64_t seq_len, int64_t batch_size) const = 0;
  virtual Forward forward(model::ModelImpl& m, const data::Batch& b) const = 0;
  // Metrics from accumulated sums: always "loss" (mean nll per target), plus the task's own.
  virtual Metrics metrics(const Sums& s) const = 0;
  virtual Selection selection() const { return {}; }
  // Metrics over a split (`ds`, batched by `s`). The default sums forward() over the batches;
  // tasks whose metrics need every output (BLEU over hypotheses, MCC / Spearman over
  // predictions) override it.
  virtual EvalResult evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                              const data::BatchStream& s, const EvalOptions& o) const;
};

// The stream options every task starts from: the run's seed, shuffled when training.
data::StreamOptions stream_options(const config::Config& c, bool train, int64_t seq_len,
                                   int64_t batch_size);

// Builds the task a config names (tasks/factory.cpp). `vocab` is the model's (output)
// vocabulary; `tok` (optional), the tokenizer of that vocabulary, lets generation tasks turn ids
// back into text for their metrics (without it they report no BLEU); `source_vocab` > 0 gives a
// translation model separate source embeddings (data.tokenizer.joint: false).
std::unique_ptr<Task> make_task(const config::Config& c, int64_t vocab,
                                const text::Tokenizer* tok = nullptr, int64_t source_vocab = 0);

}  // namespace ropelab::tasks
