#!/usr/bin/env bash
# Sourced by the GPU-machine scripts: bootstraps FFmpeg + LibTorch paths (.device/bootstrap.sh,
# from ../shared/device/prepare.sh) and builds teletron into $build (default /tmp/build).
# Sets: root, out (logs, default $OUT or /tmp/tt_out), build, tt (the executable), build_s.
# TELETRON_BUILD_TARGETS (e.g. "teletron") builds only those targets: benchmarks need no test binaries.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${OUT:-/tmp/tt_out}
mkdir -p "$out"
build=${TELETRON_BUILD_DIR:-/tmp/build}
[ -f .device/bootstrap.sh ] && source .device/bootstrap.sh
_tt_start=$(date +%s)
cmake -S . -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 ||
  { tail -40 "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" ${TELETRON_BUILD_TARGETS:+--target $TELETRON_BUILD_TARGETS} >"$out/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$out/build.log" | head -60; exit 1; }
build_s=$(( $(date +%s) - _tt_start ))
tt="$build/teletron"
