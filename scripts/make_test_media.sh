#!/usr/bin/env bash
# Records the media the tests make with the ffmpeg CLI (clips, rgb24 frames, ffprobe answers) into DIR by
# running every test case of the executables that use it. Made on the development machine and carried to the
# GPU machine, which has no ffmpeg CLI: device tool `carry: [".testmedia"]`, then there
# `export TELETRON_TEST_MEDIA=$PWD/.testmedia` before ctest, and the tests replay the records
# (tt::test::media_command). Records afresh each time, so records no test asks for any more are not carried.
# Usage: scripts/make_test_media.sh [DIR] [BUILD]   DIR default .testmedia, BUILD default $TELETRON_BUILD_DIR or build
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
dir=${1:-$root/.testmedia}
build=${2:-${TELETRON_BUILD_DIR:-$root/build}}
# The test executables holding tests that call media_command.
executables=(teletron_tests_pipeline teletron_tests_cuda)
# app tier: only the test cases that make media (the rest train models and take minutes).
app_filter="[validate],[video],[prefetch]"

command -v ffmpeg >/dev/null && command -v ffprobe >/dev/null ||
  { echo "make_test_media.sh: needs the ffmpeg CLI (ffmpeg and ffprobe on PATH)" >&2; exit 1; }
for name in "${executables[@]}" teletron_tests_app; do
  [ -x "$build/test/$name" ] ||
    { echo "make_test_media.sh: $build/test/$name not built (ninja -C $build $name)" >&2; exit 1; }
done
# media.lock marks a folder media_command made: never remove anything else.
if [ -e "$dir" ]; then
  [ -e "$dir/media.lock" ] ||
    { echo "make_test_media.sh: $dir exists and is not a test media folder (no media.lock)" >&2; exit 1; }
  rm -rf "$dir"
fi
mkdir -p "$dir"
export TELETRON_TEST_MEDIA=$(cd "$dir" && pwd)

# ctest runs the tests from <build>/test; so do we.
cd "$build/test"
for name in "${executables[@]}"; do
  echo "== $name"
  "./$name"
done
echo "== teletron_tests_app $app_filter"
./teletron_tests_app "$app_filter"
echo "test media in $TELETRON_TEST_MEDIA: $(du -sh "$TELETRON_TEST_MEDIA" | cut -f1), $(ls "$TELETRON_TEST_MEDIA" | wc -l) files"
