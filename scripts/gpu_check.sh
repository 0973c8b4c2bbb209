#!/usr/bin/env bash
# GPU machine check (run through the device tool from the repository root, after
# ../shared/device/prepare.sh on the development machine; carry .device):
# builds with the machine's LibTorch + CUDA, runs every test ([gpu] included), trains the
# quickstart on CUDA in bf16, times a short 1b-preset run at 33x480x832, and prints a summary.
# Logs go to $OUT (or /tmp/tt_out).
set -euo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh"

set +e
ctest --test-dir "$build" --output-on-failure -j 8 >"$out/ctest.log" 2>&1
ctest_rc=$?
set -e

"$tt" synth-data configs/quickstart.yaml --output /tmp/tt_qs --samples 64 >"$out/quickstart_data.log" 2>&1
"$tt" train configs/quickstart.yaml --device cuda --output /tmp/tt_runs/quickstart_cuda \
  --set data.manifest=/tmp/tt_qs/manifest.jsonl >"$out/quickstart_cuda.log" 2>&1

cat >/tmp/tt_1b.yaml <<'YAML'
tele_tron:
  model: {preset: 1b}
  data:
    manifest: /tmp/tt_1b/manifest.jsonl
    buckets: [{frames: 33, height: 480, width: 832}]
  optimizer: {lr: 1.0e-4, warmup_steps: 5}
  train: {device: cuda, max_steps: 30, log_every: 5, checkpoint_every: 30, keep_checkpoints: 1}
YAML
"$tt" synth-data /tmp/tt_1b.yaml --output /tmp/tt_1b --samples 8 --text-length 256 >"$out/1b_data.log" 2>&1
"$tt" train /tmp/tt_1b.yaml --output /tmp/tt_runs/run_1b >"$out/1b_train.log" 2>&1
cp /tmp/tt_runs/quickstart_cuda/metrics.jsonl "$out/quickstart_cuda_metrics.jsonl"
cp /tmp/tt_runs/run_1b/metrics.jsonl "$out/1b_metrics.jsonl"

python3 - "$out" "$build_s" "$ctest_rc" <<'PY'
import json, sys
out, build_s, ctest_rc = sys.argv[1], sys.argv[2], sys.argv[3]
def rows(path):
    return [json.loads(l) for l in open(path) if l.strip()]
q = rows(f"{out}/quickstart_cuda_metrics.jsonl")
b = rows(f"{out}/1b_metrics.jsonl")
first = sum(r["loss"] for r in q[:10]) / 10
last = sum(r["loss"] for r in q[-10:]) / 10
print("| check | result |")
print("|---|---|")
print(f"| build (s) | {build_s} |")
print(f"| ctest exit code | {ctest_rc} |")
print(f"| quickstart cuda: mean loss first 10 logs -> last 10 | {first:.4f} -> {last:.4f} (ratio {last/first:.3f}) |")
print(f"| quickstart cuda: step_ms (last log) | {q[-1]['step_ms']:.1f} |")
steady = b[1:]
print(f"| 1b 33x480x832 bf16: step_ms (mean of logs after the first) | {sum(r['step_ms'] for r in steady)/len(steady):.1f} |")
print(f"| 1b: samples/s | {sum(r['samples_per_s'] for r in steady)/len(steady):.3f} |")
print(f"| 1b: peak_mem_gb | {max(r['peak_mem_gb'] for r in b):.2f} |")
print(f"| 1b: loss first -> last log | {b[0]['loss']:.4f} -> {b[-1]['loss']:.4f} |")
PY
tail -5 "$out/ctest.log"
grep -E "Skipped|Failed|fused flow-matching" "$out/ctest.log" | head -20 || true
[ "$ctest_rc" -eq 0 ] || exit "$ctest_rc"
