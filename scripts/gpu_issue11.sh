#!/usr/bin/env bash
# GPU machine: issue 11's stream checks (carry .device .testmedia). Prints a table; logs in $OUT.
# Builds into build-device/ in the checkout, which a warm machine keeps between calls.
#   scripts/gpu_issue11.sh hazard    while another process loads the GPU (scripts/gpu_load.py): the
#                                    hand-off hazard test RUNS times (default 20; HAZARD_RUNS);
#                                    scripts/cudnn_thread_choice.py (the flake's mechanism: cuDNN
#                                    plans chosen per thread); the tree rebuilt with record_stream
#                                    removed (core/stream_handoff.cpp), where the hazard test must
#                                    fail, then restored; HAZARD_THEN_EQUALITY=1 then runs the
#                                    equality test EQUALITY_RUNS times under the same load.
#   scripts/gpu_issue11.sh equality  under the same load: the prefetch equality test RUNS times
#                                    (default 20), then BENCH_RUNS times (default 0) with cuDNN
#                                    benchmarking on (TELETRON_CUDNN_BENCHMARK=1).
#   scripts/gpu_issue11.sh ctest     every test ([gpu] included) under `ctest -j 8`, RUNS times (default 3;
#                                    one run takes ~5 min there: RUNS=1 per call, CTEST_TIMEOUT 420 s).
set -uo pipefail
part=${1:?usage: gpu_issue11.sh hazard|equality|ctest}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
export TELETRON_BUILD_DIR=${TELETRON_BUILD_DIR:-$root/build-device}
source "$here/device_build.sh" || exit 1
echo "build ${build_s}s" | tee -a "$out/summary.txt"
export TELETRON_TEST_MEDIA=$root/.testmedia
equality='prefetched batches equal synchronous ones on a side stream (CUDA)'
hazard="a handed-off batch's memory is not re-used while the consumer's stream still reads it (CUDA)"

# runs LABEL COUNT BINARY "TEST" [ENV...]: COUNT runs of one test case, one at a time (parallel
# processes time-slice the GPU between contexts and each takes far longer); one table row; each
# run's line (runs.txt) and log ($out/LABEL.log) are written as it goes, so a run cut by the call's
# time limit still leaves them.
runs() {
  local label=$1 count=$2 binary=$3 name=$4; shift 4
  local pass=0 fail=0 skip=0 log=/tmp/tt_run_$label.log
  for i in $(seq 1 "$count"); do
    local t0; t0=$(date +%s)
    (cd "$(dirname "$binary")" && timeout -s KILL 90 env "$@" "$binary" "$name") >"$log" 2>&1
    local rc=$?
    echo "$label run $i: exit $rc in $(( $(date +%s) - t0 )) s" >>"$out/runs.txt"
    { echo "=== run $i exit $rc"; cat "$log"; } >>"$out/$label.log"
    if [ "$rc" = 0 ] && grep -q "All tests passed" "$log"; then pass=$((pass + 1))
    elif [ "$rc" = 4 ]; then skip=$((skip + 1))
    else fail=$((fail + 1)); fi
  done
  echo "| $label | $count | $pass | $fail | $skip |" | tee -a "$out/summary.txt"
  grep -hE "max \|prefetched|FAILED:|with expansion" "$out/$label.log" | sort | uniq -c | sort -rn | head -5 |
    tee -a "$out/summary.txt"
}

case "$part" in
  hazard|equality)
    python3 "$root/scripts/gpu_load.py" 560 >"$out/gpu_load.log" 2>&1 &
    load=$!
    sleep 5
    app="$build/test/teletron_tests_app"
    n=${RUNS:-20}
    { echo "| test case (under load) | runs | passed | failed | skipped |"; echo "|---|---|---|---|---|"; } |
      tee -a "$out/summary.txt"
    if [ "$part" = equality ]; then
      runs equality "$n" "$app" "$equality"
      [ "${BENCH_RUNS:-0}" -gt 0 ] && runs equality_cudnn_benchmark_on "$BENCH_RUNS" "$app" "$equality" \
        TELETRON_CUDNN_BENCHMARK=1
    fi
    if [ "$part" = hazard ]; then
      [ "${HAZARD_RUNS:-$n}" -gt 0 ] && runs hazard "${HAZARD_RUNS:-$n}" "$app" "$hazard"
      timeout 120 python3 "$root/scripts/cudnn_thread_choice.py" 40 2>&1 | tee -a "$out/summary.txt"
      # The same tree with record_stream removed, rebuilt in place (one file), then restored.
      cp core/stream_handoff.cpp /tmp/stream_handoff.cpp.orig
      sed -i 's/tensor.record_stream(consumer);/(void)tensor;  \/\/ record_stream removed/' core/stream_handoff.cpp
      echo "patched: $(grep -c 'record_stream removed' core/stream_handoff.cpp) record_stream line removed" |
        tee -a "$out/summary.txt"
      start=$(date +%s)
      cmake --build "$build" --target teletron_tests_app >"$out/patched_build.log" 2>&1 || tail -20 "$out/patched_build.log"
      echo "patched build $(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
      runs hazard_without_record_stream 2 "$app" "$hazard"
      cp /tmp/stream_handoff.cpp.orig core/stream_handoff.cpp  # newer: the next build compiles it again
      echo "restored: $(grep -c 'record_stream(consumer)' core/stream_handoff.cpp) record_stream line" |
        tee -a "$out/summary.txt"
      # HAZARD_THEN_EQUALITY=1: the equality runs follow under the same load, in the same call (the
      # patched build is the test binary: built again first).
      if [ "${HAZARD_THEN_EQUALITY:-0}" = 1 ]; then
        cmake --build "$build" --target teletron_tests_app >"$out/restore_build.log" 2>&1 || tail -20 "$out/restore_build.log"
        runs equality "${EQUALITY_RUNS:-20}" "$app" "$equality"
      fi
    fi
    kill $load 2>/dev/null; wait $load 2>/dev/null
    cat "$out/gpu_load.log"
    ;;
  ctest)
    # The [gpu] test cases by name, to count them in ctest's log.
    : >/tmp/gpu_tests.txt
    for exe in "$build"/test/teletron_tests_{core,cuda,model,pipeline,app}; do
      "$exe" "[gpu]" --list-tests --verbosity quiet 2>/dev/null | grep -v '^$' >>/tmp/gpu_tests.txt
    done
    echo "[gpu] test cases: $(wc -l </tmp/gpu_tests.txt)" | tee -a "$out/summary.txt"
    for i in $(seq 1 "${RUNS:-3}"); do
      start=$(date +%s)
      timeout "${CTEST_TIMEOUT:-420}" ctest --test-dir "$build" --output-on-failure -j 8 >"$out/ctest_$i.log" 2>&1
      rc=$?
      passed=0
      while IFS= read -r name; do
        grep -F -- "$name" "$out/ctest_$i.log" | grep -q ' Passed' && passed=$((passed + 1))
      done </tmp/gpu_tests.txt
      { echo "ctest run $i: exit $rc in $(( $(date +%s) - start )) s: $(grep -E 'tests passed|tests failed' "$out/ctest_$i.log")"
        grep -E "\((Failed|SEGFAULT|Timeout|Subprocess aborted)\)|\*\*\*Skipped| Skipped" "$out/ctest_$i.log" | head -20
        echo "  [gpu] test cases passed: $passed of $(wc -l </tmp/gpu_tests.txt)"; } | tee -a "$out/summary.txt"
    done
    ;;
  *) echo "hazard, equality or ctest" >&2; exit 2 ;;
esac
