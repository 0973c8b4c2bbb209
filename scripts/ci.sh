#!/usr/bin/env bash
# The CI pipeline (.ci/run execs it on a fresh clone; Debian 12, 2 cores, no GPU), in timed legs:
#   install       scripts/setup.sh's packages + torch, and clang-14 with its sanitizer/fuzzer runtimes
#   build         the normal build (scripts/setup.sh: gcc, build/)
#   tests         the README's test command (scripts/test.sh: every ctest test, fuzz replays included)
#   asan-build    teletron's libraries under ASan + UBSan with clang (LibTorch as shipped, CUDA off),
#                 the core and pipeline test executables and the libFuzzer targets, into build-asan/
#   asan-tests    that build's core, pipeline and fuzz-replay tests (ctest -L; runtime options:
#                 test/sanitizers/env.sh); the app and model tiers run in the normal tests leg only
#   fuzz          each libFuzzer target for TELETRON_FUZZ_SECONDS (60) from its seed corpus
# and ends with a table of leg times and, per fuzz target, executions and crashes. Fails when any
# leg fails: a test, a sanitizer report, or a fuzzer crash, leak, out-of-memory or timeout. Crashes
# whose top frame lies in FFmpeg (an uninstrumented distro library) are listed as third-party and
# do not fail the run (test/sanitizers/README.md). Artifacts (logs, crash inputs) go to build-ci/.
# The sanitizer legs (asan-build, asan-tests, fuzz) gate the run only with TELETRON_CI_STRICT=1
# (.ci/run sets it, so in CI they gate); otherwise their result is reported
# in the summary as "report-only". They are skipped, and said so, once the run has used
# TELETRON_CI_BUDGET_S (default 4200 s), so CI ends within its limit whatever they cost.
# Environment: TELETRON_FUZZ_SECONDS, TELETRON_FUZZ_SEED (20261201; 0 = random), TELETRON_FUZZ_RSS_MB (2048), TELETRON_CI_LEGS (a subset,
# e.g. "asan-build asan-tests fuzz"), TELETRON_FUZZ_TARGETS (a subset), TELETRON_JOBS (build jobs,
# default nproc).
set -uo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
ci=${TELETRON_CI_DIR:-$root/build-ci}
mkdir -p "$ci"
asan_build=${TELETRON_ASAN_BUILD_DIR:-$root/build-asan}
fuzz_seconds=${TELETRON_FUZZ_SECONDS:-60}
fuzz_rss_mb=${TELETRON_FUZZ_RSS_MB:-2048}
# A fixed seed by default, so that CI's fuzz leg follows the same path as a run here (up to where
# the time limit cuts it); TELETRON_FUZZ_SEED=0 lets libFuzzer pick one (wider exploration, not a gate).
fuzz_seed=${TELETRON_FUZZ_SEED:-20261201}
jobs=${TELETRON_JOBS:-$(nproc)}
legs_wanted=${TELETRON_CI_LEGS:-"install build tests asan-build asan-tests fuzz"}
strict=${TELETRON_CI_STRICT:-0}
budget_s=${TELETRON_CI_BUDGET_S:-4200}
report_only_legs=" asan-build asan-tests fuzz "
read -r -a fuzz_targets <<<"${TELETRON_FUZZ_TARGETS:-safetensors torch_save config latent_manifest video_manifest video_reader frame_choice frame_convert}"
third_party='lib(avcodec|avformat|avutil|swscale|swresample|x264|x265|vpx|dav1d|aom)[^ /]*\.so'

say() { echo "[ci] $*"; }
as_root() {
  if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
    echo "[ci] need root to run: $*" >&2; return 1; fi
}

total_start=$SECONDS
leg_names=()
leg_seconds=()
leg_status=()
failed=0
# leg NAME COMMAND...: runs COMMAND unless NAME is not wanted, times it, records its status.
leg() {
  local name=$1
  shift
  if [[ " $legs_wanted " != *" $name "* ]]; then
    return 0
  fi
  local optional=0
  [[ "$strict" != 1 && "$report_only_legs" == *" $name "* ]] && optional=1
  if [[ "$report_only_legs" == *" $name "* ]] && [ $((SECONDS - total_start)) -ge "$budget_s" ]; then
    say "$name: skipped, the run has used $((SECONDS - total_start)) s of its ${budget_s} s budget"
    leg_names+=("$name"); leg_seconds+=(0); leg_status+=("skipped (time budget)")
    return 1
  fi
  say "=== $name ==="
  local start=$SECONDS rc=0
  "$@" || rc=$?
  leg_names+=("$name")
  leg_seconds+=($((SECONDS - start)))
  if [ $rc -eq 0 ]; then
    leg_status+=("ok")
  elif [ $optional -eq 1 ]; then
    leg_status+=("FAILED (rc $rc; report-only, TELETRON_CI_STRICT=0)")
  else
    leg_status+=("FAILED (rc $rc)"); failed=1
  fi
  say "$name: $((SECONDS - start)) s, rc $rc"
  return $rc
}

install_all() {
  TELETRON_SETUP_NO_BUILD=1 scripts/setup.sh || return
  local need=()
  for pkg in clang-14 libclang-rt-14-dev llvm-14; do dpkg -s "$pkg" >/dev/null 2>&1 || need+=("$pkg"); done
  if [ ${#need[@]} -gt 0 ]; then
    say "installing ${need[*]}"
    as_root apt-get install -y -qq "${need[@]}" >/dev/null || {
      as_root apt-get update -qq && as_root apt-get install -y -qq "${need[@]}" >/dev/null; }
  fi
}

build_normal() { scripts/setup.sh; }
tests_normal() { scripts/test.sh; }

# The Python setup.sh chose (a .venv when the system pip refused).
python_bin() {
  if python3 -c 'import torch' >/dev/null 2>&1; then command -v python3; else echo "$root/.venv/bin/python"; fi
}

build_asan() {
  if [ ! -f "$asan_build/build.ninja" ]; then
    # TORCH_CUDA_ARCH_LIST keeps TorchConfig from running a GPU probe where a CUDA toolkit exists.
    TORCH_CUDA_ARCH_LIST=${TORCH_CUDA_ARCH_LIST:-9.0} cmake -S "$root" -B "$asan_build" -G Ninja \
      -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=clang-14 -DCMAKE_CXX_COMPILER=clang++-14 \
      -DTELETRON_CUDA=OFF -DTELETRON_FUZZ=ON -DPython3_EXECUTABLE="$(python_bin)" \
      >"$ci/asan-configure.log" 2>&1 || { tail -40 "$ci/asan-configure.log"; return 1; }
  fi
  local rc=0
  # The libraries, the core and pipeline test executables (file formats, video, data: the code that
  # reads what users hand in) and the fuzz targets; not the app's and model's tests, which are
  # end-to-end training runs and numerics (the normal tests leg runs them).
  cmake --build "$asan_build" -j "$jobs" --target teletron_tests_core teletron_tests_pipeline teletron_fuzz_targets \
    >"$ci/asan-build.log" 2>&1 || rc=$?
  grep -E '^(FAILED|.*error:|CMake Error)' "$ci/asan-build.log" | head -40
  [ $rc -eq 0 ] || tail -20 "$ci/asan-build.log"
  return $rc
}

tests_asan() {
  # shellcheck source=../test/sanitizers/env.sh
  source "$root/test/sanitizers/env.sh"
  # Bounded so that the whole run ends by budget + 10 minutes (CI's hard limit is 90).
  local left=$((budget_s + 600 - (SECONDS - total_start)))
  [ "$left" -gt 60 ] || left=60
  timeout "$left" ctest --test-dir "$asan_build" --output-on-failure -j "${TELETRON_TEST_JOBS:-2}" \
    -L '^(core|pipeline|fuzz)$' \
    >"$ci/asan-tests.log" 2>&1
  local rc=$?
  [ $rc -eq 124 ] && say "asan-tests: stopped after $left s (time budget)"
  grep -E 'tests passed|tests failed|Total Test time' "$ci/asan-tests.log"
  grep -E '^\s*[0-9]+ - .*\((Failed|SEGFAULT|Subprocess aborted|Timeout|Exception|Not Run)\)' "$ci/asan-tests.log"
  grep -E '^SUMMARY: (Address|Undefined|Leak)Sanitizer' "$ci/asan-tests.log" | sort | uniq -c
  return $rc
}

# Per-target libFuzzer flags: a dictionary where test/fuzz/<name>.dict exists.
declare -A fuzz_flags=()
for name in "${fuzz_targets[@]}"; do
  [ -f "$root/test/fuzz/$name.dict" ] && fuzz_flags[$name]="-dict=$root/test/fuzz/$name.dict"
done

# One target, results into $ci/fuzz/<name>/result. Fork mode with -ignore_crashes, so that the run
# goes on after a crash and counts them (libFuzzer's "oom/timeout/crash: a/b/c" status).
fuzz_one() {
  local name=$1 bin="$asan_build/test/fuzz/fuzz_$1" dir="$ci/fuzz/$1"
  rm -rf "$dir"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  # shellcheck disable=SC2086
  "$bin" -fork=1 -ignore_crashes=1 -ignore_ooms=1 -ignore_timeouts=1 -max_total_time="$fuzz_seconds" \
    -seed="$fuzz_seed" -rss_limit_mb="$fuzz_rss_mb" -timeout=30 -print_final_stats=1 -print_funcs=0 ${fuzz_flags[$name]:-} \
    -artifact_prefix="$dir/artifacts/" "$dir/corpus" "$root/test/fuzz/corpus/$name" >"$dir/fuzz.log" 2>&1
  local rc=$?
  local last execs crashes ooms timeouts
  last=$(grep -oE '#[0-9]+: cov: .* oom/timeout/crash: [0-9]+/[0-9]+/[0-9]+' "$dir/fuzz.log" | tail -1)
  execs=$(sed -E 's/^#([0-9]+):.*/\1/' <<<"$last")
  read -r ooms timeouts crashes < <(sed -E 's#.*oom/timeout/crash: ([0-9]+)/([0-9]+)/([0-9]+).*#\1 \2 \3#' <<<"$last")
  execs=${execs:-0} ooms=${ooms:-0} timeouts=${timeouts:-0} crashes=${crashes:-0}
  local ours=0 theirs=0 artifact report verdict
  : >"$dir/findings"
  for artifact in "$dir"/artifacts/*; do
    [ -f "$artifact" ] || continue
    # Replay alone for the report: which sanitizer, where.
    report=$(timeout 120 "$bin" -timeout=30 "$artifact" 2>&1 | grep -E '^SUMMARY:|fuzz: |what\(\):|runtime error:' | head -3 | tr '\n' ' ')
    if grep -qE "^SUMMARY:.*$third_party" <<<"$report"; then
      theirs=$((theirs + 1)); echo "third-party (FFmpeg) $(basename "$artifact"): $report" >>"$dir/findings"
    else
      ours=$((ours + 1)); echo "ours $(basename "$artifact"): $report" >>"$dir/findings"
    fi
  done
  if [ "$ours" -gt 0 ] || [ "$crashes" -gt "$theirs" ] || [ "$ooms" -gt 0 ] || [ "$timeouts" -gt 0 ]; then
    verdict="FAILED ($ours ours, $theirs third-party)"
  elif [ $rc -ne 0 ]; then
    verdict="FAILED (fuzzer rc $rc, see $dir/fuzz.log)"
  elif [ "$theirs" -gt 0 ]; then
    verdict="ok ($theirs third-party)"
  else
    verdict="ok"
  fi
  echo "$execs|$crashes|$ooms/$timeouts|$verdict" >"$dir/result"
}

# The targets, TELETRON_FUZZ_PARALLEL (default: the core count) at a time.
fuzz_all() {
  # shellcheck source=../test/sanitizers/env.sh
  source "$root/test/sanitizers/env.sh"
  # One LibTorch thread per fuzzer: the targets' tensors are tiny and OpenMP's spinning workers
  # cost more than they give (frame_convert: 4.6x more executions with one thread).
  export OMP_NUM_THREADS=1
  local parallel=${TELETRON_FUZZ_PARALLEL:-$(nproc)} name running=0
  for name in "${fuzz_targets[@]}"; do
    say "fuzzing $name for $fuzz_seconds s"
    fuzz_one "$name" &
    running=$((running + 1))
    if [ "$running" -ge "$parallel" ]; then wait -n; running=$((running - 1)); fi
  done
  wait
  local rc=0
  for name in "${fuzz_targets[@]}"; do
    [ -s "$ci/fuzz/$name/findings" ] && sed "s/^/[ci] $name: /" "$ci/fuzz/$name/findings"
    grep -q '|ok' "$ci/fuzz/$name/result" 2>/dev/null || rc=1
  done
  return $rc
}

leg install install_all || { say "install failed; stopping"; legs_wanted=""; }
leg build build_normal || { say "build failed; skipping the normal tests"; legs_wanted=" $legs_wanted "; legs_wanted=${legs_wanted/ tests / }; }
leg tests tests_normal
leg asan-build build_asan || { say "sanitizer build failed; skipping its tests and the fuzzers"; legs_wanted=""; }
leg asan-tests tests_asan
leg fuzz fuzz_all

echo
echo "==================== CI summary ===================="
printf '%-12s %8s  %s\n' "leg" "seconds" "status"
for i in "${!leg_names[@]}"; do
  printf '%-12s %8s  %s\n' "${leg_names[$i]}" "${leg_seconds[$i]}" "${leg_status[$i]}"
done
printf '%-12s %8s\n' "total" "$((SECONDS - total_start))"
if [[ " $legs_wanted " == *" fuzz "* ]]; then
  echo
  printf '%-16s %12s %8s %12s  %s\n' "fuzz target" "executions" "crashes" "oom/timeout" "status"
  for name in "${fuzz_targets[@]}"; do
    IFS='|' read -r execs crashes other verdict <"$ci/fuzz/$name/result" 2>/dev/null ||
      { execs=- crashes=- other=- verdict="not run"; }
    printf '%-16s %12s %8s %12s  %s\n' "$name" "$execs" "$crashes" "$other" "$verdict"
  done
  echo "(executions and crashes as libFuzzer counted them; inputs and logs: $ci/fuzz/<target>/)"
fi
exit $failed
