// `ropelab eval RUN --ids FILE [--logits OUT.h5]`: a decoder run's outputs on token ids given
// exactly, to compare ropelab with another framework (transformers' model(input_ids).logits):
// the mean next-token negative log-likelihood -log p(x_t+1 | x_<=t) per sequence and over every
// predicted token, and optionally the logits themselves.
//
// The ids are in the checkpoint's numbering: for an imported run, the Hugging Face
// tokenizer's ids (ropelab re-numbers its vocabulary, hf/vocab_order.json; the ids go in and the
// logits' columns come out through it), for a run ropelab made, ropelab's.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::eval {

// FILE: JSON lines, each an array of ids or an object with "input_ids" (an array); or HDF5
// (by its signature) with a dataset input_ids, 1-D (one sequence) or 2-D (one row each).
// UserError naming the file and line (or dataset) for anything else, an empty sequence, an id
// outside [0, vocab), or no sequence at all.
std::vector<std::vector<int64_t>> read_ids(const std::string& file, int64_t vocab);

struct IdsReport {
  std::string run_dir, checkpoint, ids_file, logits_file;
  std::vector<int64_t> tokens;  // per sequence: its length
  std::vector<double> nll;      // per sequence: mean NLL of its next tokens (nats); NaN: 1 token
  double mean_nll = 0;          // over every predicted token of every sequence
  int64_t predicted = 0;
};

// Runs each sequence through the run's model (its best checkpoint with `use_best`, else the
// newest; `rope_scaling` as `eval --rope-scaling`), batch 1, float32 on the CPU. With
// `logits_out`, writes an HDF5 file with logits/I ([T, V] float32, the checkpoint's column order)
// and input_ids/I for sequence I, and nll (per sequence); written whole or not at all.
// UserError for a run that is not a decoder, and for a sequence longer than a learned table.
IdsReport eval_ids(const std::string& run_dir, const std::string& ids_file,
                   const std::string& logits_out, bool use_best,
                   const std::string& rope_scaling = "");

std::string format_ids(const IdsReport& r);

}  // namespace ropelab::eval
