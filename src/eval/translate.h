// `ropelab translate`: raw text in, detokenised translations out, one line per input line, in
// input order. The run's own tokenizer and decoding settings (task.beam, task.lenpen, ...)
// unless overridden.
#pragma once
#include <string>
#include <vector>

namespace ropelab::eval {

struct TranslateOptions {
  int64_t beam = 0;          // 0 = the run's task.beam
  double lenpen = -1;        // < 0 = the run's task.lenpen
  int64_t batch_tokens = 0;  // source tokens per batch (times the beam); 0 = 4096
  bool use_best = true;      // the best checkpoint (by the task's selection metric)
  bool use_cache = true;     // false: recompute every prefix (for measurements)
  bool progress = true;
};

// `source` is a run directory, an averaged run (`ropelab average`) or a checkpoint directory.
// UserError if it is not a translation model.
std::vector<std::string> translate_lines(const std::string& source,
                                         const std::vector<std::string>& lines,
                                         const TranslateOptions& o);

}  // namespace ropelab::eval
