// Weights out of a run: `ropelab average` (the mean of its last checkpoints, as a new run) and
// `ropelab export` (weights.h5).
//
// weights.h5 (`ropelab export`), for h5py users:
//   /                       attrs: format="ropelab.weights", format_version=2, config (the
//                           resolved run YAML), arch, position, attention, task, vocab_size, step
//   /<module path>          float32 N-D dataset per tensor, e.g.
//                           /backbone/decoder/layers/0/self_attn/q_proj/weight  [D, D]
//                           /head/dense/weight (the MLM head's transform)
//
//   import h5py, torch
//   f = h5py.File("weights.h5"); sd = {}
//   f.visititems(lambda k, v: sd.__setitem__(k.replace("/", "."), torch.tensor(v[()]))
//                if isinstance(v, h5py.Dataset) else None)
#pragma once
#include <cstdint>
#include <string>

namespace ropelab::eval {

// `ropelab average`: the parameter-wise mean of a run's last `last` checkpoints (the paper
// evaluates the average of the last 5), written as a new run directory `out` (its config.yaml
// and one model-only checkpoint) that translate, eval and export accept. `out` must not exist;
// it appears complete or not at all. Returns a one-line summary.
std::string average_checkpoints(const std::string& run_dir, int64_t last, const std::string& out);

// `ropelab export`: writes weights.h5 atomically; returns a one-line summary.
std::string export_weights(const std::string& source, const std::string& out_path);

}  // namespace ropelab::eval
