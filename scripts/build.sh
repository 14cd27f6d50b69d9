#!/usr/bin/env bash
# Configures and builds Sluice. Usage: build.sh [release|asan] [cmake --build args...]
#   release  -> build/          (Release, tests included)
#   asan     -> build-asan/     (Debug, -g1, with AddressSanitizer + UndefinedBehaviorSanitizer)
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
shift || true
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON) ;;
  # -g1: the line tables the reports' stack traces need, without full debug info (which costs
  # compile and link time; the generated code is the same). -O0 stays: at -O1 the instrumented
  # coroutine code compiles about twice as slowly.
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g1
                                  -DSLUICE_SANITIZE=ON -DBUILD_TESTING=ON) ;;
  *) echo "usage: $0 [release|asan]" >&2; exit 2 ;;
esac
# A unity build: each target's files compiled in batches of 8, one translation unit each, so the
# Boost, Beast and Asio headers are parsed and their templates compiled once per batch, not per
# file (about 2.7 times less CPU, release or sanitized). A build dir of your own, for quick
# incremental builds, can leave it off.
cmake -S . -B "$dir" "${flags[@]}" -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build "$dir" -j "$(nproc)" "$@"
