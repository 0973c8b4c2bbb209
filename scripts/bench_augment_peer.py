#!/usr/bin/env python3
"""The CPU peer of `teletron bench --suite pipeline`'s colour + augment row (issue 13): the same
work on frames already decoded to RGB — resize to cover HxW, a random HxW crop, a horizontal flip
with p = 0.5, and normalisation to [-1, 1] as a (3, T, H, W) float32 array — with Albumentations
(its `images=` call applies one draw to every frame of a clip, as teletron draws one per clip), or
with torchvision's CPU transforms where Albumentations is not installed (--library says which ran).
P processes of one thread each take clips in turn; prints frames/s and appends a JSON line.

Frames come from the clips decoded once with OpenCV (the first T frames of each), outside the
timing; teletron's row starts from decoded YUV planes, so it also pays the colour conversion.

    python3 scripts/bench_augment_peer.py --procs 16 --frames 33 --height 480 --width 832 CLIP...
"""
import argparse
import json
import multiprocessing as mp
import os
import time

import numpy as np


def read_frames(path, count):
    import cv2
    cap = cv2.VideoCapture(path)
    frames = []
    while len(frames) < count:
        ok, frame = cap.read()
        if not ok:
            break
        frames.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    if not frames:
        raise SystemExit(f"{path}: no frame decoded")
    while len(frames) < count:  # short clips repeat their frames
        frames.append(frames[len(frames) % len(frames)])
    return frames


def make_albumentations(height, width):
    import albumentations as A
    return A.Compose([A.SmallestMaxSize(max_size=max(height, width)), A.RandomCrop(height, width),
                      A.HorizontalFlip(p=0.5), A.Normalize(mean=0.5, std=0.5, max_pixel_value=255.0)])


def run_albumentations(transform, frames):
    out = transform(images=np.stack(frames))["images"]  # (T, H, W, 3) float32 in [-1, 1]
    return np.ascontiguousarray(out.transpose(3, 0, 1, 2))


def make_torchvision(height, width):
    import torch
    from torchvision.transforms import v2
    torch.set_num_threads(1)
    return v2.Compose([v2.Resize(min(height, width), antialias=True), v2.RandomCrop((height, width)),
                       v2.RandomHorizontalFlip(0.5), v2.ToDtype(torch.float32, scale=True),
                       v2.Normalize([0.5] * 3, [0.5] * 3)])


def run_torchvision(transform, frames):
    import torch
    clip = torch.from_numpy(np.stack(frames)).permute(0, 3, 1, 2)  # (T, 3, H, W) uint8
    return transform(clip).permute(1, 0, 2, 3).contiguous().numpy()


def worker(args):
    os.environ["OMP_NUM_THREADS"] = "1"
    import cv2
    cv2.setNumThreads(1)
    library, clips, height, width, passes = args
    if library == "albumentations":
        transform, run = make_albumentations(height, width), run_albumentations
    else:
        transform, run = make_torchvision(height, width), run_torchvision
    done = 0
    for _ in range(passes):
        for frames in clips:
            out = run(transform, frames)
            assert out.shape[0] == 3 and out.shape[2:] == (height, width), out.shape
            done += len(frames)
    return done


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("clips", nargs="+")
    parser.add_argument("--procs", type=int, default=16)
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--passes", type=int, default=2)
    parser.add_argument("--library", choices=["auto", "albumentations", "torchvision"], default="auto")
    parser.add_argument("--json")
    a = parser.parse_args()
    library = a.library
    if library == "auto":
        try:
            import albumentations  # noqa: F401
            library = "albumentations"
        except ImportError:
            library = "torchvision"
    clips = [read_frames(path, a.frames) for path in a.clips]
    ctx = mp.get_context("spawn")
    with ctx.Pool(a.procs) as pool:
        pool.map(worker, [(library, clips[:1], a.height, a.width, 1)] * a.procs)  # imports and start-up
        start = time.perf_counter()
        frames = sum(pool.map(worker, [(library, clips, a.height, a.width, a.passes)] * a.procs))
        wall = time.perf_counter() - start
    row = {"library": library, "procs": a.procs, "frames": frames, "seconds": wall, "frames_per_s": frames / wall,
           "height": a.height, "width": a.width, "cpu_cores": os.cpu_count()}
    print(f"augment peer ({library}, {a.procs} process(es) x 1 thread): {frames} frames in {wall:.2f} s -> "
          f"{frames / wall:.0f} frames/s at {a.height}x{a.width}")
    if a.json:
        with open(a.json, "a") as f:
            f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
