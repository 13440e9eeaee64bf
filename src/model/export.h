// `ropelab export`: every parameter and buffer of a trained model, under its module path, in
// an HDF5 file a Python user reads with h5py:
//
//   /                       attrs: format="ropelab.weights", format_version=1, config (the
//                           resolved run YAML), arch, position, attention, vocab_size, step
//   /<module path>          float32 N-D dataset per tensor, e.g.
//                           /decoder/layers/0/self_attn/q_proj/weight  [D, D]
//
//   import h5py, torch
//   f = h5py.File("weights.h5"); sd = {}
//   f.visititems(lambda k, v: sd.__setitem__(k.replace("/", "."), torch.tensor(v[()]))
//                if isinstance(v, h5py.Dataset) else None)
#pragma once
#include <string>

namespace ropelab::model {

// `source` is a run directory (its newest checkpoint is used) or a checkpoint directory.
// Returns a one-line summary.
std::string export_weights(const std::string& source, const std::string& out_path);

}  // namespace ropelab::model
