#!/usr/bin/env bash
# CI's sanitizer stage: builds build-asan/ (scripts/build.sh --sanitize: clang,
# AddressSanitizer + UndefinedBehaviorSanitizer, LeakSanitizer at exit), runs the tests
# labelled `unit` there (tests/labels.cmake), then every fuzz target for 30 s
# (scripts/fuzz.sh 30). Prints how long each part took. Options of the sanitizers:
# scripts/sanitize-env.sh.
#
# The tests run inside two glint_tests processes (gtest shards), not one process per
# test as ctest runs them: under ASan each process start (the instrumented binary,
# libtorch, LeakSanitizer's scan at exit) costs seconds, and 400 of them would take the
# stage far past its 15 minutes on two cores. A sanitizer report ends its shard and the
# stage.
#
# The other labels run unsanitised in the README's test command: their work happens in
# several processes started through `glint launch`, mpirun or simulated nodes (multirank,
# multinode: the single-process code plus c10d and the launcher), trains to a target
# (convergence: minutes under ASan, through the same code as the unit tests) or needs
# Chromium (browser). Of the unit tests, these are left out too:
# - MergeStreaming.PeakMemoryDoesNotGrowWithTheNumberOfLayers: it measures the process's
#   RSS, which ASan's quarantine of freed blocks inflates;
# - Usage.EveryOptionOfEveryCommandHasADescription: `glint CMD --help` of every command,
#   a process start each, minutes under ASan for code no other test misses.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${GLINT_BUILD_DIR:-build-asan}
export GLINT_BUILD_DIR=$build

excluded=(MergeStreaming.PeakMemoryDoesNotGrowWithTheNumberOfLayers
          Usage.EveryOptionOfEveryCommandHasADescription)

t0=$SECONDS
mkdir -p "$build"
./scripts/build.sh --sanitize >"$build/sanitize-build.log" 2>&1 || {
  tail -40 "$build/sanitize-build.log"; echo "sanitize-check.sh: the sanitized build failed ($build/sanitize-build.log)" >&2; exit 1; }
t1=$SECONDS
echo "sanitize-check.sh: build $build: $((t1 - t0)) s"

source scripts/sanitize-env.sh
# The unit tests' names, from the gtest filters of ctest's unit entries (one per suite,
# tests/discover.cmake), less the exclusions above, become one gtest filter.
filter=$(cd "$build" && ctest --show-only=json-v1 -L '^unit$' | python3 -c '
import json, sys
excluded = set(sys.argv[1:])
names = []
for test in json.load(sys.stdin)["tests"]:
    for arg in test["command"]:
        if arg.startswith("--gtest_filter="):
            names += [n for n in arg[len("--gtest_filter="):].split(":") if n not in excluded]
print(":".join(names))' "${excluded[@]}")
[ -n "$filter" ] || { echo "sanitize-check.sh: ctest lists no unit tests in $build" >&2; exit 1; }
echo "sanitize-check.sh: $(echo "$filter" | tr ':' '\n' | wc -l) unit tests"
pids=()
for shard in 0 1; do
  (cd "$build" && GTEST_TOTAL_SHARDS=2 GTEST_SHARD_INDEX=$shard timeout 1200 ./glint_tests --gtest_filter="$filter" \
     --gtest_brief=1 >"tests-asan.$shard.log" 2>&1) &
  pids+=($!)
done
failed=0
for shard in 0 1; do
  if ! wait "${pids[$shard]}"; then
    failed=1
    echo "---- shard $shard failed: $build/tests-asan.$shard.log (the last 60 lines)"
    tail -60 "$build/tests-asan.$shard.log" | cut -c1-240
  fi
done
[ $failed = 0 ] || { echo "sanitize-check.sh: the sanitized tests failed" >&2; exit 1; }
grep -h "tests ran\|PASSED\|SKIPPED" "$build"/tests-asan.*.log || true
t2=$SECONDS
echo "sanitize-check.sh: single-process tests under ASan + UBSan: $((t2 - t1)) s"

GLINT_NO_BUILD=1 ./scripts/fuzz.sh 30
t3=$SECONDS
echo "sanitize-check.sh: fuzzing, 30 s per target: $((t3 - t2)) s"
echo "sanitize-check.sh: total $((t3 - t0)) s"
