// gtest main for ropelab's test binaries: applies the same BLAS fix as `ropelab` itself, so
// tests measure what users run, and installs the same crash report, so that a test binary that
// crashes names the signal on stderr and leaves its backtrace in $TMPDIR/ropelab-crash-<pid>.txt.
#include <gtest/gtest.h>

#include "util/log.h"
#include "util/platform.h"
#include "util/signals.h"

int main(int argc, char** argv) {
  ropelab::signals::install_crash_report(argv);
  ropelab::platform::ensure_fast_blas(argc, argv);
  ropelab::platform::keep_freed_memory();
  ropelab::log::init("warn");
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
