#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the whole test suite
# (unit, golden, sanitize, end-to-end and fuzz tiers). Extra arguments go to ctest, e.g.
# `-L unit`. The fuzz tier runs a fixed seed and input count per target (tests/CMakeLists.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh  # the same build as the main job's: only what changed is compiled
# Warning-free code: any compiler warning in our sources fails the run (CI builds from scratch,
# so every file is compiled and checked).
if grep -E "^($PWD/)?(src|tests)/[^:]+:[0-9]+:[0-9]+: warning:" build/last-build.log; then
  echo "test: the build printed compiler warnings in ropelab's code (above)" >&2
  exit 1
fi
bash scripts/format.sh --check
ctest --test-dir build --output-on-failure -j 2 --timeout 1200 "$@"
