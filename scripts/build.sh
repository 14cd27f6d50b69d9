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
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)" "$@"
