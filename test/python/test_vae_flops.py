#!/usr/bin/env python3
"""The VAE encoder's FLOP count (model/vae_flops.h, printed by `teletron bench-vae --count-only`)
against PyTorch's own FlopCounterMode run on diffusers' AutoencoderKLHunyuanVideo.encode with the
same architecture (teletron's tiny preset, random weights), whole, in frame windows (diffusers'
default framewise encoding) and tiled (windows and 256-px tiles), at a shape where every mode splits.
FlopCounterMode counts convolutions, linear layers and attention's matmuls (the CPU attention kernel
given the formula it has for the CUDA ones): teletron's matmul count (convolutions + attention
projections + attention) must equal it exactly.

Usage: test_vae_flops.py --teletron BUILD/teletron
Exit 4 (ctest: skipped) without torch or diffusers.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

SKIP = 4
try:
    import torch
    from torch.utils.flop_counter import FlopCounterMode
    from diffusers import AutoencoderKLHunyuanVideo
except ImportError as error:
    print(f"SKIP: {error} (python3 -m pip install torch diffusers)")
    sys.exit(SKIP)

# teletron's "tiny" VAE preset (model/vae.cpp hunyuan_vae_preset).
TINY = dict(in_channels=3, out_channels=3, latent_channels=16, block_out_channels=(16, 32, 32, 32),
            layers_per_block=1, norm_num_groups=8, spatial_compression_ratio=8, temporal_compression_ratio=4,
            mid_block_add_attention=True,
            down_block_types=("HunyuanVideoDownBlock3D",) * 4, up_block_types=("HunyuanVideoUpBlock3D",) * 4)
# 21 frames: two 17-frame windows (every 12); 264 x 256: two tile rows and two tile columns (every 192).
FRAMES, HEIGHT, WIDTH = 21, 264, 264


# FlopCounterMode has formulas for the CUDA attention kernels but not for the CPU one that
# scaled_dot_product_attention dispatches to here: the same formula, its two matmuls 4 * b * h * s_q * s_k * d.
CPU_SDPA = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu


def sdpa_cpu_flops(query_shape, key_shape, value_shape, *args, out_shape=None, **kwargs):
    b, h, s_q, d = query_shape
    return 2 * b * h * s_q * key_shape[2] * d + 2 * b * h * s_q * key_shape[2] * value_shape[3]


def diffusers_flops(vae, mode):
    vae.use_framewise_encoding = mode != "whole"
    if mode == "tiled":
        vae.enable_tiling()
    else:
        vae.disable_tiling()
    x = torch.rand(1, 3, FRAMES, HEIGHT, WIDTH) * 2 - 1
    with torch.no_grad(), FlopCounterMode(display=False, custom_mapping={CPU_SDPA: sdpa_cpu_flops}) as counter:
        vae.encode(x)
    return counter.get_total_flops()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--teletron", required=True)
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "2")))
    vae = AutoencoderKLHunyuanVideo(**TINY).eval()
    with tempfile.TemporaryDirectory() as folder:
        rows_file = os.path.join(folder, "flops.jsonl")
        done = subprocess.run([os.path.abspath(args.teletron), "bench-vae", "--preset", "tiny", "--count-only",
                               "--tiling", "whole,frames,tiled", "--frames", str(FRAMES), "--height", str(HEIGHT),
                               "--width", str(WIDTH), "--json", rows_file], capture_output=True, text=True)
        print(done.stdout, done.stderr[-3000:])
        if done.returncode != 0:
            print("FAIL: bench-vae --count-only failed")
            return 1
        with open(rows_file) as f:
            rows = {row["variant"]: row for row in map(json.loads, f)}
    failed = False
    expected_passes = {"whole": 1, "frames": 2, "tiled": 8}
    for mode in ("whole", "frames", "tiled"):
        theirs = diffusers_flops(vae, mode)
        ours = rows[mode]["matmul_flops"]
        passes = rows[mode]["passes"]
        print(f"{mode}: teletron {ours:.6e} in {passes} pass(es), FlopCounterMode on diffusers {theirs:.6e}, "
              f"ratio {ours / theirs:.9f}")
        if ours != theirs or passes != expected_passes[mode]:
            failed = True
    if failed:
        print("FAIL: the counts differ")
        return 1
    print("PASS: teletron's VAE encoder FLOP count equals FlopCounterMode on diffusers in every mode")
    return 0


if __name__ == "__main__":
    sys.exit(main())
