#!/usr/bin/env python3
"""The OpenCV peer of `teletron bench-video` (BENCHMARKS.md, issue 4): each of P processes takes
clips, reads frames in order with cv2.VideoCapture (grab() for frames no sample needs, retrieve()
for the needed ones — FFmpeg inside OpenCV decodes every frame up to the last needed one), then
BGR->RGB, cv2.resize (INTER_AREA when shrinking) to cover 480x832, centre crop, normalise to
[-1, 1] and a (3, T, H, W) float32 array. The sample: the same stratified rule as teletron's (one
random frame in each of T equal strata). Prints clips/s and decoded frames/s and appends a JSON line.

Clips timed: max(clips, procs) x passes, the list cycled (each repeat another seed), as teletron's
bench-video does, so every process stays busy.

Usage: bench_opencv.py --procs 16 --passes 2 [--json FILE] CLIP...
"""
import argparse
import json
import multiprocessing as mp
import os
import random
import time

import cv2
import numpy as np


def stratified(n, samples, rng):
    return [min(n - 1, int((k + rng.random()) * n / samples)) for k in range(samples)]


def one_clip(args):
    path, seed, samples, out_h, out_w = args
    cv2.setNumThreads(1)
    cap = cv2.VideoCapture(path)
    n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    needed = sorted(set(stratified(n, samples, random.Random(seed))))
    wanted = set(needed)
    frames = []
    decoded = 0
    for i in range(needed[-1] + 1):
        if not cap.grab():
            break
        decoded += 1
        if i in wanted:
            ok, frame = cap.retrieve()
            frames.append(frame)
    cap.release()
    out = []
    for frame in frames:
        rgb = cv2.cvtColor(frame, cv2.COLOR_BGR2RGB)
        h, w = rgb.shape[:2]
        scale = max(out_h / h, out_w / w)
        rh, rw = max(out_h, round(h * scale)), max(out_w, round(w * scale))
        interp = cv2.INTER_AREA if scale < 1 else cv2.INTER_LINEAR
        resized = cv2.resize(rgb, (rw, rh), interpolation=interp)
        y0, x0 = (rh - out_h) // 2, (rw - out_w) // 2
        out.append(resized[y0:y0 + out_h, x0:x0 + out_w])
    clip = np.stack(out).astype(np.float32) / 127.5 - 1.0  # (T, H, W, 3)
    clip = np.ascontiguousarray(clip.transpose(3, 0, 1, 2))  # (3, T, H, W)
    return decoded, clip.shape[1]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("clips", nargs="+")
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    count = max(len(args.clips), args.procs) * args.passes
    tasks = [(args.clips[t % len(args.clips)], t, args.frames, 480, 832) for t in range(count)]
    with mp.Pool(args.procs) as pool:
        pool.map(one_clip, tasks[: args.procs])  # warm-up: imports, page cache
        start = time.perf_counter()
        results = pool.map(one_clip, tasks, chunksize=1)
        seconds = time.perf_counter() - start
    decoded = sum(r[0] for r in results)
    cores = len(os.sched_getaffinity(0))
    row = {"label": "opencv", "mode": "opencv", "workers": args.procs, "cpu_cores": cores, "clips": len(tasks),
           "seconds": seconds, "clips_per_s": len(tasks) / seconds, "decoded_frames": decoded,
           "decoded_frames_per_s": decoded / seconds, "opencv": cv2.__version__}
    print(f"bench-opencv: {args.procs} processes, {cores} CPU cores: {len(tasks)} clips in {seconds:.2f} s -> "
          f"{row['clips_per_s']:.2f} clips/s, {row['decoded_frames_per_s']:.0f} decoded frames/s")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
