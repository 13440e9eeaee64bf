// `ropelab probe RUN`: a run's length-generalisation card (train short, test long).
//
//   - a synthetic-* run (task answer, data/synthetic.h): teacher-forced exact match on fresh
//     test-split examples at 1x, 2x, 4x and 8x its training size L. The column for m covers
//     sizes in (m L / 2, m L] (1x: the longer half of the training range), `examples` each;
//     passkey instead fills prompts of exactly m L tokens and puts the key at each depth of a
//     grid (0, 0.25, 0.5, 0.75, 1), `examples` per cell, and reports the mean over depths;
//   - a causal-LM run on text: perplexity at 1x-8x its training length, with the same token
//     budget at every length (`ropelab eval --lengths`).
// A column the model cannot read (beyond a learned position table, or more mqar keys than the
// vocabulary has) is n/a. Writes probe.json, probe.md and probe.png into the run directory.
//
// card_markdown() sets the probes of several runs side by side, one table per task, mean +-
// std over seeds, with a paired t-test of each cell against a baseline variant.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace ropelab::lab {

struct ProbeOptions {
  std::vector<int64_t> multipliers = {1, 2, 4, 8};
  int64_t examples = 128;       // per column (passkey: per depth and column)
  int64_t eval_tokens = 16384;  // text runs: tokens per length
  bool plot = true;
};

struct ProbeReport {
  std::string run_dir, task;  // task: the data source (synthetic-copy, ..., or bible-en)
  int64_t step = 0;           // the checkpoint's
  std::string metric;         // "exact" (higher is better) or "ppl" (lower is better)
  bool higher = true;
  int64_t train_size = 0;  // L: instance size or training length in tokens
  std::string size_unit;   // "symbols", "digits", "pairs", "tokens"
  std::vector<int64_t> multipliers;
  std::vector<int64_t> sizes;             // m L
  std::vector<double> value;              // per multiplier; NaN = n/a
  std::vector<double> token_acc;          // synthetic: answer-token accuracy per multiplier
  std::vector<double> depths;             // passkey only
  std::vector<std::vector<double>> grid;  // passkey: [depth][multiplier] exact match
};

ProbeReport probe_run(const std::string& run_dir, const ProbeOptions& o = {});
// The run's probe table (Markdown; passkey adds its length x depth grid).
std::string probe_markdown(const ProbeReport& r);
// Reads a run's probe.json (UserError naming the file if it is missing or malformed).
ProbeReport read_probe(const std::string& run_dir);

struct CardEntry {
  std::string variant;
  int64_t seed = 0;  // pairs entries of different variants in the paired test
  ProbeReport report;
};
// NoLiMa's effective length (Modarressi et al. 2025) on the multipliers: the longest multiplier
// up to which every score stays at least 85% of the 1x score (exact match: score >= 0.85 x 1x;
// perplexity, lower is better: 1x / score >= 0.85). 0 when the 1x score is missing or, for exact
// match, below 10% (nothing learned to keep).
int64_t effective_multiplier(const std::vector<double>& means, const std::vector<int64_t>& mult,
                             bool higher);
// One table per task, a row per variant: mean +- std over seeds at each multiplier, `*` where a
// paired t-test over seeds against `baseline` (a variant; empty = the first) gives p < 0.05,
// and the effective length of the means.
std::string card_markdown(const std::vector<CardEntry>& entries, const std::string& baseline);
// Writes card.json (and card.png) into out_dir; returns the Markdown (with the plot's link).
std::string write_card(const std::vector<CardEntry>& entries, const std::string& baseline,
                       const std::string& out_dir, bool plot);

}  // namespace ropelab::lab
