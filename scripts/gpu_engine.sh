#!/usr/bin/env bash
# GPU machine: issue 12's engine checks and benchmarks (carry .device). Logs and a summary in $OUT.
#   scripts/gpu_engine.sh tests [N]        the engine's [gpu] tests (CUDA graphs, fused kernels, segment attention), N runs
#                                          each (default 3), one at a time; builds the test binaries.
#   scripts/gpu_engine.sh ablation [ARGS]  teletron bench --suite train --ablation at the 1b preset's
#                                          default shape (33x480x832); ARGS go to bench. The rows, warm-up
#                                          and timed steps of ablation, small and buckets come from ROWS,
#                                          WARMUP and STEPS (ROWS=2,3,2): bench adds a repeated --rows to
#                                          the part's own and refuses a second --warmup.
#   scripts/gpu_engine.sh small [ARGS]     the same at 33x256x256 (16x9x32x32 latents), where launch
#                                          overhead matters: main today against + CUDA Graphs, twice.
#   scripts/gpu_engine.sh buckets [ARGS]   benchmark (c): mixed buckets 33x256x256, 33x480x832,
#                                          65x256x448 at GLOBAL samples per step (16): ROWS (3,4: + CUDA
#                                          Graphs at the best fixed micro-batch against + dynamic batch)
#                                          side by side; BATCH, else found by a probe of the dynamic row.
#                                          Then BATCH=<printed> ROWS=2,3,6 for main today / graphs / full stack.
#   scripts/gpu_engine.sh plans            row 2 (main today: eager, text trimmed per batch) on (c)'s buckets
#                                          three times in one call: as shipped, with TORCH_CUDNN_SDPA_DEPRIORITIZED=1
#                                          (SDPA's masked calls then go to another kernel than cuDNN's), and with
#                                          data.text_trim_multiple 64 (4 text lengths instead of up to 256): is
#                                          the trimmed steps' idle GPU time (91 % busy) cuDNN building an
#                                          attention plan for each new text length? BATCH (default 2),
#                                          WARMUP (6), STEPS (9), PROFILE (3).
#   scripts/gpu_engine.sh curves [STEPS]   benchmark (d): loss curves on the 1b preset at 16x9x32x32
#                                          latents, STEPS steps (default 300), same data and seed, for
#                                          fp32, bf16, fp16, bf16 + graphs, bf16 + dynamic batch; the
#                                          mean loss of the last 50 steps of each against fp32's.
#                                          CURVES_GLOBAL samples per step (default 2).
#   scripts/gpu_engine.sh seed [STEPS]     configs/seed_8xa100.yaml as written (dynamic batch from 32, accumulation 4,
#                                          graphs on, bf16) on synthetic latents at 33x256x256 with the graph
#                                          warm-up cut to 3 steps (100 would take the call's time): STEPS steps
#                                          (default 12: the memory step, 3 trimmed and 3 padded warm-up steps, the capture, replays); the warnings for the keys that do not apply, the
#                                          micro-batches chosen and the graphs' summary.
#   scripts/gpu_engine.sh blockdiff [STEPS] diagnosis of block graphs against eager on the tiny model of the [gpu]
#                                          tests: checkpoints every step (default 6), per step the tensors that
#                                          differ most (eager vs whole-step graphs vs block graphs; bf16 and fp32).
#   TELETRON_PREBUILT=build/teletron OUT=/tmp/x CURVES_PRESET=tiny CURVES_TEXT=8 scripts/gpu_engine.sh curves 60
#                                          is a dry run of a part on the CPU.
set -uo pipefail
part=${1:?usage: gpu_engine.sh tests|ablation|small|buckets|curves [args...]}; shift
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
if [ -n "${TELETRON_PREBUILT:-}" ]; then  # a dry run of a part elsewhere: that executable, no build
  tt=$TELETRON_PREBUILT; out=${OUT:-/tmp/tt_out}; mkdir -p "$out"
  # On the GPU machine a second part in one call: the loader paths of its FFmpeg and LibTorch.
  command -v nvidia-smi >/dev/null && [ -f "$here/../.device/bootstrap.sh" ] && source "$here/../.device/bootstrap.sh"
else
  [ "$part" = tests ] || export TELETRON_BUILD_TARGETS=${TELETRON_BUILD_TARGETS:-teletron}
  source "$here/device_build.sh" || exit 1
  echo "build ${build_s}s" | tee -a "$out/summary.txt"
fi

bench() {  # bench LABEL ARGS...: one bench --suite train call, its table into the summary
  local label=$1; shift
  timeout "${BENCH_TIMEOUT:-400}" "$tt" bench --suite train --json "$out/$label.json" "$@" >"$out/$label.log" 2>&1
  echo "$label: bench exit $?" | tee -a "$out/summary.txt"
  grep -E "^\||^- |Kernel time|timed steps|CUDA graph|TT_ERR" "$out/$label.log" | tee -a "$out/summary.txt"
}

# Benchmark (c)'s buckets, one third of GLOBAL (16) samples each per step.
global=${GLOBAL:-16}
shapes=33x256x256,33x480x832,65x256x448
# buckets_bench LABEL ROWS MICRO_BATCH DEFAULT_WARMUP [ARGS...]: bench on (c)'s buckets at that fixed
# micro-batch (accumulation making up the global batch); WARMUP, STEPS, PROFILE override.
buckets_bench() {
  local label=$1 rows=$2 micro=$3 warmup=$4; shift 4
  bench "$label" --ablation --rows "$rows" --buckets "$shapes" --samples $((3 * global)) --batch "$micro" \
    --accumulation $((global / micro)) --warmup "${WARMUP:-$warmup}" --steps "${STEPS:-9}" --profile-steps "${PROFILE:-3}" "$@"
}

case "$part" in
  tests)
    n=${1:-3}
    for spec in "teletron_tests_app:[graph][gpu]" "teletron_tests_cuda:[fused][gpu]" "teletron_tests_model:[fused][gpu]" \
                "teletron_tests_model:[segments][gpu]"; do
      exe=${spec%%:*}; tags=${spec#*:}
      for i in $(seq 1 "$n"); do
        (cd "$build/test" && timeout 300 "./$exe" "$tags" >/tmp/tt_engine_test.log 2>&1)
        rc=$?
        { echo "=== $exe $tags run $i exit $rc"; cat /tmp/tt_engine_test.log; } >>"$out/tests.log"
        echo "$exe $tags run $i: exit $rc: $(grep -E '^test cases|All tests passed' /tmp/tt_engine_test.log | tail -1)" |
          tee -a "$out/summary.txt"
      done
    done
    grep -hE "FAILED:|largest relative" -A3 "$out/tests.log" | head -40 | tee -a "$out/summary.txt"
    ;;
  ablation) bench ablation --ablation --rows "${ROWS:-1,2,3,4,5,6,7,8}" --warmup "${WARMUP:-10}" --steps "${STEPS:-30}" "$@" ;;
  small) bench small --ablation --rows "${ROWS:-2,3,2,3}" --frames 33 --height 256 --width 256 --warmup "${WARMUP:-10}" \
           --steps "${STEPS:-30}" "$@" ;;
  # Benchmark (c) at a global batch of GLOBAL samples (default 16: the 1b preset's largest bucket fits
  # about 9 samples of 33x480x832 in 90 % of the H200, so a smaller global batch leaves dynamic
  # batching nothing to choose). The fixed rows' micro-batch is BATCH, by default the best fixed one:
  # a probe runs the dynamic row first, whose first step in each bucket measures its memory per
  # sample, and takes the smallest micro-batch it chose, down to a divisor of GLOBAL. Then one bench
  # run of ROWS (default 3,4: + CUDA Graphs at the fixed micro-batch against + dynamic batch, the
  # same but sized per bucket: the target's pair). Each bucket warms up on its own in the graph rows
  # (3 trimmed + 3 padded steps, the capture, 2 replays: WARMUP 30), then STEPS timed (default 9,
  # three per bucket) and PROFILE traced steps (default 3). On the H100 (stop 46) a step took 0.9,
  # 3.0 and 7.3 s for 33x256x256, 65x256x448 and 33x480x832 (micro-batch 2): ~3.7 s on average, so
  # a row of 42 steps takes ~160-200 s, and the probe ~60 s. With BATCH given (2 on the H100, the
  # probe's answer there) the probe is skipped and both rows fit one call. Run the other rows as
  # another call, e.g. BATCH=2 ROWS=2,3,6 (main today, graphs, full stack).
  buckets)
    if [ -z "${BATCH:-}" ]; then
      timeout "${PROBE_TIMEOUT:-240}" "$tt" bench --suite train --ablation --rows 4 --buckets "$shapes" \
        --samples $((3 * global)) --batch 1 --accumulation "$global" --warmup 5 --steps 1 --profile-steps 0 \
        >"$out/buckets_probe.log" 2>&1
      fits=$(grep -E "dynamic batch: bucket" "$out/buckets_probe.log" | grep -oE "allowed: micro-batches of [0-9]+" |
        grep -oE "[0-9]+$" | sort -n | head -1)
      [ -n "$fits" ] || { echo "buckets: the probe chose no micro-batch (buckets_probe.log)" | tee -a "$out/summary.txt"; tail -5 "$out/buckets_probe.log"; exit 1; }
      BATCH=1
      for b in $(seq 1 "$global"); do [ $((global % b)) -eq 0 ] && [ "$b" -le "$fits" ] && BATCH=$b; done
      grep -E "dynamic batch: bucket" "$out/buckets_probe.log" | tee -a "$out/summary.txt"
      echo "buckets: the best fixed micro-batch for all three buckets: BATCH=$BATCH (the dynamic row's smallest choice $fits, down to a divisor of $global)" |
        tee -a "$out/summary.txt"
    fi
    buckets_bench buckets "${ROWS:-3,4}" "$BATCH" 30 "$@"
    ;;
  plans)
    # LABEL:ENVIRONMENT:BENCH ARGUMENTS
    for spec in "shipped::" "cudnn_last:TORCH_CUDNN_SDPA_DEPRIORITIZED=1:" "multiple_64::--set data.text_trim_multiple=64"; do
      IFS=: read -r label setting extra <<<"$spec"
      ( [ -z "$setting" ] || export "${setting?}"
        echo "plans_$label: ${setting:-} ${extra:-}" | tee -a "$out/summary.txt"
        # shellcheck disable=SC2086 # extra is words
        buckets_bench "plans_$label" 2 "${BATCH:-2}" 6 $extra )
    done
    ;;
  curves)
    steps=${1:-300}
    work=/tmp/tt_curves; rm -rf "$work"; mkdir -p "$work"
    printf 'tele_tron:\n  model: {preset: %s}\n  data: {manifest: %s/data/manifest.jsonl, buckets: [{frames: 33, height: 256, width: 256}]}\n  train: {max_steps: %s, log_every: 1, checkpoint_every: 100000, seed: 7}\n' \
      "${CURVES_PRESET:-1b}" "$work" "$steps" >"$work/config.yaml"
    "$tt" synth-data "$work/config.yaml" --output "$work/data" --samples 64 --text-length "${CURVES_TEXT:-256}" >"$out/curves_data.log" 2>&1 ||
      { tail -5 "$out/curves_data.log"; exit 1; }
    # CURVES_GLOBAL samples per step (default 2): the fixed runs take them as micro-batches of 1 with
    # accumulation, the dynamic run as one micro-batch sized to memory, so its curve tests a
    # different batching of the same samples and noise (at 1 sample per step it would be bf16's run).
    # Each run under CURVE_TIMEOUT s (300): on the H100 fp32 took 306 ms per sample-step, so ~190 s
    # at 2 samples, and the five runs ~8 min: a call of its own.
    g=${CURVES_GLOBAL:-2}
    for spec in "fp32:--set mixed_precision.enabled=false --set cuda_graph.enabled=false" \
                "bf16:--set cuda_graph.enabled=false" \
                "fp16:--set mixed_precision.dtype=fp16 --set cuda_graph.enabled=false" \
                "graphs:--set cuda_graph.enabled=true --set cuda_graph.warmup_steps=10" \
                "dynamic:--set batch_size=dynamic --set dynamic_batch.initial=1 --set cuda_graph.enabled=false"; do
      name=${spec%%:*}; sets=${spec#*:}
      [ "$name" = dynamic ] || sets="$sets --set batch_size=1"
      start=$(date +%s)
      # shellcheck disable=SC2086
      timeout "${CURVE_TIMEOUT:-300}" "$tt" train "$work/config.yaml" --output "$work/$name" $sets --set gradient_accumulation="$g" \
        --set data.text_padding=full >"$out/curves_$name.log" 2>&1
      echo "curve $name: exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
      rm -rf "$work/$name/checkpoints"  # 13 GB each for the 1b preset: five fill the GPU machine's disk
    done
    python3 - "$work" <<'PY' | tee -a "$out/summary.txt"
import json, sys, os
work = sys.argv[1]
means = {}
for name in ["fp32", "bf16", "fp16", "graphs", "dynamic"]:
    path = os.path.join(work, name, "metrics.jsonl")
    if not os.path.exists(path):
        print(f"| {name} | no metrics |"); continue
    rows = [json.loads(l) for l in open(path) if l.strip()]
    last = [r["loss"] for r in rows[-50:]]
    means[name] = sum(last) / len(last)
print("| run | steps | mean loss, last 50 | vs fp32 |")
print("|---|---|---|---|")
for name, mean in means.items():
    ref = means.get("fp32")
    rel = f"{100.0 * (mean - ref) / ref:+.2f} %" if ref else "—"
    print(f"| {name} | {len(open(os.path.join(work, name, 'metrics.jsonl')).readlines())} | {mean:.4f} | {rel} |")
PY
    ;;
  seed)
    steps=${1:-12}
    work=/tmp/tt_seed; rm -rf "$work" /tmp/tt_curves; mkdir -p "$work"
    sets=(--set "data.manifest=$work/data/manifest.jsonl" --set "data.buckets=[{frames: 33, height: 256, width: 256}]"
          --set cuda_graph.warmup_steps=3 --set "train.max_steps=$steps" --set train.log_every=1
          --set train.checkpoint_every=100000)
    "$tt" synth-data "$here/../configs/seed_8xa100.yaml" "${sets[@]}" --output "$work/data" --samples 256 \
      --text-length 256 >"$out/seed_data.log" 2>&1 || { tail -5 "$out/seed_data.log"; exit 1; }
    start=$(date +%s)
    timeout "${BENCH_TIMEOUT:-300}" "$tt" train "$here/../configs/seed_8xa100.yaml" "${sets[@]}" --output "$work/run" \
      >"$out/seed.log" 2>&1
    echo "seed config: exit $? in $(( $(date +%s) - start )) s" | tee -a "$out/summary.txt"
    grep -E "warning|batch:|micro-batch|CUDA graph|step [0-9]+/|TT_ERR" "$out/seed.log" | head -60 | tee -a "$out/summary.txt"
    ;;
  blockdiff)
    steps=${1:-6}
    work=/tmp/tt_blockdiff; rm -rf "$work"; mkdir -p "$work"
    cat >"$work/config.yaml" <<YAML
tele_tron:
  model: {preset: tiny, num_attention_heads: 2, attention_head_dim: 16, rope_axes_dim: [4, 6, 6], num_layers: 1, num_single_layers: 1}
  data: {manifest: $work/data/manifest.jsonl, buckets: [{frames: 5, height: 64, width: 64}], text_padding: full}
  batch_size: 2
  optimizer: {lr: 2.0e-3, warmup_steps: 5, weight_decay: 0.0}
  flow_matching: {shift: 1.0}
  train: {device: cuda, max_steps: $steps, log_every: 1, checkpoint_every: 1, seed: 3}
  cuda_graph: {warmup_steps: 2, capture_frequency: 1000}
YAML
    "$tt" synth-data "$work/config.yaml" --output "$work/data" --samples 8 --text-length 8 >"$out/blockdiff_data.log" 2>&1 ||
      { tail -5 "$out/blockdiff_data.log"; exit 1; }
    for spec in "eager:--set cuda_graph.enabled=false" "step:--set cuda_graph.enabled=true" \
                "blocks:--set cuda_graph.enabled=true --set cuda_graph.scope=blocks" \
                "eager32:--set cuda_graph.enabled=false --set mixed_precision.enabled=false" \
                "blocks32:--set cuda_graph.enabled=true --set cuda_graph.scope=blocks --set mixed_precision.enabled=false" \
                ; do
      name=${spec%%:*}; sets=${spec#*:}
      # shellcheck disable=SC2086
      timeout 120 "$tt" train "$work/config.yaml" --output "$work/$name" $sets \
        >"$work/$name.log" 2>&1
      echo "blockdiff $name: exit $?; $(grep -E 'CUDA graphs?:|TT_ERR' "$work/$name.log" | tail -2 | tr '\n' ' ')" |
        tee -a "$out/summary.txt"
    done
    python3 - "$work" "$steps" <<'PY' | tee -a "$out/summary.txt"
import json, struct, sys, os
import numpy as np
work, steps = sys.argv[1], int(sys.argv[2])
def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    head = json.loads(raw[8:8 + n]); base = 8 + n; out = {}
    for name, info in head.items():
        if name == "__metadata__": continue
        a, b = info["data_offsets"]; buf = raw[base + a:base + b]
        if info["dtype"] == "F32": t = np.frombuffer(buf, np.float32)
        elif info["dtype"] == "BF16": t = (np.frombuffer(buf, np.uint16).astype(np.uint32) << 16).view(np.float32)
        else: continue
        out[name] = t.astype(np.float64)
    return out
def ckpt(run, step):
    return load(os.path.join(work, run, "checkpoints", f"step_{step:07d}", "model.safetensors"))
pairs = [("eager", "step"), ("eager", "blocks"), ("eager32", "blocks32")]
for ref, other in pairs:
    for step in range(4, steps + 1):
        try: a, b = ckpt(ref, step), ckpt(other, step)
        except Exception as e: print(f"{other} step {step}: {e}"); continue
        rows = sorted(((np.abs(a[k] - b[k]).max() / (np.abs(a[k]).max() + 1e-12), k) for k in a), reverse=True)
        print(f"{other} vs {ref} step {step}: worst " + ", ".join(f"{k} {d:.2e}" for d, k in rows[:4]))
PY
    ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
