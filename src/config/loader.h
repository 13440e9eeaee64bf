// Strict YAML configuration loading.
//
// - unknown keys are errors with a "did you mean" and the list of allowed keys;
// - duplicate keys are errors (yaml-cpp 0.7 silently keeps the last one);
// - wrong types, missing required keys, out-of-range values and cross-field problems are
//   errors;
// - every problem names file:line:col and the dotted key path, and all problems of a load are
//   reported together (ConfigError, exit code 2 in the CLI);
// - `inherit: other.yaml` (or a list) layers a file over others; `key.path=value` overrides
//   are applied last, with the same checks.
#pragma once
#include <map>
#include <string>
#include <vector>

#include "config/schema.h"
#include "util/error.h"

namespace ropelab::config {

struct Loc {
  std::string file;
  int line = 0;  // 1-based; 0 = the whole file / an override argument
  int col = 0;
  std::string str() const;
};

struct Problem {
  Loc loc;
  std::string key;  // dotted path, may be empty
  std::string message;
  // The settings are consistent but describe a run this model cannot do (a sequence longer
  // than a learned position table): an experiment reports such a combination as n/a.
  bool not_applicable = false;
  std::string str() const;  // "file:line:col: key: message"
};

class ConfigError : public UserError {
 public:
  explicit ConfigError(std::vector<Problem> problems);
  const std::vector<Problem>& problems() const { return problems_; }

 private:
  std::vector<Problem> problems_;
};

// A dotted override "model.position.type=rope" and where it came from (for messages).
struct Override {
  std::string text;
  std::string origin = "command line";
};
std::vector<Override> overrides_from_args(const std::vector<std::string>& args);

// Loads, layers, overrides and validates a run config. Throws ConfigError listing every problem.
Config load_config(const std::string& path, const std::vector<Override>& overrides = {});
// The same with no file: ropelab's defaults under `overrides` (an imported checkpoint's mapping,
// the bench's run.threads and run.device), every check applied.
Config load_overrides(const std::vector<Override>& overrides);

// Loads an ablation experiment file (paths in it are made relative to the file's directory)
// and checks every variant's resolved config, so a typo fails before any training starts.
Experiment load_experiment(const std::string& path);
// Resolves one variant of an experiment into its run config.
Config experiment_variant_config(const Experiment& exp, const Variant& variant);
// The runs of an experiment: one per variant, or with a sweep (settings and/or seeds) one per
// variant x setting x seed, named "<task>.<variant>.<setting>.seed<N>" (absent parts left out).
// A combination whose only problems are not_applicable ones (a learned position table shorter
// than the task's length) is kept with its reason and no config: ablate reports it as n/a.
// Any other problem of a combination throws ConfigError naming the run.
struct ExperimentRun {
  std::string task;              // "" without tasks
  std::string variant, setting;  // setting: "" without settings
  int64_t seed = 0;              // 0 without seeds
  std::string name;              // the run directory's name
  std::string not_applicable;    // non-empty: why this run cannot exist (config left default)
  Config config;
};
std::vector<ExperimentRun> experiment_runs(const Experiment& exp);
// The variants in training order: each stage after the variant it starts from (`from`), else in
// file order. Shorter than `variants` where the stages form a cycle or name an unknown variant.
std::vector<const Variant*> stage_order(const std::vector<Variant>& variants);

// Fully resolved YAML (every key, defaults included). Loading it gives the same Config.
std::string dump(const Config& c);
std::string dump(const Experiment& e);
// Every key of a resolved config, dotted ("model.position.type"), with its value as flow YAML
// (for "what differs" messages).
std::map<std::string, std::string> flat_keys(const Config& c);
// Every key with its default and help text, as commented YAML.
std::string schema();

// Cross-field checks (heads divide d_model, RoPE needs an even rotary dim, ...). Returns
// problems as "key: message" with no location; load_config adds locations.
std::vector<Problem> validate(const Config& c);
// auto, cpu, cuda or cuda:N (run.device).
bool valid_device(const std::string& d);

}  // namespace ropelab::config
