#!/usr/bin/env bash
# GPU machine: issue 5's measurements in two device calls of under 10 minutes each.
#   scripts/gpu_issue5.sh 1   carry .device .benchclips .vaewheels (diffusers, importlib_metadata,
#                             zipp wheels): the VAE against diffusers (whole, frame windows, tiled),
#                             then 1b training on cached latents and online for 200 steps each, and
#                             the VAE time per clip for the target check.
#   scripts/gpu_issue5.sh 2   carry .device .benchclips .testmedia: the [gpu] tests of the training
#                             side, then the CPU-path training on all 16 cores and on 4.
# Keeps at most 8 files in $OUT (what the device tool returns); everything else under /tmp/o.
set -uo pipefail
part=${1:?usage: gpu_issue5.sh 1|2}
final=${OUT:-/tmp/tt_final}
mkdir -p "$final"
export OUT=/tmp/o
mkdir -p "$OUT"
log=$final/issue5_part$part.txt
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
case "$part" in
  1)
    export TELETRON_BUILD_TARGETS=teletron WHEELS=$root/.vaewheels
    VAE_RUNTIMES=plain,fast-batched timeout 200 "$here/bench_vae.sh" 2>&1 | tee -a "$log"
    timeout 340 "$here/gpu_train_video.sh" "cached online vae" 200 2>&1 | tee -a "$log"
    cp "$OUT"/bench_vae.jsonl "$OUT"/metrics_cached.jsonl "$OUT"/metrics_online.jsonl "$OUT"/train_online.log \
      "$OUT"/vae_train.jsonl "$final"/ 2>/dev/null ;;
  2)
    source "$here/device_build.sh" || exit 1
    echo "build ${build_s}s" | tee -a "$log"
    export TELETRON_TEST_MEDIA=$root/.testmedia
    for binary in teletron_tests_cuda teletron_tests_model teletron_tests_app; do
      timeout 150 "$build/test/$binary" "[gpu]" 2>&1 | tail -4 | tee -a "$log"
    done
    timeout 300 "$here/gpu_train_video.sh" "cpu16 cpu4" 200 40 2>&1 | tee -a "$log"
    cp "$OUT"/metrics_cpu16.jsonl "$OUT"/metrics_cpu4.jsonl "$OUT"/train_cpu4.log "$final"/ 2>/dev/null ;;
  *) echo "part 1 or 2" >&2; exit 2 ;;
esac
