#!/usr/bin/env python3
"""diffusers' side of the VAE benchmark (BENCHMARKS.md, issue 5): loads the encoder weights that
`teletron bench-vae --dump DIR` wrote into diffusers' AutoencoderKLHunyuanVideo (same config), times
its encode on the same input — whole clip (framewise encoding and tiling off), frames (framewise
encoding, diffusers' default: 16 + 1 frame windows) and tiled (windows + enable_tiling's 256 px
tiles), for each variant teletron dumped — and compares its moments with teletron's.

Usage: bench_vae_diffusers.py DIR [--device cuda] [--warmup 2] [--steps 5] [--json FILE]
                              [--cudnn-benchmark off,on]
--cudnn-benchmark times diffusers as shipped (off: torch's default) and/or with
torch.backends.cudnn.benchmark = True, which teletron sets.
Needs torch and diffusers (carried as wheels to the GPU machine).
"""
import argparse
import json
import os
import sys
import time

import torch
from diffusers import AutoencoderKLHunyuanVideo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_frames import read_safetensors  # noqa: E402


def cpu_peak_bytes_during(work):
    """The CPU allocator's most bytes held above the start while `work` ran, from the profiler's
    allocator events: the measure teletron bench-vae takes on the CPU (core/profiler's
    cpu_peak_bytes_during), since the CPU keeps no allocation counters."""
    import tempfile
    from torch.profiler import ProfilerActivity, profile
    from activation_memory import step_peak
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        work()
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        prof.export_chrome_trace(f.name)
        return step_peak(f.name)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("dump")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--json", default="")
    parser.add_argument("--cudnn-benchmark", default="off")
    args = parser.parse_args()

    config = json.load(open(os.path.join(args.dump, "config.json")))
    config.pop("_class_name", None)
    vae = AutoencoderKLHunyuanVideo(**config)
    weights = read_safetensors(os.path.join(args.dump, "diffusion_pytorch_model.safetensors"))
    missing, unexpected = vae.load_state_dict(weights, strict=False)
    assert not unexpected and all(k.startswith(("decoder.", "post_quant_conv.")) for k in missing), (missing, unexpected)
    device = torch.device(args.device)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    vae = vae.to(device, dtype).eval()
    io = read_safetensors(os.path.join(args.dump, "io.safetensors"))
    x = io["input"].to(device, dtype)

    def run(variant):
        vae.use_framewise_encoding = variant != "whole"
        if variant == "tiled":
            vae.enable_tiling()
        else:
            vae.disable_tiling()
        with torch.no_grad():
            for _ in range(args.warmup):
                out = vae._encode(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
                torch.cuda.reset_peak_memory_stats()
            start = time.perf_counter()
            for _ in range(args.steps):
                out = vae._encode(x)
            if device.type == "cuda":
                torch.cuda.synchronize()
            ms = 1000 * (time.perf_counter() - start) / args.steps
            if device.type == "cuda":
                peak = torch.cuda.max_memory_allocated() / 2**30
            else:
                peak = cpu_peak_bytes_during(lambda: vae._encode(x)) / 2**30
        return out.float().cpu(), ms, peak

    rows = []
    for mode in args.cudnn_benchmark.split(","):
        torch.backends.cudnn.benchmark = mode == "on"
        for variant, key in (("whole", "moments"), ("frames", "moments_frames"), ("tiled", "moments_tiled")):
            if key not in io:
                continue
            out, ms, peak = run(variant)
            row = {"variant": variant, "ms": ms, "peak_gb": peak, "impl": "diffusers",
                   "cudnn_benchmark": mode == "on"}
            ref = io[key]
            row["relative_error_vs_teletron"] = ((out - ref).abs().max() / ref.abs().max()).item()
            rows.append(row)
            print(f"diffusers {row['variant']} (cudnn.benchmark {mode}): {ms:.1f} ms per clip, peak {peak:.2f} GiB, "
                  f"max|diff|/max vs teletron {row.get('relative_error_vs_teletron', float('nan')):.2e}")
    if args.json:
        with open(args.json, "a") as f:
            for row in rows:
                f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
