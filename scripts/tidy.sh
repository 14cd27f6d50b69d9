#!/usr/bin/env bash
# clang-tidy over every source file of src/, with the repository's .clang-tidy, at zero
# warnings (WarningsAsErrors there). Needs build/compile_commands.json (scripts/build.sh).
# Usage: tidy.sh [build-dir]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:-build}
[ -f "$dir/compile_commands.json" ] || { echo "tidy: no $dir/compile_commands.json (run scripts/build.sh first)"; exit 1; }
log=$(mktemp /tmp/sluice-tidy.XXXXXX)
trap 'rm -f "$log"' EXIT
start=$(date +%s)
# A unity build (scripts/build.sh) compiles src/ in batches: its translation units are the
# batches, whose files the header filter (src/) reports on. GCC-only warning flags are no
# finding.
if run-clang-tidy -p "$dir" -quiet -j "$(nproc)" -extra-arg=-Wno-unknown-warning-option \
     "$(pwd)/src/.*\.cpp$" "/CMakeFiles/sluice(_core)?\.dir/Unity/unity_[0-9]+_cxx\.cxx$" >"$log" 2>&1; then
  echo "tidy: src/ clean in $(( $(date +%s) - start ))s"
else
  grep -E "(warning|error):" "$log" | sed 's/\x1b\[[0-9;]*m//g' | sort -u
  echo "tidy: findings above (.clang-tidy); fix them, or say in .clang-tidy why a check is off"
  exit 1
fi
