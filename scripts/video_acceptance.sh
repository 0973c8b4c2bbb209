#!/usr/bin/env bash
# Issue-4 acceptance on the real-video corpus (../shared/data/videos, or a copy carried to the GPU
# machine): probe + dump against the reference frames, rotation, frame counts, the damaged file, and
# validate-data on the corpus plus broken files with a permissive and the default bucket.
# Usage: scripts/video_acceptance.sh TELETRON VIDEOS_DIR DEVICE(cpu|cuda) OUT_DIR
set -uo pipefail
tt=$1 videos=$(cd "$2" && pwd) device=$3 out=$4
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$out"
status=0
step() { echo; echo "### $*"; }

step "probe --device $device nasa_13013.mp4 frames 0,9,389 against the reference frames"
"$tt" probe "$videos/nasa_13013.mp4" --device "$device" --frames 0,9,389 --dump "$out/nasa.safetensors" || status=1
python3 "$here/compare_frames.py" "$out/nasa.safetensors" \
  0="$videos/nasa_13013.mp4.stream3.frame000000.pt" 9="$videos/nasa_13013.mp4.stream3.frame000009.pt" \
  389="$videos/nasa_13013.mp4.stream3.frame000389.pt" || status=1

step "video_90.mov comes out rotated"
"$tt" probe "$videos/video_90.mov" --device "$device" --dump "$out/rotated.safetensors" | grep -E "size|rotation|decode|decoded" || status=1

step "h265_video.mp4 gives all 10 frames (frame 5 against its reference)"
"$tt" probe "$videos/h265_video.mp4" --device "$device" --dump "$out/h265.safetensors" | grep -E "frames:|decode|decoded" || status=1
python3 "$here/compare_frames.py" "$out/h265.safetensors" 5="$videos/h265_video.mp4.stream0.frame000005.pt" || status=1

step "av1_video.mkv frame 10 against its reference"
"$tt" probe "$videos/av1_video.mkv" --device "$device" --frames 10 --dump "$out/av1.safetensors" | grep -E "decode|decoded" || status=1
python3 "$here/compare_frames.py" "$out/av1.safetensors" 10="$videos/av1_video.mkv.stream0.frame000010.pt" || status=1

step "corrupted.mp4: frame 29 decodes (concealment), frame 30 is TT_ERR_DECODE, nothing crashes"
"$tt" probe "$videos/corrupted.mp4" --device "$device" --frames 29 | grep -E "decode|decoded" || status=1
"$tt" probe "$videos/corrupted.mp4" --device "$device" --frames 30 >/dev/null 2>"$out/corrupted_30.err"
rc=$?
echo "exit code $rc: $(head -1 "$out/corrupted_30.err")"
grep -q TT_ERR_DECODE "$out/corrupted_30.err" || status=1

step "validate-data: the corpus plus broken files"
work="$out/broken"
mkdir -p "$work"
head -c 300000 "$videos/nasa_13013.mp4" >"$work/truncated.mp4"
python3 - "$videos/flipping_a_pancake.mkv" "$work/flipped.mkv" <<'PY'
import random, sys
data = bytearray(open(sys.argv[1], "rb").read())
rng = random.Random(7)
for _ in range(60):
    i = rng.randrange(len(data) // 10, len(data))
    data[i] ^= 0xFF
open(sys.argv[2], "wb").write(data)
PY
: >"$work/empty.mp4"
echo "not a video" >"$work/notes.mp4"
mkdir -p "$work/folder.mp4"
{
  for f in "$videos"/*.mp4 "$videos"/*.mov "$videos"/*.mkv; do echo "{\"video\": \"$f\"}"; done
  for f in truncated.mp4 flipped.mkv empty.mp4 notes.mp4 folder.mp4; do echo "{\"video\": \"broken/$f\"}"; done
} >"$out/manifest.jsonl"
echo "permissive (1 frame, 64x64):"
"$tt" validate-data "$out/manifest.jsonl" --device "$device" --set 'data.buckets=[{frames: 1, height: 64, width: 64}]' \
  --report "$out/validate_permissive.json" 2>&1 | grep -v "samples checked"
echo "exit code ${PIPESTATUS[0]}"
echo "default bucket (33x480x832):"
"$tt" validate-data "$out/manifest.jsonl" --device "$device" --report "$out/validate_default.json" 2>&1 |
  grep -v "samples checked"
echo "exit code ${PIPESTATUS[0]}"
exit $status
