// A task knows what data to feed, which head to put on the backbone, how to score a batch and
// how to evaluate a split (fairseq's task / criterion split). The trainer knows none of that.
//
// forward() returns the training loss *summed* over the batch's targets and the batch's typed
// sums (tasks/sums.h), both on the batch's device and without reading anything back to the host.
// The trainer divides by the number of targets of the whole step (all micro-batches, all ranks),
// so accumulation, padding and data parallelism weight every target equally. metrics() turns the
// host's copy of accumulated sums into the metrics a task reports, under names the task chooses;
// compare and eval print whatever was logged.
//
// Evaluation is one loop for every task (evaluate_split): eval_batch() gives a batch's sums and,
// for tasks that predict per example (GLUE, ranking), one prediction per example; the task's
// evaluate() turns the pass into metrics (and BLEU, MCC, F1, Spearman over the whole split).
//
// Implemented: clm, mlm and answer (tasks/lm.h), translation (tasks/translation.h), glue
// (tasks/glue.h), rank (tasks/rank.h). A new task: its config struct (config/schema.h), a Task
// subclass in its own file, and one line in tasks/factory.cpp.
#pragma once
#include <map>
#include <memory>
#include <string>

#include "config/schema.h"
#include "corpora/glue.h"
#include "data/batches.h"
#include "dist/context.h"
#include "model/model.h"
#include "tasks/sums.h"
#include "tokenizers/tokenizer.h"

namespace ropelab::tasks {

using Metrics = std::map<std::string, double>;

// What a task is built from: the config sections it reads (never the whole config), and what
// the data decides. make_task() fills it from a config and the run's data.
struct TaskSetup {
  config::ModelConfig model;
  config::TaskConfig task;   // seq_len, label_smoothing and the task's own section
  int64_t seed = 0;          // run.seed: the order of the batches
  int64_t vocab = 0;         // the model's (output) vocabulary
  int64_t source_vocab = 0;  // > 0: translation with a separate source vocabulary
  // The tokenizer of `vocab` (optional): generation tasks turn ids back into text for BLEU.
  const tokenizers::Tokenizer* tokenizer = nullptr;
  bool byte_tokens = false;      // the byte tokenizer: clm also reports bits per byte
  corpora::GlueTask glue;        // glue and rank: the task's layout and metric set
  int64_t batch_size = 0;        // train.batch_size: translation's decoding budget
  int64_t context_parallel = 1;  // train.context_parallel (clm, mlm): ranks per sequence
};

struct Forward {
  torch::Tensor loss_sum;  // scalar: training loss summed over the batch's targets
  StepSums sums;
};

// One evaluation batch: its sums (labeled splits: all of them; unlabeled: tokens only) and, for
// tasks that predict per example, one value per example (class index or score), on the device.
struct EvalBatch {
  StepSums sums;
  torch::Tensor prediction_B;
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
  // for them: GLUE's leaderboard `index<TAB>prediction` file (predictions_file ends in .tsv), or
  // translation's hypotheses one per line (.txt) with the references they were scored against
  // (written beside them as references.txt: what paired significance tests between runs need).
  std::vector<std::string> predictions, references;
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
  virtual Metrics metrics(const HostSums& s) const = 0;
  virtual Selection selection() const { return {}; }
  // One batch of an evaluation (no gradients, eval mode). `labeled`: the split has targets.
  // The default: forward()'s sums, no predictions.
  virtual EvalBatch eval_batch(model::ModelImpl& m, const data::Batch& b, bool labeled) const;
  // Whether eval_batch() gives per-example predictions (then every batch must).
  virtual bool predicts() const { return false; }
  // Metrics over a split (`ds`, batched by `s`). The default: metrics() of evaluate_split's
  // sums; tasks whose metrics need every output (BLEU over hypotheses, MCC / Spearman over
  // predictions) add to it.
  virtual EvalResult evaluate(model::ModelImpl& m, const data::TokenDataset& ds,
                              const data::BatchStream& s, const EvalOptions& o) const;
};

// One pass of the model over a split, shared by every task's evaluate(): eval mode, no
// gradients, the run's precision, at most o.max_batches batches (0: all), stopped early by a
// signal. Sums stay on the device until the end and are added over ranks once.
struct SplitPass {
  HostSums sums;
  bool labeled = true;  // every example of the split has a label (LM splits: always)
  // Tasks that predict: one value per example of the split, in split order, gathered over the
  // ranks (each rank evaluates every world-th example); NaN where none was made (a stop).
  std::vector<double> predictions;
};
SplitPass evaluate_split(const Task& t, model::ModelImpl& m, const data::TokenDataset& ds,
                         const data::BatchStream& s, const EvalOptions& o);

// "loss 3.21 ppl 24.8": metrics in one line, for logs.
std::string format_metrics(const Metrics& m);

// Token-level metrics: loss (mean nll per target), ppl and acc (argmax accuracy).
Metrics token_metrics(const HostSums& s);

// A token-level task's forward result from its cross-entropy (tasks/loss.h): the loss to
// backpropagate and the sums token_metrics reads (nll, targets, correct, and `num_tokens`).
struct CrossEntropy;
Forward token_forward(const CrossEntropy& ce, torch::Device dev, int64_t num_tokens);

// The cross-entropy (tasks/loss.h: weights a, b) of m's head on hidden states h_BTD against
// target_BT (-100: no target): where the head is a plain linear layer (ModelImpl::logits_weight)
// the loss computes the logits itself (linear_cross_entropy), else cross_entropy of m.logits.
CrossEntropy head_cross_entropy(model::ModelImpl& m, const torch::Tensor& h_BTD,
                                const torch::Tensor& target_BT, double a, double b);

// This rank's context-parallel group of s.context_parallel ranks (dist/context.h); UserError
// when the world's ranks are not a multiple of it.
dist::ContextGroup context_group(const TaskSetup& s);

// The stream options every task starts from: the run's seed, shuffled when training, this
// rank's share of the data (data parallelism over the context-parallel groups).
data::StreamOptions stream_options(const TaskSetup& s, bool train, int64_t seq_len,
                                   int64_t batch_size);

// Builds the task a config names (tasks/factory.cpp). `vocab` is the model's (output)
// vocabulary; `tok` (optional), the tokenizer of that vocabulary, lets generation tasks turn ids
// back into text for their metrics (without it they report no BLEU); `source_vocab` > 0 gives a
// translation model separate source embeddings (data.tokenizer.joint: false).
std::unique_ptr<Task> make_task(const config::Config& c, int64_t vocab,
                                const tokenizers::Tokenizer* tok = nullptr,
                                int64_t source_vocab = 0);
// The setup make_task() gives the task (tasks/factory.cpp).
TaskSetup task_setup(const config::Config& c, int64_t vocab,
                     const tokenizers::Tokenizer* tok = nullptr, int64_t source_vocab = 0);

}  // namespace ropelab::tasks
