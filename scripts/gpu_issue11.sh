#!/usr/bin/env bash
# GPU machine: issue 11's stream checks (carry .device .testmedia). Prints a table; logs in $OUT.
#   scripts/gpu_issue11.sh streams   while another process loads the GPU (scripts/gpu_load.py), one
#                                    run at a time: the prefetch equality test and the hand-off hazard
#                                    test RUNS times each (default 20); then a copy of the tree with
#                                    record_stream removed (core/stream_handoff.cpp): the hazard test
#                                    must fail there.
#   scripts/gpu_issue11.sh ctest     every test ([gpu] included) under `ctest -j 8`, RUNS times (default 3).
set -uo pipefail
part=${1:?usage: gpu_issue11.sh streams|ctest}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
source "$here/device_build.sh" || exit 1
echo "build ${build_s}s" | tee -a "$out/summary.txt"
export TELETRON_TEST_MEDIA=$root/.testmedia
equality='prefetched batches equal synchronous ones on a side stream (CUDA)'
hazard="a handed-off batch's memory is not re-used while the consumer's stream still reads it (CUDA)"

# lanes LABEL COUNT LANES BINARY "TEST" [ENV...]: COUNT runs of one test case, LANES processes at a
# time; one table row; every run's log appended to $out/LABEL.log.
lanes() {
  local label=$1 count=$2 width=$3 binary=$4 name=$5; shift 5
  local dir=/tmp/tt_runs_$label
  rm -rf "$dir"; mkdir -p "$dir"
  for lane in $(seq 1 "$width"); do
    (for i in $(seq "$lane" "$width" "$count"); do
       (cd "$(dirname "$binary")" && timeout 90 env "$@" "$binary" "$name") >"$dir/$i.log" 2>&1
       echo $? >"$dir/$i.rc"
     done) &
  done
  wait
  local pass=0 fail=0 skip=0
  for i in $(seq 1 "$count"); do
    local rc; rc=$(cat "$dir/$i.rc")
    if [ "$rc" = 0 ] && grep -q "All tests passed" "$dir/$i.log"; then pass=$((pass + 1))
    elif [ "$rc" = 4 ]; then skip=$((skip + 1))
    else fail=$((fail + 1)); fi
    { echo "=== run $i exit $rc"; cat "$dir/$i.log"; } >>"$out/$label.log"
  done
  echo "| $label | $count | $pass | $fail | $skip |" | tee -a "$out/summary.txt"
  grep -hE "max \|prefetched|FAILED:|with expansion" "$dir"/*.log | sort | uniq -c | sort -rn | head -5 |
    tee -a "$out/summary.txt"
}

case "$part" in
  streams)
    python3 "$root/scripts/gpu_load.py" 420 >"$out/gpu_load.log" 2>&1 &
    load=$!
    sleep 5
    app="$build/test/teletron_tests_app"
    # RUNS runs of each, one at a time (parallel lanes time-slice the GPU between contexts and each
    # run takes several times longer).
    n=${RUNS:-20}
    { echo "| test case (under load) | runs | passed | failed | skipped |"; echo "|---|---|---|---|---|"; } |
      tee -a "$out/summary.txt"
    lanes equality "$n" 1 "$app" "$equality"
    lanes hazard "$n" 1 "$app" "$hazard"
    work=/tmp/tt_old
    rm -rf "$work"; mkdir -p "$work"
    (cd "$root" && tar --exclude=./.device --exclude=./.testmedia -cf - .) | tar -xf - -C "$work"
    sed -i 's/tensor.record_stream(consumer);/(void)tensor;  \/\/ record_stream removed/' "$work/core/stream_handoff.cpp"
    echo "patched: $(grep -c 'record_stream removed' "$work/core/stream_handoff.cpp") record_stream line removed"
    cmake -S "$work" -B /tmp/build_old -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release \
      >"$out/old_configure.log" 2>&1
    start=$(date +%s)
    timeout 300 cmake --build /tmp/build_old -j "$(nproc)" --target teletron_tests_app \
      >"$out/old_build.log" 2>&1 || { tail -20 "$out/old_build.log"; }
    echo "patched build $(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
    lanes hazard_without_record_stream 2 1 /tmp/build_old/test/teletron_tests_app "$hazard"
    kill $load 2>/dev/null; wait $load 2>/dev/null
    cat "$out/gpu_load.log"
    ;;
  ctest)
    for i in $(seq 1 "${RUNS:-3}"); do
      start=$(date +%s)
      timeout 280 ctest --test-dir "$build" --output-on-failure -j 8 >"$out/ctest_$i.log" 2>&1
      rc=$?
      echo "ctest run $i: exit $rc in $(( $(date +%s) - start )) s: $(grep -E 'tests passed|tests failed' "$out/ctest_$i.log")"
      grep -E "\((Failed|SEGFAULT|Timeout|Subprocess aborted)\)" "$out/ctest_$i.log" | head
      echo "  gpu tests passed: $(grep -E 'Passed' "$out/ctest_$i.log" | grep -c 'gpu\|CUDA\|NVDEC\|cuda') (by name); skipped: $(grep -c 'Skipped' "$out/ctest_$i.log")"
    done
    ;;
  *) echo "streams or ctest" >&2; exit 2 ;;
esac
