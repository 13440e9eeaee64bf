#!/usr/bin/env bash
# Formats the C++ sources with clang-format (--check: report, change nothing, fail if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files 'src/*.cpp' 'src/*.h' 'tests/*.cpp' 'tests/*.h' 2>/dev/null || true)
((${#files[@]})) || exit 0
if ! command -v clang-format >/dev/null; then
  echo "format: clang-format not installed, skipping" >&2
  exit 0
fi
if [[ "${1:-}" == "--check" ]]; then
  clang-format --dry-run --Werror "${files[@]}"
  echo "format: ${#files[@]} files OK" >&2
else
  clang-format -i "${files[@]}"
fi
