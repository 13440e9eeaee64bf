// A run's TensorBoard view: RUN/tensorboard/events.out.tfevents.* (the encoding: util/tfevents.h;
// what is written and how to open it: docs/tensorboard.md).
//
//   train/<series>, valid/<series>   every series of metrics.h5, at its step (train/metrics.h)
//   config                           the resolved config, as text
//   hparams                          every scalar setting of the config, by its dotted key
//   eval/<file>/..., probe/...       the numbers of eval-*.json and probe.json, at the
//                                    checkpoint's step (append_results)
//
// Training writes these as it goes (run.tensorboard, on by default); `ropelab
// export-tensorboard` writes them again from a run's files.
#pragma once
#include <cstdint>
#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "util/tfevents.h"

namespace ropelab::run {

std::string tensorboard_dir(const std::string& run_dir);  // RUN/tensorboard

// The run's settings as hparams: every scalar of the resolved config YAML by its dotted key
// ("model.position.type"); numbers as numbers, booleans as booleans, lists as their YAML text.
std::map<std::string, tb::HParam> hparams_of(const std::string& config_yaml);

// What a run's event files begin with: a session start at `step` (0, or the step a resumed run
// continues from), the config as text (at that step) and the hparams.
void write_run_header(tb::EventWriter& w, const std::string& config_yaml, int64_t step);

// The numbers of a result (eval-*.json, probe.json) as scalars `prefix/key/...` at `step`, and
// the whole result as text under `prefix`. A list's items are named by their "length" or
// "name" field where they have one (eval's length table), else by their index.
void write_results(tb::EventWriter& w, const std::string& prefix, const nlohmann::json& j,
                   int64_t step);

// Appends a result to a run's event files (a new file in RUN/tensorboard), when the run has
// them: a run trained with run.tensorboard off, or before this feature, is left alone.
void append_results(const std::string& run_dir, const std::string& prefix, const nlohmann::json& j,
                    int64_t step);

}  // namespace ropelab::run
