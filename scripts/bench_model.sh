#!/usr/bin/env bash
# GPU machine: the model benchmark of BENCHMARKS.md. Builds teletron, installs the carried diffusers
# wheels (.wheels/, from `pip download` on the development machine), then in one run times the 1b
# preset at 33x480x832 (latents 16x9x60x104) + 256 text tokens: `teletron bench` and diffusers eager
# and torch.compile (scripts/bench_diffusers.py), and prints a markdown table.
# Extra arguments go to both benchmarks' shape flags (e.g. --text-valid 64).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"
use_diffusers_wheels || echo "diffusers wheels missing: the diffusers rows will fail"
# Without the fused kernels (model.fused_kernels false), then the default (on).
"$tt" bench --preset 1b --device cuda --json "$out/teletron_1b.json" --set model.fused_kernels=false \
  --trace "$out/traces/teletron.json" "$@" \
  >"$out/teletron_bench.log" 2>&1 ||
  { tail -20 "$out/teletron_bench.log"; exit 1; }
# The default: model.fused_kernels (fused kernels, GELU + down-projection and modulated LayerNorm +
# Linear keeping fewer activations).
"$tt" bench --preset 1b --device cuda --json "$out/teletron_1b_fused.json" \
  --trace "$out/traces/teletron_fused.json" "$@" \
  >"$out/teletron_bench_fused.log" 2>&1 || { tail -20 "$out/teletron_bench_fused.log"; exit 1; }
python3 scripts/bench_diffusers.py --preset 1b --trace "$out/traces" "$@" >"$out/diffusers_1b.json" 2>"$out/diffusers_bench.log" ||
  { tail -20 "$out/diffusers_bench.log"; exit 1; }
cat "$out/teletron_bench.log"
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
t = json.load(open(f"{out}/teletron_1b.json"))
f = json.load(open(f"{out}/teletron_1b_fused.json"))
d = json.loads(open(f"{out}/diffusers_1b.json").read().strip().splitlines()[-1])
print(f"\n1b preset, batch 1, {t['video_tokens']} video + {t['text_tokens']} text tokens ({t['text_valid']} valid), "
      f"{t['device']}; diffusers {d['diffusers_version']}, torch {d['torch_version']}")
print(f"exact FLOPs per fwd+bwd: teletron {t['step_tflop']:.2f} TFLOP, reference script {d['step_tflop']:.2f} TFLOP")
print("| variant | fwd+bwd ms | video tokens/s | MFU vs measured matmul | MFU vs 989 | peak GiB |")
print("|---|---|---|---|---|---|")
def row(name, ms, mfu_m, mfu_d, peak, rate):
    print(f"| {name} | {ms:.1f} | {t['video_tokens'] * 1000 / ms:.0f} | {100*mfu_m:.1f} % (of {rate:.0f}) | {100*mfu_d:.1f} % | {peak:.1f} |")
row("teletron, model.fused_kernels false", t["fwd_bwd_ms"], t["mfu_measured"], t["mfu_datasheet"], t["peak_gb_fwd_bwd"], t["matmul_tflops"])
row("teletron (default: fused kernels; bf16 autocast, fp32 master)", f["fwd_bwd_ms"], f["mfu_measured"], f["mfu_datasheet"], f["peak_gb_fwd_bwd"], f["matmul_tflops"])
row("diffusers eager (bf16 weights)", d["eager_ms"], d["eager_mfu_measured"], d["eager_mfu_datasheet"], d["eager_peak_gb"], d["matmul_tflops"])
if "compiled_ms" in d:
    row("diffusers + torch.compile", d["compiled_ms"], d["compiled_mfu_measured"], d["compiled_mfu_datasheet"], d["compiled_peak_gb"], d["matmul_tflops"])
for name, r in (("teletron, fused kernels off", t), ("teletron (default, fused)", f)):
    print(f"\n{name} speed-up: {d['eager_ms']/r['fwd_bwd_ms']:.2f}x vs eager"
          + (f", {d['compiled_ms']/r['fwd_bwd_ms']:.2f}x vs compiled" if "compiled_ms" in d else ""))
print(f"teletron (default) full step with clip + AdamW: {f['full_step_ms']:.1f} ms, peak {f['peak_gb']:.1f} GiB")
# Where each variant's GPU time goes: kernel time per forward+backward by kind, from the traces.
splits = [("teletron, unfused", t.get("time_split")), ("teletron (default, fused)", f.get("time_split")),
          ("diffusers eager", d.get("eager_time_split")), ("diffusers compiled", d.get("compiled_time_split"))]
splits = [(name, s) for name, s in splits if s and s.get("kernel_ms_by_kind")]
if splits:
    kinds = sorted({k for _, s in splits for k in s["kernel_ms_by_kind"]},
                   key=lambda k: -max(s["kernel_ms_by_kind"].get(k, 0) for _, s in splits))
    print("\nKernel time per forward+backward by kind (ms, two traced passes each):")
    print("| kind | " + " | ".join(name for name, _ in splits) + " |")
    print("|---|" + "---|" * len(splits))
    for k in kinds + ["all kernels"]:
        cells = [sum(s["kernel_ms_by_kind"].values()) if k == "all kernels" else s["kernel_ms_by_kind"].get(k, 0)
                 for _, s in splits]
        print(f"| {k} | " + " | ".join(f"{c:.1f}" for c in cells) + " |")
    for name, s in splits:
        print(f"\n{name}: longest kernels (ms per pass)")
        for k in s["top_kernels"][:8]:
            print(f"  {k['ms']:8.2f}  {k['kind']:12s} {k['name'][:120]}")
gib = 2 ** 30
print("\nActivation memory (peak during fwd+bwd minus what the step holds after it and, for teletron, the weights'"
      " autocast copies):")
print("| run | parameters GiB | gradients GiB | autocast copies GiB | activations GiB |")
print("|---|---|---|---|---|")
for name, r in (("teletron, fused kernels off", t), ("teletron (default, fused)", f)):
    print(f"| {name} | {r['parameter_bytes']/gib:.2f} | {r['gradient_bytes']/gib:.2f} | {r['autocast_copy_bytes']/gib:.2f} | "
          f"{r['activation_bytes']/gib:.2f} |")
print(f"| diffusers eager | {d['parameter_gb']:.2f} | {d['gradient_gb']:.2f} | 0 | {d['eager_activation_gb']:.2f} |")
if "compiled_activation_gb" in d:
    print(f"| diffusers + torch.compile | {d['parameter_gb']:.2f} | {d['gradient_gb']:.2f} | 0 | "
          f"{d['compiled_activation_gb']:.2f} |")
PY
gzip -f "$out"/traces/*.json 2>/dev/null || true  # the traces come back smaller
