#!/usr/bin/env bash
# Runs every libFuzzer target (tests/fuzz/NAME_fuzz.cc) for SECONDS (default 60) from its
# committed corpus (tests/fuzz/corpus/NAME/), and prints one line per target: executions,
# seconds, corpus size, result. Exits 1 when any target found something (a crash, an
# uncaught exception, a sanitizer report, a leak, a hang over 10 s, memory over 2 GB); the
# input is kept under build-asan/fuzz/NAME/ and named in the output with its log's tail.
#
#   scripts/fuzz.sh [SECONDS] [NAME...]     e.g. scripts/fuzz.sh 30 safetensors
#
# GLINT_NO_BUILD=1 uses build-asan/ as it is (else scripts/build.sh --sanitize first);
# GLINT_FUZZ_JOBS targets at once (default 2, one per core). New corpus units go to
# build-asan/fuzz/NAME/corpus, never into the repository: copy the ones worth keeping
# (a regression input, named regression-<what>) into tests/fuzz/corpus/NAME/ by hand.
# Reproduce a finding: build-asan/NAME_fuzz FILE (with scripts/sanitize-env.sh sourced).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD

seconds=${1:-60}
shift || true
[[ $seconds =~ ^[0-9]+$ ]] || { echo "fuzz.sh: SECONDS must be a whole number, got '$seconds'" >&2; exit 2; }
build=${GLINT_BUILD_DIR:-build-asan}
jobs=${GLINT_FUZZ_JOBS:-2}

if [ "${GLINT_NO_BUILD:-0}" != 1 ]; then
  mkdir -p "$build"
  GLINT_BUILD_DIR=$build ./scripts/build.sh --sanitize >"$build/fuzz-build.log" 2>&1 || {
    tail -40 "$build/fuzz-build.log"; echo "fuzz.sh: the sanitized build failed ($build/fuzz-build.log)" >&2; exit 1; }
fi
source scripts/sanitize-env.sh

targets=("$@")
if [ ${#targets[@]} = 0 ]; then
  for src in tests/fuzz/*_fuzz.cc; do
    name=$(basename "$src" .cc)
    targets+=("${name%_fuzz}")
  done
fi
for t in "${targets[@]}"; do
  [ -x "$build/${t}_fuzz" ] || { echo "fuzz.sh: no $build/${t}_fuzz (is it tests/fuzz/${t}_fuzz.cc?)" >&2; exit 2; }
done

# One target: its own work directory; libFuzzer writes new units into the first corpus
# directory only, so the committed one (second) is read, never written.
run_one() {
  local t=$1 work=$build/fuzz/$1
  rm -rf "$work"
  mkdir -p "$work/corpus" "$work/found"
  local dict=()
  [ -f "tests/fuzz/dict/$t.dict" ] && dict=(-dict="tests/fuzz/dict/$t.dict")
  local start=$SECONDS rc=0
  "$build/${t}_fuzz" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 -malloc_limit_mb=2048 \
    -detect_leaks=1 -print_final_stats=1 -artifact_prefix="$work/found/" "${dict[@]}" \
    "$work/corpus" "tests/fuzz/corpus/$t" >"$work/log" 2>&1 || rc=$?
  local took=$((SECONDS - start))
  local execs corpus
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -1)
  corpus=$(($(find "$work/corpus" "tests/fuzz/corpus/$t" -type f | wc -l)))
  local found
  found=$(find "$work/found" -type f | head -1)
  local result=ok
  if [ $rc != 0 ] || [ -n "$found" ]; then
    result="FOUND (exit $rc): ${found:-see $work/log}"
  fi
  printf '%-18s %12s execs %5ss  corpus %5s  %s\n' "$t" "${execs:-?}" "$took" "$corpus" "$result" >"$work/summary"
  if [ "$result" != ok ]; then
    # The report's first lines (what and where), each cut to 240 characters.
    local from
    from=$(grep -n -m1 -E '^==[0-9]+==|runtime error|terminate called|fuzz: broken contract|^ALARM|out-of-memory|leak' \
           "$work/log" | cut -d: -f1 || true)
    { echo "---- $t: $work/log from line ${from:-1}"; tail -n +"${from:-1}" "$work/log" | head -30 | cut -c1-240
      echo "----"; } >>"$work/summary"
    return 1
  fi
}

echo "fuzz.sh: ${#targets[@]} targets, ${seconds}s each, $jobs at once ($build/fuzz/NAME/log)"
printf '%-18s %12s %11s  %12s  %s\n' target executions seconds "corpus files" result
failed=0
running=0
for t in "${targets[@]}"; do
  if [ $running -ge "$jobs" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  ( rc=0; run_one "$t" || rc=$?; cat "$build/fuzz/$t/summary"; exit $rc ) &
  running=$((running + 1))
done
while [ $running -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
if [ $failed != 0 ]; then
  echo "fuzz.sh: a target found something (above)"
  exit 1
fi
echo "fuzz.sh: nothing found"
