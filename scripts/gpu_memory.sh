#!/usr/bin/env bash
# GPU machine: issue 14's memory rows (carry .device, and .wheels for the peer row).
# Builds into build-device/ (kept by a warm machine between calls), then, each part a table row in
# $OUT/summary.txt and its log in $OUT:
#   scripts/gpu_memory.sh PART...   the parts in order, one build:
#   estimate (= lora13b full1b)      `teletron bench --estimate-memory` on configurations whose
#                                    measured peak the estimate must meet within 10 %: 1b full
#                                    training without and with checkpointing, the 13B with LoRA
#                                    rank 32 and checkpointing at 33x480x832 (also issue 14's LoRA row:
#                                    step time and peak beside diffusers + peft's)
#   scripts/gpu_memory.sh lora13b_fused   the 13B LoRA row again with model.fused_kernels
#   scripts/gpu_memory.sh lora13b_auto    the 13B LoRA row with model.activation_checkpointing: auto
#                                    (the fewest recomputed blocks within 90 % of the H200; its plan
#                                    and its speed beside the fully checkpointed row)
#   scripts/gpu_memory.sh lora13b_keep    the 13B LoRA row, every block checkpointed, with
#                                    model.checkpoint_keeps_attention (the recompute skips attention;
#                                    its speed and peak beside the plain row and the peer's)
#   scripts/gpu_memory.sh keep1b     the 1b LoRA step, every block checkpointed, attention kept and
#                                    recomputed, side by side twice (what keeping attention buys)
#   scripts/gpu_memory.sh peer       scripts/bench_lora_peer.py at the same 13B LoRA shape (eager)
#   scripts/gpu_memory.sh skip1b     the 1b LoRA step, every block checkpointed, with and without the
#                                    recompute's skipped GEMMs (bench --recompute-all), side by side
#   scripts/gpu_memory.sh longest    the longest 720p clip (4n+1 frames) the 13B LoRA step fits with
#                                    full checkpointing, by the estimate, and one measured step at it
# Env: TELETRON_BUILD_TARGETS (default teletron), STEPS (3), PARTS_TIMEOUT (s per bench, 240).
set -uo pipefail
[ $# -ge 1 ] || { echo "usage: gpu_memory.sh PART... (lora13b lora13b_fused lora13b_auto lora13b_keep skip1b keep1b full1b estimate peer longest)"; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/.." && pwd)
export TELETRON_BUILD_DIR=${TELETRON_BUILD_DIR:-$root/build-device}
TELETRON_BUILD_TARGETS=${TELETRON_BUILD_TARGETS-teletron} source "$here/device_build.sh" || exit 1
echo "build ${build_s}s" | tee -a "$out/summary.txt"
steps=${STEPS:-3}
limit=${PARTS_TIMEOUT:-240}

# bench_row LABEL ARGS...: one bench with the estimate (none when called with estimate= set empty),
# its table's time and memory rows into the summary.
bench_row() {
  local label=$1; shift
  local start; start=$(date +%s)
  timeout "$limit" "$tt" bench --device cuda --warmup "${WARMUP:-1}" --steps "$steps" ${estimate---estimate-memory} \
    --json "$out/$label.json" "$@" >"$out/$label.log" 2>&1
  local rc=$?
  echo "== $label (exit $rc, $(( $(date +%s) - start )) s): $*" | tee -a "$out/summary.txt"
  grep -E "memory estimate|peak|full step \(|forward\+backward \||estimate at|longest clip|TT_ERR|^Where the GPU|^\| [a-zA-Z]+ \| [0-9.]+ \| [0-9.]+ % \|$" "$out/$label.log" |
    tee -a "$out/summary.txt"
}

for part in "$@"; do
case "$part" in
  estimate)
    "$0" lora13b full1b
    ;;
  lora13b)
    # One more step traced: kernel time by kind beside the peer's (its part traces one step too).
    bench_row 13b_lora_ckpt --preset 13b --set model.lora.rank=32 --set model.lora.alpha=32 \
      --set model.activation_checkpointing=true --trace "$out/traces/teletron_13b_lora.json" --trace-steps 1
    ;;
  lora13b_fused)
    # The same with model.fused_kernels, for its speed. On the CPU one checkpointed LoRA step peaks
    # at 44.83 MiB with it against 43.47 without and diffusers + peft's 44.87 (BENCHMARKS, the LoRA
    # step: base and adapters in one function each).
    bench_row 13b_lora_ckpt_fused --preset 13b --set model.lora.rank=32 --set model.lora.alpha=32 \
      --set model.activation_checkpointing=true --set model.fused_kernels=true
    ;;
  lora13b_auto)
    # auto on one H200: the estimate's plan (printed: "blocks recomputed in backward"), then its step.
    bench_row 13b_lora_auto --preset 13b --set model.lora.rank=32 --set model.lora.alpha=32 \
      --set model.activation_checkpointing=auto
    grep -E "blocks recomputed|activation_checkpointing: auto" "$out/13b_lora_auto.log" | tee -a "$out/summary.txt"
    ;;
  lora13b_keep)
    bench_row 13b_lora_ckpt_keep --preset 13b --set model.lora.rank=32 --set model.lora.alpha=32 \
      --set model.activation_checkpointing=true --set model.checkpoint_keeps_attention=true
    ;;
  keep1b)
    # What keeping the attention buys a fully checkpointed LoRA step (model/kept_attention.h): its
    # recompute skips the attention kernel for N x hidden x 2 bytes more per block; twice each.
    for round in 1 2; do
      for keep in false true; do
        estimate= WARMUP=2 steps=5 bench_row "1b_lora_ckpt_keep_${keep}_$round" --preset 1b --no-optimizer \
          --set model.lora.rank=32 --set model.lora.alpha=32 --set model.activation_checkpointing=true \
          --set model.checkpoint_keeps_attention=$keep
      done
    done
    ;;
  skip1b)
    # What a recomputed block's skipped GEMMs buy (the MLP down-projections and linear2 under LoRA,
    # model/activation_checkpoint.h), side by side at the 1b preset with LoRA rank 32, every block
    # checkpointed: the default against --recompute-all, twice each.
    for round in 1 2; do
      for variant in skip recompute_all; do
        estimate= WARMUP=2 steps=5 bench_row "1b_lora_ckpt_${variant}_$round" --preset 1b --no-optimizer \
          --set model.lora.rank=32 --set model.lora.alpha=32 --set model.activation_checkpointing=true \
          $([ "$variant" = recompute_all ] && echo --recompute-all)
      done
    done
    ;;
  full1b)
    bench_row 1b_full --preset 1b
    bench_row 1b_full_ckpt --preset 1b --set model.activation_checkpointing=true
    ;;
  peer)
    use_diffusers_wheels || echo "diffusers wheels not installed (see pip.log)" | tee -a "$out/summary.txt"
    timeout "$limit" python3 "$here/bench_lora_peer.py" --preset 13b --rank 32 --alpha 32 --checkpointing \
      --compile none --warmup 1 --steps "$steps" --json "$out/peer_lora.json" --trace "$out/traces" 2>&1 |
      tee "$out/peer_lora.log" | grep -E "^\||^peer kernel time" | tee -a "$out/summary.txt"
    gzip -f "$out"/traces/*.json 2>/dev/null || true
    ;;
  longest)
    # One step at the predicted clip takes minutes (attention grows with the square of ~200K tokens):
    # the line's prediction without neighbour probes, one timed forward+backward (no warm-up, no
    # optimizer step: its peak is the step's, LoRA's AdamW is small), 560 s.
    WARMUP=0 steps=1 limit=${LONGEST_TIMEOUT:-560} bench_row 13b_lora_720p_longest --preset 13b \
      --set model.lora.rank=32 --set model.lora.alpha=32 --set model.activation_checkpointing=true \
      --set train.expandable_segments=true --height 720 --width 1280 --max-frames --max-frames-checks 0 --no-optimizer
    ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
done
