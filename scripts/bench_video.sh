#!/usr/bin/env bash
# GPU machine: the video-pipeline benchmark of BENCHMARKS.md (issue 4), all variants in one run on
# the same files. Carry .device and .benchclips (scripts/make_bench_clips.sh on the development
# machine). Prints a markdown table last; JSON lines in $OUT/bench_video.jsonl.
# BENCH_ROWS picks groups of rows (default all): i ii seek skip sparse iii iv.
set -uo pipefail
source "$(dirname "${BASH_SOURCE[0]}")/device_build.sh" || exit 1
echo "build ${build_s}s"
clips=("$root"/.benchclips/*.mp4)
json="$out/bench_video.jsonl"
: >"$json"
want() { [[ " ${BENCH_ROWS:-i ii seek skip sparse iii iv} " == *" $1 "* ]]; }
bv() { "$tt" bench-video "${clips[@]}" --json "$json" "$@" 2>&1 | grep -E "^bench-video|TT_ERR|error"; }

# (i) decode-only NVDEC ceiling: every frame, N sessions at once, all cores.
want i && for w in 1 8 14 16; do bv --mode decode-only --workers $w --passes 4 --label "i:nvdec-decode-all"; done
want i && taskset -c 0,1 "$tt" bench-video "${clips[@]}" --json "$json" --mode decode-only --workers 14 --passes 4 \
  --label "i:nvdec-decode-all-2cores" 2>&1 | grep -E "^bench-video|TT_ERR"
# (ii) teletron's GPU path on 2 CPU cores: 33 stratified frames -> colour -> augment, bf16 on the GPU.
want ii && for w in 8 14; do taskset -c 0,1 "$tt" bench-video "${clips[@]}" --json "$json" --mode gpu --workers $w --passes 4 \
  --time-gpu-stages --label "ii:gpu-path-2cores" 2>&1 | grep -E "^bench-video|TT_ERR"; done
# Seek policy on the same path: a seek into every GOP without a decoder flush, and with one (the
# flush makes FFmpeg's H.264 decoder re-create the NVDEC decoder).
want seek && taskset -c 0,1 "$tt" bench-video "${clips[@]}" --json "$json" --mode gpu --workers 14 --passes 4 --reseek-gap 1 \
  --label "ii:gpu-2cores-seek-every-gop" 2>&1 | grep -E "^bench-video|TT_ERR"
want seek && taskset -c 0,1 "$tt" bench-video "${clips[@]}" --json "$json" --mode gpu --workers 14 --passes 4 --reseek-gap 1 \
  --flush-on-seek 1 --label "ii:gpu-2cores-seek-every-gop-flush" 2>&1 | grep -E "^bench-video|TT_ERR"
want seek && bv --mode gpu --workers 14 --passes 4 --label "ii:gpu-path-16cores"
# skip_frame off, same path: what dropping unneeded non-reference frames saves.
want skip && taskset -c 0,1 "$tt" bench-video "${clips[@]}" --json "$json" --mode gpu --workers 14 --passes 4 --no-skip \
  --label "ii:gpu-path-2cores-noskip" 2>&1 | grep -E "^bench-video|TT_ERR"
# Sparse samples (9 contiguous frames): only the GOPs that hold them are decoded.
want sparse && taskset -c 0,1 "$tt" bench-video "${clips[@]}" --json "$json" --mode gpu --workers 14 --passes 4 --sampler random \
  --frames 9 --label "sparse:gpu-9-contiguous" 2>&1 | grep -E "^bench-video|TT_ERR"
want sparse && taskset -c 0,1 "$tt" bench-video "${clips[@]}" --json "$json" --mode gpu --workers 14 --passes 4 --sampler random \
  --frames 9 --no-skip --label "sparse:gpu-9-contiguous-noskip" 2>&1 | grep -E "^bench-video|TT_ERR"
# (iii) teletron's CPU path: every stage on the CPU, 2 cores and all 16.
want iii && taskset -c 0,1 "$tt" bench-video "${clips[@]}" --json "$json" --mode cpu --workers 2 --passes 1 \
  --label "iii:cpu-path-2cores" 2>&1 | grep -E "^bench-video|TT_ERR"
want iii && bv --mode cpu --workers 16 --passes 2 --label "iii:cpu-path-16cores"
# (iv) OpenCV: cv2.VideoCapture + cv2.resize in 16 processes.
want iv && python3 scripts/bench_opencv.py --procs 16 --passes 2 --json "$json" "${clips[@]}" 2>&1 | tail -2

python3 - "$json" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| variant | workers | CPU cores | clips/s | decoded frames/s | decoded frames per clip | seeks per clip | NVDEC inits per clip |")
print("|---|---|---|---|---|---|---|---|")
for r in rows:
    per = r["decoded_frames"] / r["clips"]
    seeks = r.get("seeks", 0) / r["clips"]
    inits = r.get("nvdec_inits", 0) / r["clips"]
    print(f"| {r['label']} | {r['workers']} | {r['cpu_cores']} | {r['clips_per_s']:.2f} | {r['decoded_frames_per_s']:.0f} | {per:.1f} | {seeks:.1f} | {inits:.1f} |")
PY
