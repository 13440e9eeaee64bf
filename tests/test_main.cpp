// gtest main for ropelab's test binaries: applies the same BLAS fix as `ropelab` itself, so
// tests measure what users run.
#include <gtest/gtest.h>

#include "util/log.h"
#include "util/platform.h"

int main(int argc, char** argv) {
  ropelab::platform::ensure_fast_blas(argc, argv);
  ropelab::platform::keep_freed_memory();
  ropelab::log::init("warn");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
