#!/usr/bin/env bash
# Formats the C++ sources with clang-format (--check: report, change nothing, fail if needed).
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(find src tests -name '*.cpp' -o -name '*.h' | sort)
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
