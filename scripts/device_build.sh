#!/usr/bin/env bash
# Sourced by the GPU-machine scripts: bootstraps FFmpeg + LibTorch paths (.device/bootstrap.sh,
# from ../shared/device/prepare.sh) and builds teletron into $build (default build-device/ in the
# checkout, which a warm machine keeps between calls, so every GPU script chained there shares one build).
# Sets: root, out (logs, default $OUT or /tmp/tt_out), build, tt (the executable), build_s.
# TELETRON_BUILD_TARGETS (e.g. "teletron") builds only those targets: benchmarks need no test binaries.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
out=${OUT:-/tmp/tt_out}
mkdir -p "$out"
build=${TELETRON_BUILD_DIR:-$root/build-device}
[ -f .device/bootstrap.sh ] && source .device/bootstrap.sh
# Protocol Buffers (TensorBoard's event files): the GPU machine's image has none, so Debian 12's
# packages travel in .devdeps/ (`apt-get download protobuf-compiler libprotoc32 libprotobuf32
# libprotobuf-lite32 libprotobuf-dev` there) and are unpacked into /tmp/pb.
_tt_cmake_extra=()
if ! command -v protoc >/dev/null && ls .devdeps/*.deb >/dev/null 2>&1; then
  if [ ! -x /tmp/pb/usr/bin/protoc ]; then
    mkdir -p /tmp/pb
    for d in .devdeps/*.deb; do dpkg -x "$d" /tmp/pb; done
  fi
  export LD_LIBRARY_PATH=/tmp/pb/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  _tt_cmake_extra=(-DProtobuf_PROTOC_EXECUTABLE=/tmp/pb/usr/bin/protoc -DProtobuf_INCLUDE_DIR=/tmp/pb/usr/include
                   -DProtobuf_LIBRARY=/tmp/pb/usr/lib/x86_64-linux-gnu/libprotobuf.so
                   -DProtobuf_LITE_LIBRARY=/tmp/pb/usr/lib/x86_64-linux-gnu/libprotobuf-lite.so)
fi
_tt_start=$(date +%s)
# TELETRON_CMAKE_ARGS: more configure options (e.g. -DTELETRON_UNITY=OFF).
# shellcheck disable=SC2086
cmake -S . -B "$build" -G Ninja -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_BUILD_TYPE=Release "${_tt_cmake_extra[@]}" \
  ${TELETRON_CMAKE_ARGS:-} >"$out/configure.log" 2>&1 ||
  { tail -40 "$out/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" ${TELETRON_BUILD_TARGETS:+--target $TELETRON_BUILD_TARGETS} >"$out/build.log" 2>&1 || { grep -E "error|FAILED" -A5 "$out/build.log" | head -60; exit 1; }
build_s=$(( $(date +%s) - _tt_start ))
tt="$build/teletron"

# use_diffusers_wheels: makes `import diffusers` work for the Python peers. The image lacks diffusers,
# importlib_metadata and zipp; they travel as wheels in $WHEELS (default .wheels, made by
# scripts/prepare_device.sh) and go to /tmp/site, put on PYTHONPATH. The image's huggingface_hub 1.33
# (transformers refuses hub 2.x), numpy, pillow, safetensors, regex, requests and filelock serve them.
use_diffusers_wheels() {
  python3 -c "import diffusers" 2>/dev/null && return 0
  python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site "${WHEELS:-$root/.wheels}"/*.whl \
    >"$out/pip.log" 2>&1 || { tail -5 "$out/pip.log"; return 1; }
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
}
