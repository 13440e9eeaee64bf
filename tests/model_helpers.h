// Model-building helpers shared by the unit and golden tests.
#pragma once
#include <stdexcept>
#include <string>

#include <gtest/gtest.h>

#include "config/schema.h"
#include "util/sync_hook.h"

namespace ropelab::test {

// The position config a name selects, with its defaults (the config loader's own mapping).
inline config::PositionConfig position(const std::string& name) {
  config::PositionConfig p;
  if (!config::select_variant(p.opts, name)) throw std::invalid_argument("no position " + name);
  // What loading a config fills in from task.seq_len (the tests' lengths are at most 32).
  if (auto* cope = std::get_if<config::CopeConfig>(&p.opts)) cope->npos_max = 32;
  return p;
}

// A small model config: d=16, 2 heads, 2 layers, FFN 32, no dropout, pre-LN.
inline config::ModelConfig tiny_model(const std::string& arch, const std::string& pos,
                                      const std::string& kernel = "softmax") {
  config::ModelConfig c;
  c.arch = config::enum_from<config::Arch>(arch);
  c.d_model = 16;
  c.n_heads = 2;
  c.n_layers = 2;
  c.d_ff = 32;
  c.dropout = 0.0;
  c.norm = config::Norm::kPre;
  c.position = position(pos);
  c.attention.kernel = config::enum_from<config::AttentionKernel>(kernel);
  return c;
}

// Runs `step` (a task's forward and backward on one batch) and checks that it read nothing back
// to the host: on a GPU every such read stalls the host (util/sync_hook.h).
template <class Step>
void expect_no_host_sync(const std::string& what, Step&& step) {
  util::HostSyncCounter syncs;
  step();
  EXPECT_EQ(syncs.count(), 0) << what << ": host syncs in forward/backward: " << syncs.report();
}

}  // namespace ropelab::test
