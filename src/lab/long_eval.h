// An experiment's long-document evaluation (`eval_windows`): every trained causal LM's
// sliding-window perplexity (eval/long_context.h) on the test split (the validation split of
// your text without a test file), one table for the runs.
#pragma once
#include <string>
#include <vector>

#include "config/experiment.h"

namespace ropelab::lab {

// Each run of `dirs` that is a causal LM, with eval_windows, eval_stride and eval_doc_tokens,
// and RoPE runs also with each of eval_rope_scaling. Writes perplexity.md and perplexity.json in
// `out_dir` (the reports also go into each run); returns the Markdown section for compare.md.
std::string evaluate_sliding(const config::Experiment& exp, const std::vector<std::string>& dirs,
                             const std::string& out_dir);

}  // namespace ropelab::lab
