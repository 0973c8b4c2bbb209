#!/usr/bin/env bash
# GPU machine: issue 14's LoRA rows (carry .device and .wheels: scripts/prepare_device.sh .wheels on
# the development machine; the image has torch, peft, transformers).
# Builds teletron into build-device/, then in one call, side by side:
#   teletron bench --preset 13b with model.lora (rank 32, alpha 32) at 33x480x832, full activation
#   checkpointing, bf16 autocast: step time, samples/s and peak memory;
#   scripts/bench_lora_peer.py: diffusers HunyuanVideoTransformer3DModel + peft at the same shapes,
#   targets, rank and checkpointing, eager (COMPILE=default adds a torch.compile row).
# Then scripts/check_export_diffusers.py is available to the tests (ctest's export test stops skipping).
# Env: RANK (32), FRAMES/HEIGHT/WIDTH (33/480/832), STEPS (10), COMPILE (none).
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
export TELETRON_BUILD_DIR=${TELETRON_BUILD_DIR:-$root/build-device}
TELETRON_BUILD_TARGETS=${TELETRON_BUILD_TARGETS:-teletron} source "$here/device_build.sh" || exit 1
echo "build ${build_s}s" | tee -a "$out/summary.txt"
python3 -m pip install -q --no-index --no-deps --find-links "$root/.wheels" diffusers >"$out/pip.log" 2>&1 ||
  echo "diffusers wheel not installed (see pip.log)" | tee -a "$out/summary.txt"
rank=${RANK:-32} frames=${FRAMES:-33} height=${HEIGHT:-480} width=${WIDTH:-832} steps=${STEPS:-10}
timeout 300 "$tt" bench --preset 13b --device cuda --frames "$frames" --height "$height" --width "$width" \
  --warmup 3 --steps "$steps" --set model.lora.rank="$rank" --set model.lora.alpha="$rank" \
  --set model.activation_checkpointing=true --json "$out/teletron_lora.json" 2>&1 | tee "$out/teletron_lora.log" |
  grep -E "^\||LoRA:" | tee -a "$out/summary.txt"
for mode in none ${COMPILE:-}; do
  timeout 300 python3 "$here/bench_lora_peer.py" --preset 13b --frames "$frames" --height "$height" --width "$width" \
    --rank "$rank" --alpha "$rank" --checkpointing --compile "$mode" --warmup 3 --steps "$steps" \
    --json "$out/peer_lora_$mode.json" 2>&1 | tee "$out/peer_lora_$mode.log" | grep -E "^\|" | tee -a "$out/summary.txt"
done
