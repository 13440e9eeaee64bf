#!/usr/bin/env bash
# The README's test command: installs what is missing, builds, and runs the whole test suite
# (unit, golden and end-to-end tiers). Extra arguments go to ctest, e.g. `-L unit`.
set -euo pipefail
cd "$(dirname "$0")/.."
ROPELAB_PRESET="${ROPELAB_PRESET:-ci}" bash scripts/setup.sh
bash scripts/format.sh --check
ctest --test-dir build --output-on-failure -j 2 --timeout 1200 "$@"
