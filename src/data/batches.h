// Batch streams, one per task, over prepared token datasets.
//
// A stream is random access: batch(epoch, index) is a pure function of (seed, epoch, index),
// so a resumed run sees exactly the batches it would have seen, and rank r of a data-parallel
// world takes every world-th window/example (translation: every world-th batch) of the one
// global order. So N ranks with batch b take, step by step, the items one process takes with
// batch N*b (translation: with grad_accum N), and MLM masks depend on the window, not on who
// takes it. Streams:
//   - causal LM: contiguous windows over the concatenated documents (EOS after each), each
//     window seq_len+1 tokens (input, shifted target); every window once per epoch;
//   - MLM: windows of seq_len-2 tokens wrapped as [CLS] ... [SEP]; 15% of non-special tokens
//     selected, of those 80% -> [MASK], 10% -> random token, 10% unchanged; targets only at
//     selected positions (-100 elsewhere);
//   - translation: (source, target) pairs bucketed by length into batches under a token budget;
//   - GLUE: [CLS] a [SEP] (b [SEP]) with segment ids and labels; ranking triplets give two
//     rows per example, [CLS] a [SEP] b [SEP] and [CLS] a [SEP] c [SEP] (rows 2i and 2i+1);
//   - synthetic: one example per row, right-padded; next-token targets at answer tokens only.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "data/tokens.h"
#include "util/random.h"

namespace ropelab::data {

// Tensor names carry their shape: B batch, T target/decoder time, S source time.
struct Batch {
  torch::Tensor input_BT;    // int64 token ids (decoder input for translation)
  torch::Tensor target_BT;   // int64 targets; -100 = no loss at this position
  torch::Tensor pad_BT;      // bool, true = real token; undefined = no padding
  torch::Tensor segment_BT;  // int64 segment ids (GLUE)
  torch::Tensor label_B;     // GLUE: int64 class index, or float32 score (regression); per
                             // example (a ranking batch has 2 input rows per example)
  torch::Tensor index_B;     // GLUE: int64 row of each example in its split (stays on the CPU)
  torch::Tensor src_BS;      // translation source ids
  torch::Tensor src_pad_BS;  // bool, true = real source token
  torch::Tensor doc_BT;      // clm, mlm with task.packing documents: int64 document ids of a
                             // window (0, 1, ... from its first token); undefined = one stream
  torch::Tensor scored_N;    // MLM, answer: int64 flat positions (into B*T) whose target is not
                             // -100, found on the host with the batch, so that the task needs
                             // no nonzero() (a host sync) on the device
  // Context parallelism (StreamOptions::context_parts > 1): input_BT, target_BT and scored_N
  // are this member's share of each sequence (dist::ContextSplit::shard), pad_BT and doc_BT the
  // whole sequence's (attention masks every key); the counts below are the share's.
  int64_t num_tokens = 0;   // real input tokens (throughput)
  int64_t num_targets = 0;  // positions that carry loss
  // Every defined tensor moved to `dev` (the one place a batch changes device).
  Batch to(torch::Device dev) const;
};

// The flat positions of a CPU target_BT whose target is not -100 (Batch::scored_N).
torch::Tensor scored_positions(const torch::Tensor& target_BT);

struct StreamOptions {
  uint64_t seed = 0;
  int64_t batch_size = 16;
  int64_t seq_len = 128;
  int64_t max_tokens = 0;  // translation token budget per batch (0 = batch_size * seq_len)
  bool shuffle = true;     // false for evaluation: fixed order, last partial batch kept
  int rank = 0, world = 1;
  double mask_prob = 0.15, mask_token_frac = 0.8, random_token_frac = 0.1;  // MLM
  bool documents = false;  // clm, mlm: each window's document ids (Batch::doc_BT)
  // clm, mlm: each sequence split over a context-parallel group of this many ranks, of which
  // this rank is member context_member (dist/context.h). `rank` and `world` count the groups:
  // every member of a group reads the same batches.
  int context_parts = 1, context_member = 0;
};

class BatchStream {
 public:
  virtual ~BatchStream() = default;
  // Batches this rank sees per epoch.
  virtual int64_t batches_per_epoch() const = 0;
  virtual Batch batch(int64_t epoch, int64_t index) const = 0;
};

std::unique_ptr<BatchStream> make_lm_stream(const TokenDataset& ds, const StreamOptions& opt);
std::unique_ptr<BatchStream> make_mlm_stream(const TokenDataset& ds, const StreamOptions& opt);
std::unique_ptr<BatchStream> make_translation_stream(const TokenDataset& ds,
                                                     const StreamOptions& opt);
std::unique_ptr<BatchStream> make_glue_stream(const TokenDataset& ds, const StreamOptions& opt);
std::unique_ptr<BatchStream> make_synthetic_stream(const TokenDataset& ds,
                                                   const StreamOptions& opt);
// Member `member` of `parts`'s share of a batch of whole sequences (Batch: context
// parallelism); UserError when the sequences do not split into 2 x parts equal pieces.
Batch context_share(const Batch& whole, int parts, int member);
// Each batch of `s` as context_share gives it.
std::unique_ptr<BatchStream> context_shares(std::unique_ptr<BatchStream> s, int parts, int member);

// One batch, every time (bench: a training step's compute does not depend on the text).
std::unique_ptr<BatchStream> make_repeat_stream(Batch b);

using util::mix64;  // deterministic randomness shared by the streams
// A permutation of [0, n) that depends only on `key`.
std::vector<int64_t> permutation(int64_t n, uint64_t key);

}  // namespace ropelab::data
