#!/usr/bin/env bash
# GPU machine, issue 14's "encode-text and sample on the GPU" target: the time per caption of
# `teletron encode-text` with text encoders of the released shapes (random weights,
# scripts/make_random_text_pipeline.py: an 8 B Llama, CLIP-L) in bf16, and the time per video of
# `teletron sample` with the 13b Transformer (--weights random: freshly initialised) and the
# HunyuanVideo VAE decoder (random weights) at 33x480x832, 30 steps.
# Parts (FT_PARTS, default "encode sample"): encode needs .benchclips (any clip: the rows only need a
# video file), sample needs a text-embeddings file of the 13b widths (the encode part's, or a random
# one it writes). Carry .device .wheels .devdeps .benchclips.
# Environment: FT_CAPTIONS (256), FT_BATCH (encode-text --batch-size, 32), FT_STEPS (30).
set -uo pipefail
TELETRON_BUILD_TARGETS=${TELETRON_BUILD_TARGETS:-teletron}
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh" || exit 1
echo "build ${build_s}s"
use_diffusers_wheels || exit 1
work=/tmp/ft
mkdir -p "$work"
clip=$(ls "$root"/.benchclips/*.mp4 2>/dev/null | head -1)
cat >"$work/ft.yaml" <<EOF
tele_tron:
  model: {preset: 13b}
  vae: {preset: hunyuan, weights: random}
  text_encoder: {pipeline: $work/pipeline, batch_size: ${FT_BATCH:-32}}
  data:
    source: video
    manifest: $work/manifest.jsonl
    text_cache: $work/cache
  train: {device: cuda}
EOF
prompt_file=""
for part in ${FT_PARTS:-encode sample}; do
  case $part in
    encode)
      [ -n "$clip" ] || { echo "encode: no clip in .benchclips"; continue; }
      python3 "$root/scripts/make_random_text_pipeline.py" "$work/pipeline" 2>&1 | grep -vE "Writing|Loading" | tail -2
      python3 - "$work/manifest.jsonl" "$clip" "${FT_CAPTIONS:-256}" <<'PY'
import json, random, sys
path, clip, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
random.seed(0)
words = ("a cat dog river city street night rain slow camera pan close-up aerial shot of the over under "
         "walking running bright dark sunset forest snow people car light window").split()
with open(path, "w") as f:
    for i in range(count):  # captions of 8 to 80 words, all distinct
        caption = f"Clip {i}: " + " ".join(random.choice(words) for _ in range(random.randint(8, 80))) + "."
        f.write(json.dumps({"video": clip, "caption": caption}) + "\n")
PY
      start=$(date +%s.%N)
      "$tt" encode-text "$work/ft.yaml" --prompt "A cat walks across a sunny kitchen floor." >"$out/encode_text.log" 2>&1
      rc=$?
      wall=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
      grep -E "encode-text: (encoders loaded|[0-9]+/[0-9]+ captions|done|.* distinct)|TT_ERR|Error" "$out/encode_text.log" | tail -6
      echo "encode: rc $rc, ${FT_CAPTIONS:-256} captions + the empty one and the prompt, ${wall} s wall (encoder load included)"
      prompt_file=$(grep -oE '\-> .*\.safetensors' "$out/encode_text.log" | tail -1 | cut -c4-)
      ;;
    sample)
      if [ -z "$prompt_file" ]; then
        prompt_file=$work/prompt.safetensors
        python3 - "$prompt_file" <<'PY'
import sys, torch
from safetensors.torch import save_file
torch.manual_seed(0)
mask = torch.zeros(256, dtype=torch.uint8)
mask[:40] = 1
save_file({"text_states": torch.randn(256, 4096), "text_mask": mask, "pooled": torch.randn(768)}, sys.argv[1])
PY
      fi
      "$tt" sample "$work/ft.yaml" --weights random --text-embeddings "$prompt_file" --frames 33 --height 480 \
        --width 832 --steps "${FT_STEPS:-30}" --seed 1 --output "$out/sample_13b.mp4" >"$out/sample.log" 2>&1
      echo "sample: rc $?"
      grep -E "sample: (step (1|10|20|30)/|.*per video)|video:|TT_ERR" "$out/sample.log" | tail -8
      ;;
  esac
done
