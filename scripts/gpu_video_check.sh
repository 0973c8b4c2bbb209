#!/usr/bin/env bash
# GPU machine: the video side (issue 4). Builds, runs every test with the recorded test media
# (carry .testmedia, made by scripts/make_test_media.sh), then the real-video acceptance on CUDA
# (carry .videos, a copy of ../shared/data/videos). Logs in $OUT.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh" || exit 1
export TELETRON_TEST_MEDIA=$root/.testmedia
echo "build ${build_s}s"
ctest --test-dir "$build" -j 8 --output-on-failure >"$out/ctest.log" 2>&1
ctest_rc=$?
grep -E "tests passed|tests failed|Failed|Skipped|\*\*\*" "$out/ctest.log" | head -30
"$build/test/teletron_tests_pipeline" "[nvdec]" -s 2>&1 | grep -E "with expansion|INFO|path |reason:|luma|mean \||passed|failed" | head -60 >"$out/nvdec_detail.log"
tail -30 "$out/nvdec_detail.log"
scripts/video_acceptance.sh "$build/teletron" "$root/.videos" cuda "$out/acceptance" >"$out/acceptance.log" 2>&1
acc_rc=$?
cat "$out/acceptance.log" | grep -v "^  #\|^file:\|^container:\|^streams:\|^codec:\|^pixels\|^colour\|^frame rate\|^duration\|^keyframes\|^first/last" | head -150
echo "ctest rc=$ctest_rc acceptance rc=$acc_rc"
