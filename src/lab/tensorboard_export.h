// `ropelab export-tensorboard`: a run's TensorBoard event files written from its files, for runs
// trained without them (before run.tensorboard, or with it off) or whose files were lost. What
// they hold: run/tensorboard.h.
#pragma once
#include <cstdint>
#include <string>

namespace ropelab::lab {

struct ExportSummary {
  std::string dir;                   // RUN/tensorboard
  int64_t scalars = 0, results = 0;  // scalar events; result files (eval-*.json, probe.json)
  bool replaced = false;             // RUN/tensorboard existed and was replaced
};

// Writes RUN/tensorboard anew from metrics.h5, config.yaml, eval-*.json and probe.json, holding
// the run's lock (a run being trained writes its own; UserError naming its holder). The new
// files are written beside the old ones and swapped in whole: a failure leaves the old ones.
ExportSummary export_tensorboard(const std::string& run_dir);

}  // namespace ropelab::lab
