#!/usr/bin/env bash
# Clips for the video-pipeline benchmark (BENCHMARKS.md, issue 4): N 10-second 1280x720 30 fps H.264
# clips of testsrc2 with temporal noise (so every frame costs real decoding), GOP 60, 2 B-frames,
# CRF 23, x264's default preset; each clip has its own noise seed. Made on the development machine
# (the GPU machine has no encoder) and carried: about 5 MB per clip.
# Usage: scripts/make_bench_clips.sh [DIR] [N]     DIR default .benchclips, N default 6
set -euo pipefail
dir=${1:-.benchclips}
count=${2:-6}
mkdir -p "$dir"
for i in $(seq 1 "$count"); do
  out="$dir/clip$i.mp4"
  [ -s "$out" ] && continue
  ffmpeg -v error -y -f lavfi -i "testsrc2=size=1280x720:rate=30" -vf "noise=alls=12:allf=t+u:all_seed=$i" -t 10 \
    -c:v libx264 -g 60 -keyint_min 60 -bf 2 -crf 23 -pix_fmt yuv420p "$out"
  echo "$out: $(stat -c %s "$out") bytes"
done
