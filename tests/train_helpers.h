// Training helpers shared by the unit and gpu tiers: the bit-exact resume check.
#pragma once
#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "config/schema.h"
#include "helpers.h"
#include "train/trainer.h"
#include "weights/checkpoint.h"
#include "weights/weights.h"

namespace ropelab::test {

// Trains make("straight") to the end (step `to`), then a run "resumed" that starts from only the
// straight run's checkpoint at step `from`, and expects the two final models to be equal bit for
// bit. `make(name)` returns the config of run `name` in d/runs.
template <class Make>
void expect_resume_is_bit_exact(const TempDir& d, Make make, int64_t from, int64_t to) {
  namespace stdfs = std::filesystem;
  train::train(make("straight"));
  std::string ra = d.file("runs/straight"), rb = d.file("runs/resumed");
  stdfs::create_directories(rb + "/checkpoints");
  stdfs::copy(ra + "/config.yaml", rb + "/config.yaml");
  auto from_dir = weights::checkpoint_for_step(ra, from);
  ASSERT_TRUE(from_dir) << "no checkpoint at step " << from << " in " << ra;
  stdfs::copy(*from_dir, rb + "/checkpoints/" + stdfs::path(*from_dir).filename().string(),
              stdfs::copy_options::recursive);
  train::train(make("resumed"));
  auto ca = weights::checkpoint_for_step(ra, to), cb = weights::checkpoint_for_step(rb, to);
  ASSERT_TRUE(ca && cb);
  auto ma = weights::load_run_model(*ca).model, mb = weights::load_run_model(*cb).model;
  auto pa = ma->named_parameters(), pb = mb->named_parameters();
  for (const auto& p : pa)
    EXPECT_TRUE(torch::equal(p.value(), pb[p.key()])) << p.key() << " differs after resume";
}

}  // namespace ropelab::test
