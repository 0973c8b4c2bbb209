#!/usr/bin/env bash
# GPU machine: issue 5's training run on raw video (BENCHMARKS.md). The 1b preset on the 10-s 720p
# clips of scripts/make_bench_clips.sh (carry .device and .benchclips), 33 frames -> 480x832, the
# HunyuanVideo VAE architecture with fixed random weights (vae.weights: random; the machine has no
# network for the real ones: the cost is the same), prefetch 5 on a side stream.
# Usage: scripts/gpu_train_video.sh MODE [STEPS]
#   MODE online  NVDEC + GPU kernels + VAE, all 16 cores
#        cpu4    CPU decode (data_pipeline.video_decoding: cpu), taskset to 4 cores
#        cpu16   CPU decode, all 16 cores
#        cached  teletron preprocess once (timed), then the same training on the cached latents
# Prints samples/s, data-wait share, GPU busy share (NVML utilization.gpu sampled every 200 ms: the
# share of samples with a kernel running) and peak memory; logs and metrics in $OUT.
set -uo pipefail
mode=${1:-online}
steps=${2:-200}
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh" || exit 1
echo "build ${build_s}s"
work=/tmp/tv
mkdir -p "$work"
clips=("$root"/.benchclips/*.mp4)
[ -f "$work/text/text0023.safetensors" ] || python3 scripts/make_text_embeddings.py "$work/text" --count 24 >/dev/null
: >"$work/manifest.jsonl"
for i in $(seq 0 23); do
  printf '{"video": "%s", "text_embeddings": "%s/text/text%04d.safetensors"}\n' "${clips[$((i % ${#clips[@]}))]}" "$work" "$i" \
    >>"$work/manifest.jsonl"
done
cat >"$work/train.yaml" <<YAML
tele_tron:
  model: {preset: 1b}
  vae: {preset: hunyuan, weights: random}
  data:
    source: video
    manifest: $work/manifest.jsonl
    buckets: [{frames: 33, height: 480, width: 832}]
  data_pipeline: {frame_sampler: {mode: stratified}, prefetch: 5}
  optimizer: {lr: 1.0e-4, warmup_steps: 10}
  train: {device: cuda, max_steps: $steps, log_every: 10, checkpoint_every: 100000, keep_checkpoints: 1}
YAML
run_dir=$work/run_$mode
rm -rf "$run_dir"
nvidia-smi --query-gpu=utilization.gpu --format=csv,noheader,nounits -lms 200 >"$out/util_$mode.txt" 2>/dev/null &
sampler=$!
start=$(date +%s)
# CPU time of everything the mode runs (bash's `time`: user + sys of the child processes).
TIMEFORMAT="cpu ($mode): user %U s + sys %S s in %R s wall"
time case "$mode" in
  online) "$tt" train "$work/train.yaml" --output "$run_dir" >"$out/train_$mode.log" 2>&1 ;;
  cpu4) taskset -c 0-3 "$tt" train "$work/train.yaml" --output "$run_dir" --set data_pipeline.video_decoding=cpu \
          >"$out/train_$mode.log" 2>&1 ;;
  cpu16) "$tt" train "$work/train.yaml" --output "$run_dir" --set data_pipeline.video_decoding=cpu \
           >"$out/train_$mode.log" 2>&1 ;;
  cached)
    pre_start=$(date +%s%N)
    "$tt" preprocess "$work/train.yaml" --output "$work/cache" >"$out/preprocess.log" 2>&1
    echo "preprocess (VAE encode + pipeline): 24 clips in $(( ($(date +%s%N) - pre_start) / 1000000 )) ms"
    "$tt" train "$work/train.yaml" --output "$run_dir" --set data.source=latents \
      --set data.manifest="$work/cache/manifest.jsonl" >"$out/train_$mode.log" 2>&1 ;;
  *) echo "unknown mode $mode"; kill $sampler; exit 2 ;;
esac
rc=$?
kill $sampler 2>/dev/null
echo "train ($mode): exit $rc in $(( $(date +%s) - start )) s"
tail -3 "$out/train_$mode.log"
cp "$run_dir/metrics.jsonl" "$out/metrics_$mode.jsonl" 2>/dev/null
python3 - "$out/metrics_$mode.jsonl" "$out/util_$mode.txt" "$mode" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
steady = rows[2:] or rows
util = [float(x) for x in open(sys.argv[2]) if x.strip().replace(".", "", 1).isdigit()]
mean = lambda k: sum(r[k] for r in steady) / len(steady)
print(f"| {sys.argv[3]} | {mean('samples_per_s'):.3f} samples/s | step {mean('step_ms'):.0f} ms | data wait "
      f"{100 * mean('data_wait_share'):.1f} % | GPU busy {sum(u > 0 for u in util) / max(len(util), 1) * 100:.1f} % "
      f"(mean util {sum(util) / max(len(util), 1):.0f} %) | peak {max(r['peak_mem_gb'] for r in rows):.1f} GB |")
PY
