#!/usr/bin/env bash
# The quickstart: installs what is missing, builds, writes a small synthetic latent dataset
# (data/quickstart, once) and trains the tiny preset on it with configs/quickstart.yaml.
# Extra arguments go to `teletron train` (e.g. --device cuda, --max-steps 100).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$root/scripts/setup.sh"
cd "$root"
build=${TELETRON_BUILD_DIR:-$root/build}
if [ ! -f data/quickstart/manifest.jsonl ]; then
  "$build/teletron" synth-data configs/quickstart.yaml --output data/quickstart --samples 64
fi
run="runs/quickstart-$(date +%Y%m%d-%H%M%S)"
"$build/teletron" train configs/quickstart.yaml --output "$run" "$@"
echo "[quickstart] run folder: $run (metrics.jsonl, checkpoints/)"
