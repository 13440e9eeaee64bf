// Decoding with an encoder-decoder model (model = backbone + LM head): greedy search and
// batched beam search, both incremental through the key/value cache (or, for checks and
// measurements, recomputing the whole prefix at every step).
//
// Beam search follows fairseq's sequence generator: each step scores beam x vocab candidates
// per sentence and keeps the 2k best; an end-of-sentence among the first k is a finished
// hypothesis, scored by its log-probability divided by length^lenpen (length counting the
// end-of-sentence token; lenpen 1 = the mean log-probability, 0 = none); the k best others stay
// active. A sentence stops once it has k finished hypotheses (early stopping), or at its
// maximum length a * source_length + b, where every active hypothesis is ended. The caches
// follow the surviving beams (DecodeState::reorder). Padding and BOS are never generated.
// With beam 1 this is exactly greedy search.
//
// Legend: B sentences, K beams, R = B*K rows, S source time, V vocab.
#pragma once
#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "model/model.h"

namespace ropelab::model {

struct DecodeOptions {
  int64_t beam = 1;
  double lenpen = 1.0;
  double max_len_a = 1.2;  // output tokens <= a * source tokens + b
  int64_t max_len_b = 10;
  bool use_cache = true;  // false: recompute the whole prefix every step (same result, slower)
};

// Decodes each row of src_BS (int64 ids; src_pad_BS true = real token). Returns each
// sentence's best hypothesis, without BOS and EOS. The model should be in eval mode.
std::vector<std::vector<int64_t>> generate(ModelImpl& m, const torch::Tensor& src_BS,
                                           const torch::Tensor& src_pad_BS, const DecodeOptions& o);

}  // namespace ropelab::model
