#!/usr/bin/env bash
# Fails when a C++ file differs from what clang-format (the root .clang-format) makes of it,
# or a test name holds ';' (ctest splits the name there, and the test then runs no case).
# Usage: check_format.sh SOURCE_DIR
set -euo pipefail
cd "${1:-$(dirname "$0")/../..}"
formatter=$(command -v clang-format-14 || command -v clang-format || true)
if [ -z "$formatter" ]; then echo "clang-format is not installed (scripts/install-deps.sh installs it)"; exit 1; fi
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' 2>/dev/null || find src tests bench -name '*.[ch]pp')
if "$formatter" --dry-run -Werror "${files[@]}" 2>/tmp/check_format.$$; then
  echo "format: ${#files[@]} files as .clang-format lays them out"; rm -f /tmp/check_format.$$
else
  grep -E '^[^ ].*: (error|warning):' /tmp/check_format.$$ | cut -d: -f1 | sort -u | sed 's/^/unformatted: /'
  echo "run: clang-format -i \$(git ls-files '*.cpp' '*.hpp')"; rm -f /tmp/check_format.$$; exit 1
fi
if bad=$(grep -rnE 'TEST_CASE\("[^"]*;' tests); then
  echo "test names with ';' (ctest would run none of their cases):"; echo "$bad"; exit 1
fi
