#!/usr/bin/env bash
# GPU machine: the VAE encoder against diffusers (issue 5), same weights (random, fixed), same input,
# same run: teletron bench-vae whole and tiled at 33x480x832 bf16, then diffusers on the dumped
# weights and input. Carry .device and .wheels (diffusers wheels: see scripts/bench_model.sh).
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh" || exit 1
echo "build ${build_s}s"
if ! python3 -c "import diffusers" 2>/dev/null; then
  pip install --no-index --find-links "$root/.wheels" diffusers >"$out/pip.log" 2>&1 || { tail -5 "$out/pip.log"; exit 1; }
fi
json="$out/bench_vae.jsonl"
: >"$json"
"$tt" bench-vae --preset hunyuan --device cuda --frames 33 --height 480 --width 832 --tiling both \
  --warmup 2 --steps 5 --dump /tmp/vae_dump --json "$json" 2>&1 | grep -E "^bench-vae|TT_ERR"
python3 scripts/bench_vae_diffusers.py /tmp/vae_dump --device cuda --warmup 2 --steps 5 --json "$json" 2>&1 |
  grep -E "^diffusers|Error"
python3 - "$json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
ours = {r["variant"]: r for r in rows if r.get("impl") != "diffusers"}
theirs = {r["variant"]: r for r in rows if r.get("impl") == "diffusers"}
print("| variant | teletron ms | diffusers ms | speed-up | teletron GiB | diffusers GiB | max rel. diff |")
print("|---|---|---|---|---|---|---|")
for v in ("whole", "tiled"):
    if v in ours and v in theirs:
        o, t = ours[v], theirs[v]
        print(f"| {v} | {o['ms']:.1f} | {t['ms']:.1f} | {t['ms'] / o['ms']:.2f}x | {o['peak_gb']:.2f} | {t['peak_gb']:.2f} | "
              f"{t.get('relative_error_vs_teletron', float('nan')):.2e} |")
PY
