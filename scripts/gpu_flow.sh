#!/usr/bin/env bash
# GPU machine: issue 13's flow measurements (carry .device and .videos: clips copied from
# ../shared/data/videos). Builds into build-device/ (shared with gpu_issue11.sh), logs and pictures
# into $OUT, a short summary last.
#   scripts/gpu_flow.sh bench      bench --suite flow at 480x832 (CPU reference in 1 and 16 workers,
#                                  TV-L1 CUDA, NVOFA grids/presets, the flow stage per sample; EPE
#                                  with the pancake clip's frame) and at 1080x1920; then the CPU peers
#                                  (scripts/bench_flow_peer.py: scikit-image in 1 and 16 processes,
#                                  OpenCV DIS/Farneback) on the same pair.
#   scripts/gpu_flow.sh pictures   probe --flow with NVOFA and TV-L1 on two real clips.
#   scripts/gpu_flow.sh epe        the EPE table on each real clip's middle frame (bench --suite flow
#                                  --flow-frames, GPU rows only).
#   scripts/gpu_flow.sh pipeline   bench --suite pipeline on .benchclips (scripts/make_bench_clips.sh,
#                                  carried) with --json/--plot into $OUT, then the CPU peers on the same
#                                  clips: scripts/bench_opencv.py (seek-and-read + resize, 16 processes)
#                                  and scripts/bench_augment_peer.py (Albumentations from
#                                  .wheels/albu when carried, else torchvision's transforms).
#   scripts/gpu_flow.sh training   the same with its training rows (CORES, default 2,4,8,16; STEPS 8).
#   scripts/gpu_flow.sh all        bench --suite all on .benchclips: the model step, the flow rows and the
#                                  pipeline with its training rows per core count, in one output (560 s).
# Several parts may be named: scripts/gpu_flow.sh bench pictures
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
export TELETRON_BUILD_DIR=${TELETRON_BUILD_DIR:-$root/build-device}
TELETRON_BUILD_TARGETS=${TELETRON_BUILD_TARGETS:-teletron} source "$here/device_build.sh" || exit 1
echo "build ${build_s}s" | tee -a "$out/summary.txt"
videos=$root/.videos
[ $# -gt 0 ] || set -- bench
for part in "$@"; do
  case "$part" in
    bench)
      timeout 300 "$tt" bench --suite flow --device cuda --height 480 --width 832 --steps 50 --cpu-workers 1,16 \
        --flow-frames "$videos/flipping_a_pancake.mkv" --json "$out/flow_480x832.json" 2>&1 | tee "$out/flow_480x832.log" |
        sed -n '/^| row/,$p' | tee -a "$out/summary.txt"
      timeout 240 "$tt" bench --suite flow --device cuda --height 1080 --width 1920 --steps 20 --cpu-workers 16 \
        --json "$out/flow_1080x1920.json" 2>&1 | tee "$out/flow_1080x1920.log" | sed -n '/^| row/,$p' |
        tee -a "$out/summary.txt"
      timeout 240 python3 "$here/bench_flow_peer.py" --height 480 --width 832 --processes 1,16 \
        --json "$out/flow_peer_480x832.json" 2>&1 | tee -a "$out/summary.txt"
      ;;
    pictures)
      for spec in "flipping_a_pancake.mkv 90,110" "nasa_13013.mp4 200,203"; do
        read -r clip frames <<<"$spec"
        for algorithm in nvofa tvl1; do
          png="$out/flow_${clip%%.*}_${algorithm}.png"
          timeout 60 "$tt" probe "$videos/$clip" --device cuda --flow "$png" --frames "$frames" \
            --flow-algorithm "$algorithm" 2>&1 | grep -E "^flow:|TT_ERR" | tee -a "$out/summary.txt"
        done
      done
      ;;
    epe)
      for clip in nasa_13013.mp4 flipping_a_pancake.mkv video_90.mov; do
        echo "== EPE on the middle frame of $clip (480x832)" | tee -a "$out/summary.txt"
        timeout 200 "$tt" bench --suite flow --device cuda --height 480 --width 832 --steps 5 --cpu-workers 1 \
          --flow-frames "$videos/$clip" --json "$out/epe_${clip%%.*}.json" 2>&1 | sed -n '/^end-point/,$p' |
          tee -a "$out/summary.txt"
      done
      ;;
    pipeline)
      clips=$(ls "$root"/.benchclips/*.mp4 2>/dev/null | paste -sd, -)
      [ -n "$clips" ] || { echo "pipeline: no clips in .benchclips (scripts/make_bench_clips.sh, then carry it)"; continue; }
      # stratified: the frames scripts/bench_opencv.py seeks and reads (its sampler), for the sampling row.
      timeout 420 "$tt" bench --suite pipeline --device cuda --clips "$clips" --sampler stratified --no-training \
        --json "$out/pipeline.json" \
        --plot "$out/pipeline.svg" 2>&1 | tee "$out/pipeline.log" | sed -n '/^| stage/,$p' | tee -a "$out/summary.txt"
      [ -d "$root/.wheels/albu" ] && python3 -m pip install -q --no-index --find-links "$root/.wheels/albu" albumentations \
        >"$out/albu_install.log" 2>&1
      timeout 200 python3 "$here/bench_opencv.py" --procs 16 --passes 2 ${clips//,/ } 2>&1 | tail -3 | tee -a "$out/summary.txt"
      timeout 200 python3 "$here/bench_augment_peer.py" --procs 16 --frames 33 ${clips//,/ } 2>&1 | tail -3 |
        tee -a "$out/summary.txt"
      ;;
    training)
      # The stage rows again, then `teletron train` (1b, the hunyuan VAE with random weights, the
      # default flow stage) on the clips per core count, CPU and GPU paths: samples/s and data wait.
      clips=$(ls "$root"/.benchclips/*.mp4 2>/dev/null | paste -sd, -)
      [ -n "$clips" ] || { echo "training: no clips in .benchclips"; continue; }
      timeout 560 "$tt" bench --suite pipeline --device cuda --clips "$clips" --cores "${CORES:-2,4,8,16}" \
        --warmup 3 --steps "${STEPS:-8}" --json "$out/pipeline_training.json" 2>&1 | tee "$out/pipeline_training.log" |
        sed -n '/^| stage/,$p' | tee -a "$out/summary.txt"
      ;;
    all)
      # Issue 13's `bench --suite all`: the 1b step, the flow rows (CPU reference in 16 workers, TV-L1
      # CUDA, NVOFA), the pipeline's stages and its training rows per core count (CORES), one output.
      # Nine training runs (CPU and GPU paths per core count, one without the flow stage), each with
      # a ~30-s start; the CPU path at 2 cores trains at ~0.2 samples/s (colour + augment on the CPU
      # reference: 50 frames/s on 16 threads), hence few steps (WARMUP 2, STEPS 5) to fit 560 s.
      clips=$(ls "$root"/.benchclips/*.mp4 2>/dev/null | paste -sd, -)
      [ -n "$clips" ] || { echo "all: no clips in .benchclips"; continue; }
      timeout 560 "$tt" bench --suite all --device cuda --clips "$clips" --cores "${CORES:-2,4,8,16}" --cpu-workers 16 \
        --warmup "${WARMUP:-2}" --steps "${STEPS:-5}" --json "$out/all.json" --plot "$out/all.svg" 2>&1 | tee "$out/all.log" |
        grep -E '^\||^(MFU|step|flow|end-point)' | tee -a "$out/summary.txt"
      ;;
    *) echo "bench, pictures, epe, pipeline, training or all" >&2; exit 2 ;;
  esac
done
