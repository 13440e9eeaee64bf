// An experiment's long-document evaluation (`eval_windows`): every trained causal LM's
// sliding-window perplexity and zero-shot passkey (eval/long_context.h) on the test split (the
// validation split of your text without a test file), one table for the runs.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "config/experiment.h"

namespace ropelab::lab {

// One run's long-document results, or one run's with an evaluation-time scaling.
struct SlidingResult {
  std::string label;  // the run directory's name (+ " + SPEC")
  std::string row;    // the same without ".seedN": the row its seeds share
  int64_t seed = 0;
  std::vector<double> nll;      // per window; NAN: n/a
  std::vector<double> passkey;  // accuracy per window; NAN: n/a (or not measured)
};

// With several seeds a row: the mean NLL of each row, and paired t-tests over the seeds
// against the row `baseline` and against the best row of each window (Markdown).
std::string sliding_seed_tables(const std::vector<SlidingResult>& results,
                                const std::vector<int64_t>& windows, const std::string& baseline,
                                int64_t train_len);

// Each run of `dirs` that is a causal LM, with eval_windows, eval_stride and eval_doc_tokens,
// and pretrained RoPE runs (no scaling, no init_from) also with each of eval_rope_scaling; with
// eval_passkey, zero-shot passkey accuracy at the same lengths. Runs that differ only in their
// seed share a row: with seeds, the means and paired t-tests against `baseline` and against the
// best row of each window. Writes perplexity.md, perplexity.json and (with `plots`)
// perplexity_by_window.png in `out_dir` (the reports also go into each run); returns the
// Markdown section for compare.md.
std::string evaluate_sliding(const config::Experiment& exp, const std::vector<std::string>& dirs,
                             const std::string& out_dir, bool plots);

}  // namespace ropelab::lab
