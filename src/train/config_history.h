// A run's resolved config is part of its identity. On resume, each key that differs from the
// run's config.yaml is either refused or accepted and recorded:
//   - the keys that do not change what is learned may change: more train.max_steps,
//     train.eval_every, train.log_every, train.checkpoint_every, train.keep_last, run.threads,
//     run.device;
//   - `train --allow-config-change` accepts any change (a checkpoint that cannot load under the
//     new config is still refused when it is loaded);
//   - anything else is refused (exit 2), listing each changed key with its old and new value.
// Accepted changes are appended to <run>/config_history.yaml (step, key, old, new, why, time),
// logged to train.log, and marked by `compare`; config.yaml then holds the newest values.
// run.name and run.out_dir locate the run and are not compared.
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace ropelab::train {

struct ConfigChange {
  std::string key, old_value, new_value;
  bool may_change = false;  // one of the keys that may change on resume
  std::string str() const;  // "train.max_steps: 400 -> 800"
};

// The keys that may change on resume, for messages: "more train.max_steps, train.eval_every,
// ... and run.device".
std::string mutable_keys();

// Every key whose value differs (keys are flat, as config::flat_keys gives them).
std::vector<ConfigChange> config_changes(const std::map<std::string, std::string>& before,
                                         const std::map<std::string, std::string>& after);

// Appends `changes` at `step` to <run_dir>/config_history.yaml (rewritten atomically); `why`:
// "may change on resume" or "--allow-config-change".
void record_config_changes(const std::string& run_dir, int64_t step,
                           const std::vector<ConfigChange>& changes, const std::string& why);

// What <run_dir>/config_history.yaml records, one line per change ("step 400: train.max_steps:
// 400 -> 800"); empty without the file. A damaged file: UserError naming it.
std::vector<std::string> read_config_history(const std::string& run_dir);

}  // namespace ropelab::train
