#!/usr/bin/env bash
# GPU machine: the VAE encoder against diffusers (issue 5), same weights (random, fixed), same input,
# same run: teletron bench-vae whole, frame windows and tiled at 33x480x832 bf16, then diffusers on the dumped
# weights and input. Carry .device and .wheels (diffusers wheels: see scripts/bench_model.sh).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh" || exit 1
echo "build ${build_s}s"
use_diffusers_wheels || exit 1
json="$out/bench_vae.jsonl"
: >"$json"
# Runtimes side by side (ablation); the last one listed is the default and is the one dumped for
# the output comparison with diffusers. Smoke test off the GPU machine: VAE_PRESET=tiny VAE_DEVICE=cpu
# VAE_SIZE="9 64 320".
read -r frames height width <<<"${VAE_SIZE:-33 480 832}"
device=${VAE_DEVICE:-cuda}
"$tt" bench-vae --preset "${VAE_PRESET:-hunyuan}" --device "$device" --frames "$frames" --height "$height" \
  --width "$width" --tiling whole,frames,tiled \
  --runtimes "${VAE_RUNTIMES:-plain,channels-last,fused,fast,fast-batched,fast-padded-batched,fast-auto,fast-graphs,fast-padded,fast-folded,fast-gemm,fast-gemm-borders}" \
  --warmup 2 --steps 5 --dump /tmp/vae_dump --json "$json" 2>&1 | grep -E "^bench-vae|TT_ERR|error"
# Where the default runtime's time goes: each encoder stage's GPU time, FLOPs and MFU, and the time
# outside the passes (--stages; not appended to the comparison's JSON); then two encodes traced per
# mode (--trace): kernel time by kind, the convolutions' achieved TFLOP/s, the longest kernels.
"$tt" bench-vae --preset "${VAE_PRESET:-hunyuan}" --device "$device" --frames "$frames" --height "$height" \
  --width "$width" --tiling whole,frames,tiled --runtimes "${STAGE_RUNTIME:-fast-gemm-borders}" --warmup 1 --steps 3 --stages \
  --trace "$out/vae_traces" --json "$out/bench_vae_stages.jsonl" 2>&1 |
  grep -E "^bench-vae|^  \||^\| |^Where|^achieved|TT_ERR|error"
gzip -f "$out"/vae_traces/*.json 2>/dev/null || true  # the traces (kernel time by kind above) come back smaller
# The causal 3x3x3 convolution as cuDNN's 3D convolution (today) against 2D convolutions over the
# frames, at each encoder stage's shape (issue 15: layouts chosen by measurement). CONV_LAYOUTS=0 skips.
if [ "${CONV_LAYOUTS:-1}" = 1 ] && [ "$device" = cuda ]; then
  timeout 240 python3 scripts/bench_conv_layouts.py --json "$out/conv_layouts.json" 2>&1 | grep -E "^\||Error"
fi
python3 scripts/bench_vae_diffusers.py /tmp/vae_dump --device "$device" --warmup 2 --steps 5 --json "$json" \
  --cudnn-benchmark "${DIFFUSERS_CUDNN:-off,on}" 2>&1 | grep -E "^diffusers|Error"
python3 - "$json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = [r for r in rows if r.get("impl") != "diffusers"]
theirs = {(r["variant"], r.get("cudnn_benchmark", False)): r for r in rows if r.get("impl") == "diffusers"}
print("| variant | teletron runtime | teletron ms | teletron GiB | diffusers ms (as shipped) | speed-up | "
      "diffusers ms (cudnn.benchmark) | speed-up | diffusers GiB |")
print("|---|---|---|---|---|---|---|---|---|")
for o in ours:
    t = theirs.get((o["variant"], False))
    tb = theirs.get((o["variant"], True))
    if not t:
        continue
    fast = f"{tb['ms']:.1f} | {tb['ms'] / o['ms']:.2f}x" if tb else "- | -"
    print(f"| {o['variant']} | {o.get('runtime', '')} | {o['ms']:.1f} | {o['peak_gb']:.2f} | {t['ms']:.1f} | "
          f"{t['ms'] / o['ms']:.2f}x | {fast} | {t['peak_gb']:.2f} |")
for (variant, bench), t in sorted(theirs.items(), key=lambda item: (item[0][0], item[0][1])):
    print(f"diffusers {variant} (cudnn.benchmark {bench}) vs teletron's default runtime: max|diff|/max "
          f"{t.get('relative_error_vs_teletron', float('nan')):.2e}")
PY
