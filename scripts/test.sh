#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test through ctest.
# Tests tagged [gpu] skip (and say so) on machines without a CUDA device.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
build=${TELETRON_BUILD_DIR:-$root/build}
ctest --test-dir "$build" --output-on-failure -j "${TELETRON_TEST_JOBS:-2}" "$@"
