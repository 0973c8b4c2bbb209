#!/usr/bin/env python3
"""The CPU peers of `teletron bench --suite flow` (issue 13), on the same pair and in the same call:
scikit-image's optical_flow_tvl1 at teletron's TV-L1 settings (attachment 15, tightness 0.3, 5 warps
of 10 iterations, pyramid 0.5 down to 16 px, no prefilter) with tol 0, so that it runs every
iteration as teletron does ("equal iterations"), in P processes of one thread each; OpenCV's DIS
(medium) and Farneback on one thread for context. The pair is the bench's first accuracy case: a
smooth texture translated by (5.3, 3.2) px, its periods stretched by 64 / min(H, W) (the formula of
pipeline/flow_pairs.h). Prints ms per pair (wall time of all processes / pairs) and the mean
end-point error away from a border of 1/16 of the shorter side; --json writes them.

    python3 scripts/bench_flow_peer.py --height 480 --width 832 --processes 1,16 --pairs 1
"""
import argparse
import json
import multiprocessing as mp
import os
import time

import numpy as np


def texture(x, y):
    return (0.5 + 0.15 * np.sin(0.31 * x + 0.17 * y) + 0.15 * np.cos(0.23 * x - 0.41 * y)
            + 0.1 * np.sin(0.11 * x + 0.52 * y + 1.3) + 0.05 * np.cos(0.67 * x + 0.05 * y))


def translated_pair(h, w, dx, dy):
    scale = min(1.0, 64.0 / min(h, w))
    ys, xs = np.mgrid[0:h, 0:w].astype(np.float64)
    i0 = texture(xs * scale, ys * scale).astype(np.float32)
    i1 = texture((xs - dx) * scale, (ys - dy) * scale).astype(np.float32)
    truth = np.stack([np.full((h, w), dx), np.full((h, w), dy)]).astype(np.float32)  # (x, y)
    return i0, i1, truth


def epe(flow_xy, truth):
    h, w = truth.shape[1:]
    m = max(4, min(h, w) // 16)
    d = (flow_xy - truth)[:, m:h - m, m:w - m]
    return float(np.sqrt((d * d).sum(0)).mean())


def skimage_flow(i0, i1):
    from skimage.registration import optical_flow_tvl1
    v, u = optical_flow_tvl1(i0, i1, attachment=15, tightness=0.3, num_warp=5, num_iter=10, tol=0,
                             prefilter=False)
    return np.stack([u, v])  # (x, y): skimage gives (row, column)


def worker(args):
    os.environ["OMP_NUM_THREADS"] = "1"
    h, w, pairs = args
    i0, i1, _ = translated_pair(h, w, 5.3, 3.2)
    for _ in range(pairs):
        skimage_flow(i0, i1)
    return pairs


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--processes", default="1,16")
    parser.add_argument("--pairs", type=int, default=1, help="pairs per process")
    parser.add_argument("--json")
    a = parser.parse_args()
    i0, i1, truth = translated_pair(a.height, a.width, 5.3, 3.2)
    rows = []
    error = epe(skimage_flow(i0, i1), truth)
    for p in [int(x) for x in a.processes.split(",")]:
        ctx = mp.get_context("spawn")
        with ctx.Pool(p) as pool:
            pool.map(worker, [(16, 16, 1)] * p)  # start-up and imports outside the timing
            start = time.perf_counter()
            done = sum(pool.map(worker, [(a.height, a.width, a.pairs)] * p))
            wall = time.perf_counter() - start
        rows.append({"name": f"scikit-image optical_flow_tvl1, {p} process(es) x 1 thread", "processes": p,
                     "ms_per_pair": 1000 * wall / done, "epe": error})
    try:
        import cv2
        cv2.setNumThreads(1)
        g0 = (i0 * 255).round().astype(np.uint8)
        g1 = (i1 * 255).round().astype(np.uint8)
        dis = cv2.DISOpticalFlow_create(cv2.DISOPTICAL_FLOW_PRESET_MEDIUM)
        for name, fn in [("OpenCV DIS medium, 1 thread", lambda: dis.calc(g0, g1, None)),
                         ("OpenCV Farneback, 1 thread",
                          lambda: cv2.calcOpticalFlowFarneback(g0, g1, None, 0.5, 5, 15, 3, 5, 1.2, 0))]:
            flow = fn()
            start = time.perf_counter()
            for _ in range(5):
                fn()
            rows.append({"name": name, "processes": 1, "ms_per_pair": 1000 * (time.perf_counter() - start) / 5,
                         "epe": epe(np.moveaxis(flow, -1, 0), truth)})
    except ImportError as e:
        rows.append({"name": "OpenCV", "skipped": str(e)})
    print(f"CPU peers at {a.height}x{a.width}, {os.cpu_count()} CPU cores:")
    print("| peer | ms per pair | EPE translation (px) |\n|---|---|---|")
    for r in rows:
        if "skipped" in r:
            print(f"| {r['name']} | skipped: {r['skipped']} | |")
        else:
            print(f"| {r['name']} | {r['ms_per_pair']:.2f} | {r['epe']:.3f} |")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"height": a.height, "width": a.width, "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
