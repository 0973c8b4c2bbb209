#!/usr/bin/env python3
"""The VAE encoder's parity with diffusers over randomly drawn architectures and clip shapes.

  vae_parity_sweep.py --teletron build/teletron [--configs 6] [--seed 0] [--tolerance 1e-4]
                      [--runtimes plain,fast-gemm] [--work DIR]

Each draw: an AutoencoderKLHunyuanVideo with random sizes (2-4 blocks, their channels, GroupNorm
groups, layers per block, spatial ratio 2, 4 or 8 as the block count allows, temporal ratio 4,
mid-block attention on or off, latent channels) and random weights, saved with save_pretrained; a
clip of random 4n+1 frames (sometimes past diffusers' 16-frame windows) and random height and width
(sometimes past its 256-px tiles). `teletron bench-vae --weights FOLDER --device cpu --tiling
whole,frames,tiled --dump DIR` encodes it in each mode and runtime, and scripts/bench_vae_diffusers.py
encodes the dumped input with diffusers (framewise encoding off / on, tiling on): the moments must
agree within --tolerance of their largest magnitude. One line per draw, exit status 1 if any
differs, 4 when torch or diffusers is missing (ctest counts it as skipped).
"""
import argparse
import json
import os
import random
import subprocess
import sys

try:
    import torch
    from diffusers import AutoencoderKLHunyuanVideo
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from parity_sweep import run_in_work, summary
except ImportError as error:
    print(f"vae_parity_sweep: skipped ({error})")
    sys.exit(4)


def draw_config(rng):
    groups = rng.choice([2, 4, 8])
    blocks = rng.randint(2, 4)
    channels = [groups * rng.randint(1, 3) for _ in range(blocks)]
    # One spatial halving per block from the first; diffusers' decoder takes temporal ratio 4 only.
    spatial = rng.choice([r for r in (2, 4, 8) if r.bit_length() - 1 <= blocks])
    temporal = 4
    return dict(in_channels=3, out_channels=3, latent_channels=rng.choice([4, 8, 16]),
                down_block_types=("HunyuanVideoDownBlock3D",) * blocks,
                up_block_types=("HunyuanVideoUpBlock3D",) * blocks, block_out_channels=tuple(channels),
                layers_per_block=rng.randint(1, 2), norm_num_groups=groups, spatial_compression_ratio=spatial,
                temporal_compression_ratio=temporal, mid_block_add_attention=rng.random() < 0.6)


def draw_clip(rng, config):
    """A clip within a CPU budget (voxels x first-stage channels^2) whose mid-block attention stays
    small enough for diffusers' dense causal mask (tokens^2 floats)."""
    while True:
        frames, height, width = draw_shape(rng, config)
        s = config["spatial_compression_ratio"]
        tokens = ((frames - 1) // 4 + 1) * (height // s) * (width // s)
        work = frames * height * width * config["block_out_channels"][0] ** 2
        if work <= 2e8 and (tokens <= 4096 or not config["mid_block_add_attention"]):
            return frames, height, width


def draw_shape(rng, config):
    t, s = config["temporal_compression_ratio"], config["spatial_compression_ratio"]
    frames = t * rng.choice([1, 2, 3, 5, 7]) + 1  # beyond 16 frames sometimes: framewise windows
    # Past 256 px now and then (diffusers' tiles: 256 every 192), small otherwise.
    def side():
        return s * (rng.randint(264, 336) // s if rng.random() < 0.3 else rng.randint(2, 9))
    height, width = side(), side()
    return frames, height, width


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teletron", required=True)
    parser.add_argument("--configs", type=int, default=6)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--runtimes", default="plain,fast-gemm")
    parser.add_argument("--work")
    args = parser.parse_args()
    return run_in_work(args, sweep, "tt_vae_sweep_")


def sweep(args, work):
    here = os.path.dirname(os.path.abspath(__file__))
    failures = checks = 0
    for index in range(args.configs):
        key = args.seed * 100003 + index
        rng = random.Random(key)
        config = draw_config(rng)
        torch.manual_seed(key)
        vae = AutoencoderKLHunyuanVideo(**config).eval()
        with torch.no_grad():  # random weights everywhere, norms' affine parameters included
            for parameter in vae.parameters():
                parameter.copy_(torch.randn_like(parameter) * (0.3 if parameter.dim() > 1 else 0.5) +
                                (1.0 if parameter.dim() == 1 else 0.0) * (rng.random() < 0.5))
        folder = os.path.join(work, f"vae_{index}")
        vae.save_pretrained(folder)
        frames, height, width = draw_clip(rng, config)
        line = (f"blocks {list(config['block_out_channels'])} groups {config['norm_num_groups']} "
                f"layers {config['layers_per_block']} ratios {config['temporal_compression_ratio']}x"
                f"{config['spatial_compression_ratio']} attention {'on' if config['mid_block_add_attention'] else 'off'} "
                f"latent {config['latent_channels']}; clip {frames}x{height}x{width}")
        for runtime in args.runtimes.split(","):
            dump = os.path.join(work, f"dump_{index}_{runtime}")
            run = subprocess.run([args.teletron, "bench-vae", "--weights", folder, "--device", "cpu", "--frames",
                                  str(frames), "--height", str(height), "--width", str(width), "--tiling",
                                  "whole,frames,tiled", "--runtimes", runtime, "--warmup", "0", "--steps", "1",
                                  "--dump", dump], capture_output=True, text=True)
            checks += 1
            if run.returncode != 0:
                failures += 1
                print(f"FAIL draw {index} {runtime}: teletron exit {run.returncode}: {run.stderr.strip()[-400:]}\n"
                      f"  {line}")
                continue
            rows = os.path.join(dump, "diffusers.jsonl")
            peer = subprocess.run([sys.executable, os.path.join(here, "bench_vae_diffusers.py"), dump, "--device",
                                   "cpu", "--warmup", "0", "--steps", "1", "--json", rows],
                                  capture_output=True, text=True)
            if peer.returncode != 0:
                failures += 1
                print(f"FAIL draw {index} {runtime}: diffusers side exit {peer.returncode}: "
                      f"{peer.stderr.strip()[-400:]}\n  {line}")
                continue
            with open(rows) as f:
                errors = {r["variant"]: r["relative_error_vs_teletron"] for r in map(json.loads, f)}
            ok = len(errors) == 3 and all(e <= args.tolerance for e in errors.values())
            failures += 0 if ok else 1
            shown = " ".join(f"{k} {v:.1e}" for k, v in errors.items())
            print(f"{'ok  ' if ok else 'FAIL'} draw {index} {runtime}: max|diff|/max {shown}  {line}")
    return summary("vae_parity_sweep", checks, failures, args)


if __name__ == "__main__":
    sys.exit(main())
