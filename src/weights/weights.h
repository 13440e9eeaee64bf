// Model weights by name: a trained run's model rebuilt from its checkpoint, weights read from a
// run, a checkpoint or an exported weights.h5, a pretrained backbone loaded into a model with
// another head (the base of fine-tuning). Writing weights out is eval/export.h.

#pragma once
#include <map>
#include <string>
#include <vector>

#include "config/schema.h"
#include "model/model.h"

namespace ropelab::weights {

using StateDict = std::map<std::string, torch::Tensor>;  // dotted name -> tensor

// Every parameter and buffer of `m` by its dotted name.
StateDict state_dict(torch::nn::Module& m);

// A trained run's model: its config, the checkpoint used, and the model loaded from it.
struct RunModel {
  config::Config config;
  std::string run_dir, checkpoint;
  int64_t vocab = 0;
  int64_t source_vocab = 0;  // separate source vocabulary (0: shared)
  int64_t step = 0;
  model::Model model{nullptr};
};
// `source` is a run directory (its newest checkpoint, or with `best` its best one) or a
// checkpoint directory. UserError for anything else.
// `overrides` ("model.position.scaling.type=yarn", ...) change the run's config before the model
// is built (evaluation-time settings that add no parameters); they get the config's checks.
RunModel load_run_model(const std::string& source, bool best = false,
                        const std::vector<std::string>& overrides = {});

// Weights from a run directory, a checkpoint directory or an exported weights.h5.
StateDict read_weights(const std::string& source);

// What loading by name did: keys loaded, keys of the target nobody supplied, keys of the
// source nobody wanted.
struct KeyReport {
  std::vector<std::string> loaded, missing, unexpected;
  std::string str() const;  // multi-line summary naming the missing and unexpected keys
};
// Loads every "backbone." tensor of `source` into `target` by name; its head stays as it is.
// A backbone tensor whose shape differs is a UserError naming the key and both shapes.
KeyReport load_backbone(model::ModelImpl& target, const StateDict& source,
                        const std::string& source_name);

// Fine-tuning from `task.init_from` (a run directory, a checkpoint or a weights.h5).
struct Pretrained {
  config::Config config;  // the pretrained run's resolved config
  StateDict weights;      // its weights (a run directory: its best checkpoint, else its newest)
  int64_t vocab = 0;
  std::string checkpoint;  // the checkpoint read ("" for a weights.h5)
  int64_t step = -1;       // its step (-1: unknown, a weights.h5)
};
Pretrained read_pretrained(const std::string& source);
// With task.init_from set and no tokenizer chosen (data.tokenizer.model empty), the pretrained
// run's tokenizer: the fine-tuning data is then tokenized with the vocabulary the backbone
// learned. Called before the data is prepared.
void use_pretrained_tokenizer(config::Config& c, const Pretrained& p);
// A position change on task.init_from: a key of model.position or model.layout (the base, the
// scaling method, the rotary width, NoPE layers, layout kinds, windows, chunks, query
// temperatures, or no positions at all: DroPE) whose value differs from the pretrained run's.
// `before`/`after` are flow YAML, "(absent)" where the key does not exist on that side.
struct PositionChange {
  std::string key, before, after;
};
// Whether a model key is a position key (may change on task.init_from).
bool is_position_key(const std::string& key);
// The position changes of `c` against `p`, in key order. Any other model key that differs (the
// dropouts and init_std aside) is a UserError naming every such key. A position change that adds
// a backbone tensor the pretrained model lacks (or changes one's shape) is a UserError naming
// the change and the tensor: such a change has no stated initialisation. Checked before any
// data is prepared.
std::vector<PositionChange> check_pretrained_architecture(const config::Config& c,
                                                          const Pretrained& p);
// The changes in a few words for logs and tables: "yarn x4.0", "base 10000.0 -> 500000.0",
// "type rope -> none" (a new family's or method's own keys are left to init_from.json); "" for
// none.
std::string describe_changes(const std::vector<PositionChange>& changes);
// Loads the backbone of `p` into `m` by name, after a check of the vocabulary size (call
// check_pretrained_architecture first).
KeyReport init_from_pretrained(model::ModelImpl& m, const config::Config& c, int64_t vocab,
                               const Pretrained& p);

}  // namespace ropelab::weights
