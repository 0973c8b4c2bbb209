#!/usr/bin/env bash
# GPU machine: issue 5's training run on raw video (BENCHMARKS.md). The 1b preset on the 10-s 720p
# clips of scripts/make_bench_clips.sh (carry .device and .benchclips), 33 frames -> 480x832, the
# HunyuanVideo VAE architecture with fixed random weights (vae.weights: random; the machine has no
# network for the real ones: the cost is the same), prefetch 5 on a side stream.
# Usage: scripts/gpu_train_video.sh "MODES" [STEPS] [CPU_STEPS] [CACHED_STEPS]
#   MODES, space-separated, run in this order:
#        cached  teletron preprocess once (timed), then the training on the cached latents
#        online  NVDEC + GPU kernels + VAE on a side stream, all 16 cores
#        cpu16   the CPU path (data_pipeline.video_decoding: cpu: decode, colour, augment on the host),
#                16 clip workers on all 16 cores
#        cpu4    the same with 4 workers, taskset to 4 cores (an 8-GPU node's share)
#        vae     teletron bench-vae of the VAE as training runs it (frame windows, default runtime)
#        the engine's ablation on raw video (issue 12 (b)), each with CPU_STEPS steps:
#        naive   fp32 (TF32 stays on for cuDNN's convolutions: no config key turns it off), eager, fixed
#                batch, text trimmed, the CPU data path with 4 workers taskset to 4 cores
#        main    bf16, eager, fixed batch, text trimmed, the GPU data path (as online, graphs off)
#        graphs  main + CUDA graphs (text padding auto; graph warm-up 5 steps, compared every 5 replays)
#        dynamic graphs + batch_size: dynamic
#        fused   dynamic + model.fused_kernels (with the config's prefetch 5: the full stack here)
#   STEPS (default 200) for online, CPU_STEPS (default 60) for the CPU modes, CACHED_STEPS (default
#   STEPS) for cached latents (its step time is flat after warm-up).
# Per mode: samples/s, step time, data-wait share, GPU busy share (NVML utilization.gpu sampled every
# 200 ms: the share of samples with a kernel running), CPU cores used (user + sys time / wall time of
# the process, bash's `time`), peak memory; then the issue's target check: online samples/s against
# TV_BOUND (default 0.95; issue 15 asks 0.97) x 1 / (cached step + VAE per clip). Logs and metrics in $OUT.
# Smoke test off the GPU machine: TV_DEVICE=cpu TV_MODEL=tiny TV_VAE=tiny TV_BUCKET="9 64 64"
# TV_TEXT="--dim 64 --pooled 32 --length 8 --valid 6" TV_WORK=/tmp/tv_smoke (defaults: cuda, 1b,
# hunyuan with random weights, "33 480 832", the 1b's text widths, /tmp/tv).
set -uo pipefail
modes=${1:-"cached online"}
steps=${2:-200}
cpu_steps=${3:-60}
cached_steps=${4:-$steps}
device=${TV_DEVICE:-cuda}
read -r frames height width <<<"${TV_BUCKET:-33 480 832}"
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh" || exit 1
echo "build ${build_s}s"
work=${TV_WORK:-/tmp/tv}
mkdir -p "$work"
clips=("$root"/.benchclips/*.mp4)
[ -f "$work/text/text0023.safetensors" ] || python3 scripts/make_text_embeddings.py "$work/text" --count 24 ${TV_TEXT:-} >/dev/null
: >"$work/manifest.jsonl"
for i in $(seq 0 23); do
  printf '{"video": "%s", "text_embeddings": "%s/text/text%04d.safetensors"}\n' "${clips[$((i % ${#clips[@]}))]}" "$work" "$i" \
    >>"$work/manifest.jsonl"
done
cat >"$work/train.yaml" <<YAML
tele_tron:
  model: {preset: ${TV_MODEL:-1b}}
  vae: {preset: ${TV_VAE:-hunyuan}$([ "${TV_VAE:-hunyuan}" = hunyuan ] && echo ", weights: random")}
  data:
    source: video
    manifest: $work/manifest.jsonl
    buckets: [{frames: $frames, height: $height, width: $width}]
  data_pipeline: {frame_sampler: {mode: stratified}, prefetch: 5}
  optimizer: {lr: 1.0e-4, warmup_steps: 10}
  train: {device: $device, log_every: 10, checkpoint_every: 100000, keep_checkpoints: 1}
YAML

train() {  # MODE STEPS [taskset cores] [extra --set ...]
  local mode=$1 n=$2 cores=$3
  shift 3
  local run_dir=$work/run_$mode pin=()
  [ -n "$cores" ] && pin=(taskset -c "$cores")
  rm -rf "$run_dir"
  nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 >"$out/util_$mode.txt" 2>/dev/null &
  local sampler=$!
  TIMEFORMAT="%U %S %R"
  { time "${pin[@]}" "$tt" train "$work/train.yaml" --output "$run_dir" --max-steps "$n" "$@" \
      >"$out/train_$mode.log" 2>&1; } 2>"$out/time_$mode.txt"
  local rc=$?
  kill $sampler 2>/dev/null
  echo "train ($mode): exit $rc, $(awk '{printf "%.0f s wall, %.1f cores busy", $3, ($1 + $2) / $3}' "$out/time_$mode.txt")"
  grep -E "TT_ERR|error" "$out/train_$mode.log" | head -3
  cp "$run_dir/metrics.jsonl" "$out/metrics_$mode.jsonl" 2>/dev/null
}

for mode in $modes; do
  case "$mode" in
    cached)
      rm -rf "$work/cache"
      pre_start=$(date +%s%N)
      "$tt" preprocess "$work/train.yaml" --output "$work/cache" >"$out/preprocess.log" 2>&1 || tail -3 "$out/preprocess.log"
      echo "preprocess (pipeline + VAE, one job): 24 clips in $(( ($(date +%s%N) - pre_start) / 1000000 )) ms"
      train cached "$cached_steps" "" --set data.source=latents --set data.manifest="$work/cache/manifest.jsonl" ;;
    online) train online "$steps" "" ;;
    cpu16) train cpu16 "$cpu_steps" "" --set data_pipeline.video_decoding=cpu --set data_pipeline.workers=16 ;;
    cpu4) train cpu4 "$cpu_steps" 0-3 --set data_pipeline.video_decoding=cpu --set data_pipeline.workers=4 ;;
    naive) train naive "$cpu_steps" 0-3 --set data_pipeline.video_decoding=cpu --set data_pipeline.workers=4 \
             --set mixed_precision.enabled=false --set cuda_graph.enabled=false --set data.text_padding=trim ;;
    main) train main "$cpu_steps" "" --set cuda_graph.enabled=false --set data.text_padding=trim ;;
    graphs) train graphs "$cpu_steps" "" --set cuda_graph.enabled=true --set cuda_graph.warmup_steps=5 \
              --set cuda_graph.capture_frequency=5 ;;
    dynamic) train dynamic "$cpu_steps" "" --set cuda_graph.enabled=true --set cuda_graph.warmup_steps=5 \
               --set cuda_graph.capture_frequency=5 --set batch_size=dynamic ;;
    fused) train fused "$cpu_steps" "" --set cuda_graph.enabled=true --set cuda_graph.warmup_steps=5 \
             --set cuda_graph.capture_frequency=5 --set batch_size=dynamic --set model.fused_kernels=true ;;
    vae) "$tt" bench-vae --preset "${TV_VAE:-hunyuan}" --device "$device" --frames "$frames" --height "$height" \
           --width "$width" --tiling frames \
           --warmup 2 --steps 5 --json "$out/vae_train.jsonl" 2>&1 | grep -E "^bench-vae|TT_ERR" ;;
    *) echo "unknown mode $mode"; exit 2 ;;
  esac
done

python3 - "$out" <<'PY'
import json, os, sys
out = sys.argv[1]
summary = {}
print("| mode | steps | samples/s | step ms | data wait | GPU busy (NVML) | CPU cores busy | peak GiB | "
      "GPU ms per sample before the VAE | VAE GPU ms per sample (under load) |")
print("|---|---|---|---|---|---|---|---|---|---|")
for mode in ("cached", "online", "cpu16", "cpu4", "naive", "main", "graphs", "dynamic", "fused"):
    path = os.path.join(out, f"metrics_{mode}.jsonl")
    if not os.path.exists(path):
        continue
    rows = [json.loads(l) for l in open(path) if l.strip()]
    steady = rows[2:] or rows  # the first 20 steps hold allocator warm-up and cuDNN's algorithm search
    mean = lambda k: sum(r[k] for r in steady) / len(steady)
    util = [float(x) for x in open(os.path.join(out, f"util_{mode}.txt")) if x.strip().replace(".", "", 1).isdigit()]
    user, system, wall = (float(x) for x in open(os.path.join(out, f"time_{mode}.txt")).read().split())
    summary[mode] = {"samples_per_s": mean("samples_per_s"), "step_ms": mean("step_ms")}
    timed = [r for r in steady if "vae_gpu_ms_per_sample" in r]
    pre = sum(r["before_vae_gpu_ms_per_sample"] for r in timed) / len(timed) if timed else float("nan")
    vae = sum(r["vae_gpu_ms_per_sample"] for r in timed) / len(timed) if timed else float("nan")
    print(f"| {mode} | {rows[-1]['step']} | {mean('samples_per_s'):.3f} | {mean('step_ms'):.0f} | "
          f"{100 * mean('data_wait_share'):.1f} % | {sum(u > 0 for u in util) / max(len(util), 1) * 100:.1f} % "
          f"(mean util {sum(util) / max(len(util), 1):.0f} %) | {(user + system) / wall:.1f} | "
          f"{max(r['peak_mem_gb'] for r in rows):.1f} | {pre:.2f} | {vae:.0f} |")
    if timed:
        per_sample_ms = 1000.0 / mean("samples_per_s")
        print(f"  {mode}: the stages before the VAE take {100 * pre / per_sample_ms:.2f} % of the GPU time per sample "
              f"(upper bound: CUDA-event intervals on a shared GPU; target < 2 %)")
vae_path = os.path.join(out, "vae_train.jsonl")
if os.path.exists(vae_path) and "cached" in summary and "online" in summary:
    vae_ms = [json.loads(l) for l in open(vae_path) if l.strip()][-1]["ms"]
    bound = 1000.0 / (summary["cached"]["step_ms"] + vae_ms)  # batch size 1: one sample per step
    online = summary["online"]["samples_per_s"]
    share = float(os.environ.get("TV_BOUND", "0.95"))  # issue 5 asked 0.95, issue 15 asks 0.97
    print(f"target: online {online:.3f} samples/s vs {share} x 1 / (cached step {summary['cached']['step_ms']:.0f} ms + "
          f"VAE {vae_ms:.0f} ms per clip) = {share * bound:.3f} -> {'met' if online >= share * bound else 'NOT met'} "
          f"({online / bound:.3f} of the bound)")
PY
