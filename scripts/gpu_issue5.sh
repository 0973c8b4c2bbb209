#!/usr/bin/env bash
# GPU machine: issue 5's measurements in three device calls of under 10 minutes each.
#   scripts/gpu_issue5.sh 1   carry .device .benchclips: 1b training on cached latents (100 steps:
#                             flat after warm-up) and online (200 steps), then the VAE's time per
#                             clip as training runs it -> the target line.
#   scripts/gpu_issue5.sh 2   carry .device .testmedia: every [gpu] test (all four test binaries).
#   scripts/gpu_issue5.sh 3   carry .device .benchclips .vaewheels (diffusers, importlib_metadata,
#                             zipp wheels): the VAE against diffusers (whole, frame windows, tiled),
#                             same run; then the CPU-path training on all 16 cores and on 4.
#   scripts/gpu_issue5.sh 4   carry .device .benchclips: issue 4's video benchmark, every row in one
#                             run (scripts/bench_video.sh).
# Call them back to back: the machine is given back 30 s after a call, and a warm one keeps the build.
# Keeps at most 8 files in $OUT (what the device tool returns); everything else under /tmp/o.
set -uo pipefail
part=${1:?usage: gpu_issue5.sh 1|2|3|4}
final=${OUT:-/tmp/tt_final}
mkdir -p "$final"
export OUT=/tmp/o
mkdir -p "$OUT"
log=$final/issue5_part$part.txt
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
case "$part" in
  1)
    export TELETRON_BUILD_TARGETS=teletron
    timeout 480 "$here/gpu_train_video.sh" "cached online vae" 200 60 100 2>&1 | tee -a "$log"
    cp "$OUT"/metrics_cached.jsonl "$OUT"/metrics_online.jsonl "$OUT"/train_online.log "$OUT"/vae_train.jsonl \
      "$OUT"/preprocess.log "$final"/ 2>/dev/null ;;
  2)
    source "$here/device_build.sh" || exit 1
    echo "build ${build_s}s" | tee -a "$log"
    export TELETRON_TEST_MEDIA=$root/.testmedia
    for binary in teletron_tests_cuda teletron_tests_model teletron_tests_pipeline teletron_tests_app; do
      timeout 150 "$build/test/$binary" "[gpu]" 2>&1 | tail -12 | tee -a "$log"
    done ;;
  3)
    export TELETRON_BUILD_TARGETS=teletron WHEELS=$root/.vaewheels
    VAE_RUNTIMES=plain,fast-batched timeout 200 "$here/bench_vae.sh" 2>&1 | tee -a "$log"
    timeout 260 "$here/gpu_train_video.sh" "cpu16 cpu4" 200 30 2>&1 | tee -a "$log"
    cp "$OUT"/bench_vae.jsonl "$OUT"/metrics_cpu16.jsonl "$OUT"/metrics_cpu4.jsonl "$OUT"/train_cpu4.log \
      "$final"/ 2>/dev/null ;;
  4)
    export TELETRON_BUILD_TARGETS=teletron
    timeout 540 "$here/bench_video.sh" 2>&1 | tee -a "$log"
    cp "$OUT"/bench_video.jsonl "$final"/ 2>/dev/null ;;
  *) echo "part 1, 2, 3 or 4" >&2; exit 2 ;;
esac
