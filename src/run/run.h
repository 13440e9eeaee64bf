// A run, opened once for its use: the one place that assembles what every command needs from a
// config, in torchtitan's manner of building each component from its typed config.
//
//   config ─► threads (dist/threads.h) ─► device ─► data plan (resolved once) ─► data
//          ─► task ─► model (seeded; a pretrained backbone, or a trained run's checkpoint)
//          ─► on the device
//
// Two ways in: a new run from a config (train), or a trained run from its directory or a
// checkpoint (eval, translate, probe). The uses differ only in what they open: whether the
// data is prepared (training), only opened (evaluation), or not read (a probe makes its own).
// This layer sits above weights/ (checkpoints, pretrained weights) and below train/, eval/ and
// lab/, which are its uses; the commands (cli/) call those.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "config/schema.h"
#include "data/prepare.h"
#include "model/model.h"
#include "tasks/task.h"
#include "weights/weights.h"

namespace ropelab::run {

// What the use reads of the data.
enum class DataUse {
  kPrepare,  // prepare what is out of date (a data-parallel run: rank 0 prepares, the rest wait)
  kOpen,     // open what exists (UserError with a HINT if it was never prepared)
  kNone,     // no data: the vocabulary comes from the checkpoint (a probe generates its own), or
             // for a new run from data.tokenizer.vocab_size (the bench's synthetic batches)
};

struct Run {
  config::Config config;  // as used (a pretrained run's tokenizer chosen; evaluation overrides)
  int threads = 1;
  torch::Device device = torch::kCPU;
  data::Plan plan;                 // config.data resolved once
  std::optional<data::Data> data;  // absent with DataUse::kNone
  std::unique_ptr<tasks::Task> task;
  model::Model model{nullptr};  // on `device`
  int64_t vocab = 0, source_vocab = 0;
  // A trained run: its directory, the checkpoint the model was read from, and its step.
  std::string run_dir, checkpoint;
  int64_t step = 0;
  // A new run with task.init_from: what loading the pretrained backbone did (for the log).
  std::string pretrained;
  // ... and what it changed of the pretrained positions (weights/weights.h), with the
  // checkpoint and step it started from.
  std::vector<weights::PositionChange> position_changes;
  std::string pretrained_checkpoint;
  int64_t pretrained_step = -1;
};

// The data plan of a config: its data section resolved against task.seq_len (UserError naming
// the key when the synthetic sources' bounds are exceeded). Every use resolves it here, once.
data::Plan plan_of(const config::Config& c);

// The data of a config prepared (`prepare`): the thread policy, the plan, then whatever is out
// of date; the files are listed in the result.
data::Prepared prepare(const config::Config& c);

// A new run (`train`): the thread policy, the device and determinism, task.init_from's
// architecture check and tokenizer, the plan, the data, the task, and the model, seeded with
// run.seed and given the pretrained backbone, on the device. `before_data` runs after the
// thread policy and device, before any data is read (`train` takes the run directory's lock
// there).
Run open_new(const config::Config& c, DataUse data, const std::function<void()>& before_data = {});

// A trained run (`eval`, `translate`, `probe`): `source` is a run directory (its newest
// checkpoint, or with `best` its best) or a checkpoint directory; `overrides` change its config
// before the model is built (evaluation-time settings, weights/weights.h load_run_model).
// `check` sees the run's config before anything else is opened (a use refusing a run it cannot
// serve says so first).
Run open_trained(const std::string& source, DataUse data, bool best = false,
                 const std::vector<std::string>& overrides = {},
                 const std::function<void(const config::Config&)>& check = {});

}  // namespace ropelab::run
