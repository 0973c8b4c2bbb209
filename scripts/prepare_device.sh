#!/usr/bin/env bash
# Makes, on the development machine, every ignored folder the GPU-machine scripts carry (a fresh
# checkout has none of them); each is made only when missing:
#   .device      FFmpeg 5.1 source, NVDEC headers, nasm (../shared/device/prepare.sh; bootstrap.sh
#                builds FFmpeg there in ~40 s)
#   .devdeps     Debian 12's protobuf packages (TensorBoard's event files; the image has no protobuf)
#   .wheels      diffusers 0.42.1 + importlib_metadata + zipp (the image lacks them; peft, transformers,
#                opencv are there)
#   .testmedia   the clips and probe answers the tests make with the ffmpeg CLI (scripts/make_test_media.sh;
#                needs build/), for `ctest` there with TELETRON_TEST_MEDIA
#   .benchclips  two 10-s 720p H.264 clips (scripts/make_bench_clips.sh .benchclips 2)
#   .videosweep  24 randomly drawn clips with the CLI's frames, in codecs and containers the GPU
#                machine's FFmpeg reads (scripts/video_sweep.py --record; replayed there with
#                --replay .videosweep --device cuda: NVDEC and the CUDA colour kernel)
# and prints each folder's size (the device tool carries 64 MiB in all).
# Usage: scripts/prepare_device.sh [FOLDER...]   (default: all of them)
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
wanted=("$@")
[ ${#wanted[@]} -gt 0 ] || wanted=(.device .devdeps .wheels .testmedia .benchclips .videosweep)
for folder in "${wanted[@]}"; do
  if [ -e "$folder" ]; then echo "$folder: there already"; continue; fi
  case $folder in
    .device) ../shared/device/prepare.sh ;;
    .devdeps)
      mkdir -p .devdeps
      (cd .devdeps && apt-get download protobuf-compiler libprotoc32 libprotobuf32 libprotobuf-lite32 libprotobuf-dev)
      ;;
    .wheels)
      mkdir -p .wheels
      python3 -m pip download -q --no-deps -d .wheels diffusers==0.42.1 importlib_metadata zipp
      ;;
    .testmedia) scripts/make_test_media.sh .testmedia build ;;
    .benchclips) scripts/make_bench_clips.sh .benchclips 2 ;;
    .videosweep)
      python3 scripts/video_sweep.py --teletron build/teletron --files 24 --seed 3 \
        --codecs libx264,libx265,libvpx-vp9,libsvtav1,mpeg4 --containers mp4,mov,mkv,webm,avi,ts,h264,hevc,ivf \
        --record .videosweep ;;
    *) echo "unknown folder $folder"; exit 2 ;;
  esac
done
# The shared bootstrap's FFmpeg has no GIF reader; the tests read back the GIFs teletron writes
# (validation samples in TensorBoard): add the gif demuxer and decoder (idempotent).
if [ -f .device/bootstrap.sh ] && ! grep -q 'enable-demuxer=gif,' .device/bootstrap.sh; then
  sed -i 's/--enable-demuxer=/--enable-demuxer=gif,/; s/--enable-decoder=h264,/--enable-decoder=gif,h264,/' .device/bootstrap.sh
  echo ".device/bootstrap.sh: gif demuxer and decoder added to its FFmpeg"
fi
du -sh "${wanted[@]}" 2>/dev/null
