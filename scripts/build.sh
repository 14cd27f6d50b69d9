#!/usr/bin/env bash
# Configures and builds Sluice. Usage: build.sh [release|asan] [cmake --build args...]
#   release  -> build/          (Release, tests included)
#   asan     -> build-asan/     (Debug with AddressSanitizer + UndefinedBehaviorSanitizer)
set -euo pipefail
cd "$(dirname "$0")/.."
kind=${1:-release}
shift || true
case "$kind" in
  release) dir=build; flags=(-DCMAKE_BUILD_TYPE=Release -DBUILD_TESTING=ON) ;;
  asan)    dir=build-asan; flags=(-DCMAKE_BUILD_TYPE=Debug -DSLUICE_SANITIZE=ON -DBUILD_TESTING=ON) ;;
  *) echo "usage: $0 [release|asan]" >&2; exit 2 ;;
esac
cmake -S . -B "$dir" "${flags[@]}" >/dev/null
cmake --build "$dir" -j "$(nproc)" "$@"
