#!/usr/bin/env bash
# Builds bench/store_memory.cpp (Release, in build-bench/) and runs it: memory per identifier
# held by the embedded store, for 1, 3 and 10 tiers, and the max_keys eviction bound.
#
# Usage: bench/store_memory.sh [N]      (default N = 100000 identifiers)
#   env: BUILD_DIR=build-bench  JOBS=2
# Output also goes to bench/results/store_memory.txt.
set -euo pipefail

SCRIPT_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO_ROOT=$(cd "$SCRIPT_DIR/.." && pwd)
cd "$REPO_ROOT"

N=${1:-100000}
BUILD_DIR=${BUILD_DIR:-build-bench}
JOBS=${JOBS:-2}

cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=Release -DSLUICE_BUILD_BENCH=ON -DBUILD_TESTING=OFF >&2
cmake --build "$BUILD_DIR" -j"$JOBS" --target sluice_store_memory >&2

mkdir -p "$SCRIPT_DIR/results"
"$BUILD_DIR/bench/sluice_store_memory" "$N" | tee "$SCRIPT_DIR/results/store_memory.txt.tmp"
mv "$SCRIPT_DIR/results/store_memory.txt.tmp" "$SCRIPT_DIR/results/store_memory.txt"
