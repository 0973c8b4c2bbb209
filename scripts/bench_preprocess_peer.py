#!/usr/bin/env python3
"""The usual way to cache a video dataset's latents, timed: the peer `teletron preprocess` is
compared with (issue 15). For each clip, in order, one at a time: decode the first --frames frames on
the CPU (OpenCV, or PyAV with --decoder pyav), resize the short side to cover --height x --width
and crop the centre (cv2.INTER_AREA), scale to [-1, 1], then diffusers'
AutoencoderKLHunyuanVideo.encode at batch 1 in bf16 on the GPU with the model's default tiling
(framewise windows on, spatial tiles off; --spatial-tiling turns enable_tiling() on, as long 720p
clips need), latent_dist.mean x scaling_factor written as safetensors. Prints per-clip times and
clips/s (decode and encode apart), and with --json appends one row.

The VAE is --vae DIR (a diffusers AutoencoderKLHunyuanVideo folder or a pipeline folder with vae/),
or the released architecture with random weights (--vae random, the default; the time does not
depend on the values). --warmup clips are encoded first and not timed (cuDNN picks its algorithms).

Usage: bench_preprocess_peer.py --clips a.mp4,b.mp4,... [--frames 33 --height 480 --width 832]
       [--decoder opencv|pyav] [--vae random|DIR] [--spatial-tiling] [--warmup 1] [--out DIR]
       [--json FILE]
"""
import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np
import torch


def decode_opencv(path, frames):
    import cv2
    capture = cv2.VideoCapture(path)
    out = []
    while len(out) < frames:
        ok, frame = capture.read()
        if not ok:
            break
        out.append(cv2.cvtColor(frame, cv2.COLOR_BGR2RGB))
    capture.release()
    return out


def decode_pyav(path, frames):
    import av
    out = []
    with av.open(path) as container:
        stream = container.streams.video[0]
        stream.thread_type = "AUTO"
        for frame in container.decode(stream):
            out.append(frame.to_ndarray(format="rgb24"))
            if len(out) == frames:
                break
    return out


def resize_crop(frames, height, width):
    import cv2
    h, w = frames[0].shape[:2]
    scale = max(height / h, width / w)
    size = (max(width, round(w * scale)), max(height, round(h * scale)))
    top, left = (size[1] - height) // 2, (size[0] - width) // 2
    return np.stack([cv2.resize(f, size, interpolation=cv2.INTER_AREA)[top:top + height, left:left + width]
                     for f in frames])


def load_vae(source, device):
    from diffusers import AutoencoderKLHunyuanVideo
    if source == "random":
        torch.manual_seed(0)
        vae = AutoencoderKLHunyuanVideo()  # the released architecture
    else:
        folder = os.path.join(source, "vae") if os.path.isdir(os.path.join(source, "vae")) else source
        vae = AutoencoderKLHunyuanVideo.from_pretrained(folder)
    return vae.to(device, torch.bfloat16).eval()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--clips", required=True, help="comma-separated video files")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--decoder", choices=["opencv", "pyav"], default="opencv")
    parser.add_argument("--vae", default="random")
    parser.add_argument("--spatial-tiling", action="store_true")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--out", help="folder for the latents (default: a temporary one)")
    parser.add_argument("--json", help="append a result row here")
    args = parser.parse_args()
    from safetensors.torch import save_file

    clips = [c for c in args.clips.split(",") if c]
    decode = decode_opencv if args.decoder == "opencv" else decode_pyav
    device = torch.device(args.device)
    vae = load_vae(args.vae, device)
    if args.spatial_tiling:
        vae.enable_tiling()
    out_dir = args.out or tempfile.mkdtemp(prefix="peer_latents_")
    os.makedirs(out_dir, exist_ok=True)

    def one(path, index):
        start = time.perf_counter()
        frames = decode(path, args.frames)
        if len(frames) < args.frames:
            raise SystemExit(f"{path}: {len(frames)} frames, {args.frames} needed")
        pixels = resize_crop(frames, args.height, args.width)
        decoded = time.perf_counter()
        x = torch.from_numpy(pixels).to(device).permute(3, 0, 1, 2).unsqueeze(0)  # (1, 3, T, H, W)
        x = x.to(torch.bfloat16) / 127.5 - 1.0
        with torch.no_grad():
            latents = vae.encode(x).latent_dist.mean * vae.config.scaling_factor
        save_file({"latents": latents[0].to(torch.bfloat16).cpu().contiguous()},
                  os.path.join(out_dir, f"{index:06d}.safetensors"))
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        done = time.perf_counter()
        return decoded - start, done - decoded

    for i in range(args.warmup):
        one(clips[i % len(clips)], -1 - i)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    decode_s = encode_s = 0.0
    start = time.perf_counter()
    for i, path in enumerate(clips):
        d, e = one(path, i)
        decode_s += d
        encode_s += e
        print(f"peer: {i + 1}/{len(clips)} {os.path.basename(path)}: decode + resize {d * 1000:.0f} ms, "
              f"encode + write {e * 1000:.0f} ms", flush=True)
    wall = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else 0.0
    row = {"tool": f"{args.decoder} + diffusers AutoencoderKLHunyuanVideo.encode (batch 1, bf16"
                   f"{', spatial tiling' if args.spatial_tiling else ''})",
           "clips": len(clips), "frames": args.frames, "height": args.height, "width": args.width,
           "seconds": wall, "clips_per_s": len(clips) / wall, "decode_s": decode_s, "encode_s": encode_s,
           "peak_gb": peak}
    print(f"peer: {len(clips)} clips in {wall:.2f} s = {row['clips_per_s']:.3f} clips/s (decode {decode_s:.2f} s, "
          f"encode {encode_s:.2f} s), peak {peak:.2f} GiB; latents in {out_dir}")
    if args.json:
        with open(args.json, "a") as f:
            f.write(json.dumps(row) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
