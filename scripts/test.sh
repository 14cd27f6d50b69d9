#!/usr/bin/env bash
# One command: install dependencies, build, and run every test (ctest).
# Usage: test.sh [release|asan]   (default release)
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
bash scripts/install-deps.sh
bash scripts/build.sh "$kind"
dir=build; [ "$kind" = asan ] && dir=build-asan
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
# Twice as many tests as cores: most of them wait (on sockets, child processes, Redis), not compute.
ctest --test-dir "$dir" --output-on-failure -j "$(( 2 * $(nproc) ))" --timeout 300
