#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/fuzz_*.cpp, clang) in build-fuzz/ and runs each
# for N seconds on a scratch copy of its seed corpus, after replaying its saved crash
# reproducers (tests/fuzz/regressions/<target>/). Targets run $(nproc) at a time.
# New crash inputs land in build-fuzz/artifacts/<target>/; the repo is never written.
# Usage: fuzz.sh [seconds-per-target]   (default 20). Exits 1 if any target fails.
#        fuzz.sh --build-only              (.ci/run builds them while the ASan suite runs)
set -euo pipefail
cd "$(dirname "$0")/.."
secs=${1:-20}
start=$(date +%s)
bash scripts/install-deps.sh

work=$(mktemp -d /tmp/sluice-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
CC=clang CXX=clang++ cmake -S . -B build-fuzz -DSLUICE_FUZZ=ON -DBUILD_TESTING=OFF --no-warn-unused-cli >"$work/build.log"
if ! cmake --build build-fuzz -j "$(nproc)" >>"$work/build.log" 2>&1; then
  cat "$work/build.log"
  echo "fuzz: build failed"
  exit 1
fi
echo "fuzz: built in $(($(date +%s) - start))s"
[ "$secs" != --build-only ] || exit 0
echo "fuzz: ${secs}s per target"

export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1}
limits=(-timeout=5 -rss_limit_mb=2048)

# Writes "<target>: <verdict>" to $work/<target>.result.
run_target() {
  local t=$1 bin=build-fuzz/tests/fuzz/$1 dir=$work/$1
  local art=build-fuzz/artifacts/$t/
  mkdir -p "$dir/corpus" "$art"
  if [ -d "tests/fuzz/corpus/$t" ]; then cp -r "tests/fuzz/corpus/$t/." "$dir/corpus/"; fi
  local verdict=""
  local regressions=(tests/fuzz/regressions/"$t"/*)
  if [ -e "${regressions[0]}" ] && ! "$bin" "${limits[@]}" "${regressions[@]}" >"$dir/regressions.log" 2>&1; then
    verdict="FAILED on a saved regression: $(grep -m1 -E 'ERROR|invariant|Assertion|runtime error' "$dir/regressions.log" || true)"
  fi
  local dict=()
  if [ -f "tests/fuzz/$t.dict" ]; then dict=(-dict="tests/fuzz/$t.dict"); fi
  if "$bin" "${limits[@]}" -max_total_time="$secs" -artifact_prefix="$art" "${dict[@]}" "$dir/corpus" >"$dir/fuzz.log" 2>&1; then
    local stats
    stats=$(sed -nE 's/^#([0-9]+)[[:space:]]+DONE[[:space:]]+cov: ([0-9]+) ft: ([0-9]+) corp: ([0-9]+).*/\1 runs, cov \2, ft \3, corpus \4/p' \
      "$dir/fuzz.log")
    [ -n "$verdict" ] || verdict="ok (${stats:-no stats})"
  else
    local found
    found=$(grep -m1 -E 'ERROR|invariant|Assertion|runtime error' "$dir/fuzz.log" || true)
    verdict="${verdict:+$verdict; }FAILED: $found (inputs in $art)"
  fi
  echo "$t: $verdict" >"$dir.result"
  case "$verdict" in ok*) ;; *) tail -n 30 "$dir/regressions.log" "$dir/fuzz.log" >"$dir.tail" 2>/dev/null || true ;; esac
}

targets=()
for src in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$src" .cpp)"); done
running=0
for t in "${targets[@]}"; do
  if ((running >= $(nproc))); then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait

passed=0 failed=0
for t in "${targets[@]}"; do
  if [ -f "$work/$t.tail" ]; then cat "$work/$t.tail"; fi
done
for t in "${targets[@]}"; do
  line=$(cat "$work/$t.result" 2>/dev/null || echo "$t: FAILED: no result")
  echo "$line"
  case "$line" in "$t: ok"*) passed=$((passed + 1)) ;; *) failed=$((failed + 1)) ;; esac
done
echo "fuzz: total $(($(date +%s) - start))s"
echo "fuzz: $passed passed, $failed failed"
[ "$failed" = 0 ]
