#!/usr/bin/env bash
# GPU machine, issue 15's preprocess target: `teletron preprocess` against the usual script
# (scripts/bench_preprocess_peer.py: OpenCV decode on the CPU + diffusers' encode, batch 1) on the
# same 720p H.264 clips, same GPU, same call, in two cases:
#   short  33 frames -> 480x832 (the VAE's default frame windows)
#   long   129 frames at 720x1280, tiled (vae.tiling on; the peer with enable_tiling())
# Both with the released VAE architecture and fixed random weights (the time does not depend on
# them). Clips: .benchclips (scripts/make_bench_clips.sh, 10 s 1280x720 30 fps), each listed
# PRE_REPEAT times (default 4) as rows of their own. Carry .device .wheels .devdeps .benchclips.
# Environment: PRE_CASES ("short long"), PRE_REPEAT, PRE_JOBS (teletron --jobs, each in turn, default "1 2";
# PRE_JOBS_LONG for the long case, default PRE_JOBS),
# PRE_WORKERS (data_pipeline.workers, default 4), PRE_DEVICE (cuda; cpu for a smoke test with
# PRE_SMALL=1: 9 frames at 64x64 / 17 at 128x128 and the tiny VAE preset on teletron's side only).
set -uo pipefail
TELETRON_BUILD_TARGETS=${TELETRON_BUILD_TARGETS:-teletron}
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh" || exit 1
echo "build ${build_s}s"
use_diffusers_wheels || exit 1
device=${PRE_DEVICE:-cuda}
repeat=${PRE_REPEAT:-4}
work=${PRE_WORK:-/tmp/pre}
rm -rf "$work"
mkdir -p "$work"
clips=()
for c in "$root"/.benchclips/*.mp4; do clips+=("$c"); done
[ ${#clips[@]} -gt 0 ] || { echo "no clips in .benchclips (scripts/make_bench_clips.sh)"; exit 1; }
# One text-embeddings file for every row (random, 256 tokens of the 13b/1b text width).
python3 - "$work/text.safetensors" <<'PY'
import sys, torch
from safetensors.torch import save_file
torch.manual_seed(0)
save_file({"text_states": torch.randn(256, 4096), "text_mask": torch.ones(256, dtype=torch.uint8),
           "pooled": torch.randn(768)}, sys.argv[1])
PY
rows=()
for r in $(seq 1 "$repeat"); do for c in "${clips[@]}"; do rows+=("$c"); done; done
: >"$work/manifest.jsonl"
for c in "${rows[@]}"; do echo "{\"video\": \"$c\", \"text_embeddings\": \"$work/text.safetensors\"}" >>"$work/manifest.jsonl"; done
peer_list=$(IFS=,; echo "${rows[*]}")
json="$out/preprocess.jsonl"
: >"$json"
for case in ${PRE_CASES:-short long}; do
  if [ "$case" = short ]; then frames=33 height=480 width=832 tiling=auto peer_tiling=""; else
    frames=129 height=720 width=1280 tiling=on peer_tiling="--spatial-tiling"; fi
  vae_preset=hunyuan
  if [ "${PRE_SMALL:-0}" = 1 ]; then
    vae_preset=tiny
    if [ "$case" = short ]; then frames=9 height=64 width=64; else frames=17 height=128 width=128; fi
  fi
  cat >"$work/$case.yaml" <<EOF
tele_tron:
  model: {preset: 1b}
  vae: {preset: $vae_preset, weights: random, tiling: $tiling}
  data:
    source: video
    manifest: $work/manifest.jsonl
    buckets: [{frames: $frames, height: $height, width: $width}]
  data_pipeline:
    frame_sampler: {mode: fps, target_fps: 30}
    augment: {flip: 0.0, crop: center}
    workers: ${PRE_WORKERS:-4}
  train: {device: $device}
EOF
  job_list=${PRE_JOBS:-1 2}
  [ "$case" = long ] && job_list=${PRE_JOBS_LONG:-$job_list}
  for jobs in $job_list; do
    echo "== $case: ${#rows[@]} rows, $frames x $height x $width, vae.tiling $tiling, --jobs $jobs"
    log="$out/preprocess_${case}_jobs$jobs.log"
    start=$(date +%s.%N)
    "$tt" preprocess "$work/$case.yaml" --output "$work/out_${case}_jobs$jobs" --jobs "$jobs" >"$log" 2>&1
    rc=$?
    seconds=$(python3 -c "import time; print(time.time() - $start)")
    grep -E "encoded once on blank" "$log"
    grep -E "preprocess:|TT_ERR" "$log" | tail -4
    # clips/s as preprocess logs it at its last row (from its first encode, cuDNN's tuning included;
    # start-up excluded, as the peer excludes its model load and warm-up clip); the wall time beside it.
    rate=$(grep -oE "encoded \([0-9.]+ clips/s" "$log" | tail -1 | grep -oE "[0-9.]+" || echo 0)
    echo "{\"tool\": \"teletron preprocess\", \"case\": \"$case\", \"jobs\": $jobs, \"rc\": $rc, \"clips\": ${#rows[@]}, \"wall_seconds\": $seconds, \"clips_per_s\": ${rate:-0}}" >>"$json"
  done
  # The peer: the same rows in the same order (its first clip encoded once more as warm-up, untimed).
  python3 "$root/scripts/bench_preprocess_peer.py" --clips "$peer_list" --frames "$frames" --height "$height" \
    --width "$width" --device "$device" $peer_tiling --out "$work/peer_$case" --json "$json" 2>&1 |
    grep -E "^peer: [0-9]+ clips|Error|error" | tail -3
done
python3 - "$json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = [r for r in rows if r.get("tool") == "teletron preprocess"]
peers = [r for r in rows if r.get("tool") != "teletron preprocess"]
cases = [r["case"] for r in ours]
for case, p in zip(dict.fromkeys(cases), peers):
    for o in (r for r in ours if r["case"] == case):
        print(f"{case}: teletron --jobs {o.get('jobs', 1)} {o['clips_per_s']:.3f} clips/s (rc {o['rc']}, "
              f"{o['wall_seconds']:.1f} s wall with start-up), peer "
              f"{p['clips_per_s']:.3f} clips/s -> {o['clips_per_s'] / p['clips_per_s']:.2f}x; peer decode "
              f"{p['decode_s']:.1f} s, encode {p['encode_s']:.1f} s, peak {p['peak_gb']:.2f} GiB")
PY
