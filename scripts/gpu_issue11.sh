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
#   scripts/gpu_issue11.sh mutants   the spin, owned-stream, busy-stream NVDEC and dynamic-batch measurement tests as the tree is,
#                                    then each with what it guards patched out (it must fail), restored.
set -uo pipefail
part=${1:?usage: gpu_issue11.sh hazard|equality|ctest|mutants}
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
# run's line (runs.txt) and log (runs.log; the device tool brings back few files) are written as it goes, so a run cut by the call's
# time limit still leaves them.
runs() {
  local label=$1 count=$2 binary=$3 name=$4; shift 4
  local pass=0 fail=0 skip=0 log=/tmp/tt_run_$label.log
  : >/tmp/tt_runs_$label.log
  for i in $(seq 1 "$count"); do
    local t0; t0=$(date +%s)
    (cd "$(dirname "$binary")" && timeout -s KILL 90 env "$@" "$binary" "$name") >"$log" 2>&1
    local rc=$?
    cat "$log" >>/tmp/tt_runs_$label.log
    echo "$label run $i: exit $rc in $(( $(date +%s) - t0 )) s" >>"$out/runs.txt"
    { echo "=== $label run $i exit $rc"; cat "$log"; } >>"$out/runs.log"
    if [ "$rc" = 0 ] && grep -q "All tests passed" "$log"; then pass=$((pass + 1))
    elif [ "$rc" = 4 ]; then skip=$((skip + 1))
    else fail=$((fail + 1)); fi
  done
  echo "| $label | $count | $pass | $fail | $skip |" | tee -a "$out/summary.txt"
  grep -hE "max \|prefetched|FAILED:|with expansion" /tmp/tt_runs_$label.log | sort | uniq -c | sort -rn | head -5 |
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
      cmake --build "$build" --target teletron_tests_app >/tmp/tt_patched_build.log 2>&1 || tail -20 /tmp/tt_patched_build.log
      echo "patched build $(( $(date +%s) - start ))s" | tee -a "$out/summary.txt"
      runs hazard_without_record_stream 2 "$app" "$hazard"
      cp /tmp/stream_handoff.cpp.orig core/stream_handoff.cpp  # newer: the next build compiles it again
      echo "restored: $(grep -c 'record_stream(consumer)' core/stream_handoff.cpp) record_stream line" |
        tee -a "$out/summary.txt"
      # HAZARD_THEN_EQUALITY=1: the equality runs follow under the same load, in the same call (the
      # patched build is the test binary: built again first).
      if [ "${HAZARD_THEN_EQUALITY:-0}" = 1 ]; then
        cmake --build "$build" --target teletron_tests_app >/tmp/tt_restore_build.log 2>&1 || tail -20 /tmp/tt_restore_build.log
        runs equality "${EQUALITY_RUNS:-20}" "$app" "$equality"
      fi
    fi
    kill $load 2>/dev/null; wait $load 2>/dev/null
    cat "$out/gpu_load.log"
    ;;
  ctest)
    # The Python checks (encode-text, VAE FLOPs, walkthrough) need diffusers: carry .wheels.
    use_diffusers_wheels || echo "diffusers wheels missing: the Python checks will skip" | tee -a "$out/summary.txt"
    # The [gpu] test cases by name, to count them in ctest's log.
    : >/tmp/gpu_tests.txt
    for exe in "$build"/test/teletron_tests_{core,cuda,model,pipeline,app}; do
      "$exe" "[gpu]" --list-tests --verbosity quiet 2>/dev/null | grep -v '^$' >>/tmp/gpu_tests.txt
    done
    echo "[gpu] test cases: $(wc -l </tmp/gpu_tests.txt)" | tee -a "$out/summary.txt"
    for i in $(seq 1 "${RUNS:-3}"); do
      start=$(date +%s)
      # The CPU parity sweeps (CI runs them) start ~100 teletron processes each, every one loading
      # CUDA here: minutes that test nothing of the GPU. CTEST_EXCLUDE=NOTHING runs them too.
      timeout "${CTEST_TIMEOUT:-420}" ctest --test-dir "$build" --output-on-failure -j 8 \
        -E "${CTEST_EXCLUDE-python\.(parity_sweep|train_export_sweep|vae_parity_sweep)}" >"$out/ctest_$i.log" 2>&1
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
  mutants)
    # Each new [gpu] stream test as the tree is, then with the thing it guards removed (one file
    # patched, its test binary rebuilt, run, the file restored): it must fail there.
    { echo "| test case | tree | runs | passed | failed | skipped |"; echo "|---|---|---|---|---|---|"; } |
      tee -a "$out/summary.txt"
    spin="spin_until_set waits for another stream's flag or its timeout; busy_for holds a stream for its duration"
    owned='an OwnedCudaStream is a stream of its own\, made once on its device'  # Catch2: \, is a comma
    busy="NVDEC frames stay right while the caller's stream is busy during the decode"
    dyn="dynamic batch on the GPU: a bucket measured after the first step still measures its memory per sample"
    # mutant TARGET LABEL COUNT TEST FILE SED [FILE SED ...]: every FILE patched by its SED (each
    # must change), TARGET rebuilt, TEST run COUNT times, the files restored.
    mutant() {
      local target=$1 label=$2 count=$3 name=$4; shift 4
      local files=() i=0
      while [ $# -ge 2 ]; do
        cp "$1" "/tmp/mutant.$i"; files+=("$1")
        sed -i "$2" "$1"
        cmp -s "$1" "/tmp/mutant.$i" && echo "$label: the patch of $1 changed nothing" | tee -a "$out/summary.txt"
        i=$((i + 1)); shift 2
      done
      cmake --build "$build" --target "$target" >/tmp/tt_mutant_build.log 2>&1 || tail -20 /tmp/tt_mutant_build.log
      runs "$label" "$count" "$build/test/$target" "$name"
      for i in "${!files[@]}"; do cp "/tmp/mutant.$i" "${files[$i]}"; done  # newer than the build: built again next
    }
    # MUTANTS picks the tests (default all four: spin owned nvdec dyn).
    picked() { case " ${MUTANTS:-spin owned nvdec dyn} " in *" $1 "*) return 0 ;; esac; return 1; }
    picked spin && runs spin 3 "$build/test/teletron_tests_cuda" "$spin"
    picked owned && runs owned_stream 3 "$build/test/teletron_tests_core" "$owned"
    picked nvdec && runs nvdec_busy 5 "$build/test/teletron_tests_pipeline" "$busy"
    picked dyn && runs dynamic_measure 3 "$build/test/teletron_tests_app" "$dyn"
    picked spin && mutant teletron_tests_cuda spin_without_busy_wait 2 "$spin" \
      cuda/spin.cu 's/busy_for_kernel<<<1, 1, 0, stream>>>(duration_ns);/busy_for_kernel<<<1, 1, 0, stream>>>(0);/'
    picked owned && mutant teletron_tests_core owned_stream_without_synchronize 2 "$owned" \
      core/cuda_stream.cpp 's/const cudaError_t rc = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));/const cudaError_t rc = cudaSuccess;/'
    # The surface copies queued on the caller's stream instead of the decoder's (where FFmpeg maps
    # the pictures), and the decoder's stream no longer behind the caller's: with the pre-wait kept,
    # the copies end up after the busy kernel together with the maps (device call 1 of 2026-12-01
    # 14:55: the copy moved alone passed 3 of 3).
    picked nvdec && mutant teletron_tests_pipeline nvdec_busy_copy_on_callers_stream_no_prewait 3 "$busy" \
      pipeline/nvdec.cpp 's/auto s = static_cast<cudaStream_t>(stream);/auto s = c10::cuda::getCurrentCUDAStream().stream(); (void)stream;/' \
      pipeline/video_reader_decode.cpp 's/    nvdec::wait_for_current(s.cuda_stream, s.device_index);  \/\/ the new tensors are free to write/    \/\/ pre-wait removed/'
    # Every parameter's gradient subtracted from a bucket's measured step, made by it or not (the
    # arithmetic before 31efead): the second bucket's figure drops below zero.
    picked dyn && mutant teletron_tests_app dynamic_measure_grads_counted_twice 2 "$dyn" \
      app/trainer.cpp 's/if (!param.grad().defined()) grads_to_come +=/grads_to_come +=/'
    start=$(date +%s)
    cmake --build "$build" >/tmp/tt_restore_build.log 2>&1 || tail -20 /tmp/tt_restore_build.log
    echo "restored tree built in $(( $(date +%s) - start ))s; git diff: $(git status --short -- cuda core pipeline | wc -l) files" |
      tee -a "$out/summary.txt"
    ;;
  *) echo "hazard, equality, ctest or mutants" >&2; exit 2 ;;
esac
