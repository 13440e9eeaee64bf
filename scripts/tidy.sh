#!/usr/bin/env bash
# clang-tidy over ropelab's sources (or the files given). Uses a configure-only build tree
# without precompiled headers (clang cannot read GCC's PCH) or unity batches (clang-tidy looks a
# file up by its own compile command), build-tidy/.
set -euo pipefail
cd "$(dirname "$0")/.."
cmake -S . -B build-tidy -G Ninja -DCMAKE_DISABLE_PRECOMPILE_HEADERS=ON -DROPELAB_UNITY_BUILD=OFF -DCMAKE_EXPORT_COMPILE_COMMANDS=ON >/dev/null
if (($#)); then files=("$@"); else mapfile -t files < <(find src -name '*.cpp' | sort); fi
status=0
for f in "${files[@]}"; do
  clang-tidy --quiet -p build-tidy "$f" 2>/dev/null | grep -E "warning:|error:" && status=1
done
exit $status
