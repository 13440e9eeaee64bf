#!/usr/bin/env bash
# The README's main job: installs what is missing, builds, prepares the built-in corpus and runs
# the quickstart ablation (five position encodings), ending with the comparison table and the
# paths of its plots. Runs already finished are skipped; interrupted ones resume.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
./build/bin/ropelab ablate experiments/quickstart.yaml "$@"
