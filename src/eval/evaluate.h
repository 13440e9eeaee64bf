// `ropelab eval`: a trained run's metrics on a split (its task's whole-split evaluation, with
// beam search for translation and the leaderboard file for GLUE), and optionally at other
// context lengths with the same token budget (length extrapolation), also with a RoPE
// context-extension method switched on at evaluation time.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "config/schema.h"

namespace ropelab::eval {

// `ropelab eval`: the task's metrics of a trained run on a split, and optionally at other
// context lengths with the same token budget (length extrapolation).
struct LengthRow {
  int64_t length = 0;
  bool applicable = true;  // false: beyond a learned table, or the split is too short
  std::map<std::string, double> metrics;
  int64_t tokens = 0;
};
struct EvalReport {
  std::string run_dir, checkpoint, split;
  int64_t step = 0;          // the checkpoint's
  std::string rope_scaling;  // METHOD:FACTOR applied at evaluation time, or empty
  int64_t train_seq_len = 0;
  std::map<std::string, double> metrics;
  std::vector<LengthRow> lengths;
  // The outputs written for this split: GLUE's leaderboard file, or translation's hypotheses
  // (predictions/SPLIT/translations.txt, with references.txt beside it).
  std::string predictions_path;
};
// `rope_scaling` ("yarn:4", "ntk:2", ...: METHOD:FACTOR with METHOD linear, ntk, dynamic, yarn or
// llama3, and @KIND,... for layout kinds) switches a RoPE context-extension method on for a model
// trained without it (its original length is the run's task.seq_len); the report goes to
// eval-SPLIT-rope-METHOD-FACTOR.json. `save`: write that report (and GLUE predictions or the
// translations) into the run, holding the run's lock (util/dir_lock.h); without it nothing is
// written and no lock is needed, so a run can be evaluated while it trains.
EvalReport evaluate_run(const std::string& run_dir, const std::string& split,
                        const std::vector<int64_t>& lengths, int64_t max_tokens, bool use_best,
                        const std::string& rope_scaling = "", bool save = true);
// A --rope-scaling spec checked (UserError naming the spec if malformed). Specs: METHOD:FACTOR
// (linear, ntk, dynamic, yarn, llama3, longrope) or base:BASE (a base change, after Liu et al.
// 2023, arXiv:2310.05209), with @KIND,... for layout kinds.
void check_rope_scaling_spec(const std::string& spec);
// The config overrides of a spec for model `m` trained at `original_len` tokens: with a layout
// (model.layout), for the kinds the spec names after @ ("linear:8@global"), else the RoPE kinds
// without a window or chunk (as Gemma 3 scales only its global layers), else every RoPE kind.
// longrope:FACTOR gets per-pair long factors seeded from YaRN at FACTOR (theta_i / yarn(theta_i),
// the seed of LongRoPE's search) and short factors of 1. UserError where a target does not rotate.
std::vector<std::string> rope_scaling_overrides(const std::string& spec,
                                                const config::ModelConfig& m, int64_t original_len);
// The overrides of `spec` for the trained run RUN_DIR (its config.yaml's model); none for an
// empty spec. UserError "RUN_DIR: ..." for a spec the run cannot take.
std::vector<std::string> run_rope_scaling_overrides(const std::string& run_dir,
                                                    const std::string& spec);
// Whether a model has RoPE somewhere (model.position, or a layout kind).
bool has_rope(const config::ModelConfig& m);
// The file name part of a spec: "yarn:4" -> "rope-yarn-4", "linear:8@global" ->
// "rope-linear-8-global".
std::string rope_scaling_tag(const std::string& spec);
std::string format_eval(const EvalReport& r);

}  // namespace ropelab::eval
