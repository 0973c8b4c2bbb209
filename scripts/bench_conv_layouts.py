#!/usr/bin/env python3
"""Issue 15's question before any kernel work: does cuDNN run the VAE's causal 3x3x3 convolution
faster as the 3D convolution teletron calls today, or as 2D convolutions over the frames?

The encoder's convolutions are 3x3x3 with stride 1 on a causally padded input (two copies of the
first frame in front, one edge row/column each side). Three ways to compute the same output, each
timed on the GPU at the encoder's shapes for 33x480x832 (one per stage, batch 1, bf16,
channels-last, cudnn.benchmark on, as bench-vae runs them):

  conv3d   F.conv3d on the padded NDHWC input (what model/vae_blocks.h's CausalConv3d does);
  stacked  the three frames each output frame reads stacked along channels, (T, 3C, H+2, W+2)
           NHWC, and one F.conv2d with the weight's time taps folded into its input channels
           (timed with the stacking copy, and the convolution alone);
  taps     three F.conv2d over views of the padded frames (t, t+1, t+2 as batches of frames; no
           copy), summed (two adds over the output).

Prints ms per convolution, achieved TFLOP/s on the exact count (2 C_in C_out 27 T H W) and the
largest difference from conv3d relative to its largest value; --json writes the same. On the CPU
(--device cpu, small shapes by default) it only checks that the three agree.

Usage: bench_conv_layouts.py [--device cuda] [--shapes CI:CO:T:H:W,...] [--warmup 3] [--steps 10]
                             [--json FILE]
"""
import argparse
import json
import sys
import time

try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("bench_conv_layouts.py: skipped, needs torch (pip install torch)")
    sys.exit(4)

# (C_in, C_out, T, H, W) of the resnet convolutions of each encoder stage at 33x480x832 (the
# HunyuanVideo VAE: 128/256/512/512 channels; time halves in stages 1 and 2's downsamplers).
ENCODER_SHAPES = [(128, 128, 33, 480, 832), (256, 256, 33, 240, 416), (512, 512, 17, 120, 208),
                  (512, 512, 9, 60, 104)]
SMALL_SHAPES = [(8, 8, 5, 12, 20), (16, 8, 3, 8, 8)]


def causal_pad(x):
    """(B, C, T, H, W) -> (B, C, T + 2, H + 2, W + 2): replicate padding, time in front only."""
    return F.pad(x, (1, 1, 1, 1, 2, 0), mode="replicate")


def conv3d(padded, weight):
    return F.conv3d(padded, weight)


def stack_frames(padded):
    """(1, C, T + 2, H', W') -> (T, 3C, H', W'): output frame t reads padded frames t, t+1, t+2."""
    frames = padded[0].transpose(0, 1)  # (T + 2, C, H', W')
    t = frames.shape[0] - 2
    return torch.cat([frames[0:t], frames[1:t + 1], frames[2:t + 2]], dim=1).contiguous(
        memory_format=torch.channels_last)


def fold_weight(weight):
    """(C_out, C_in, 3, 3, 3) -> (C_out, 3 C_in, 3, 3), the time taps in stack_frames' order."""
    c_out, c_in = weight.shape[:2]
    return weight.permute(0, 2, 1, 3, 4).reshape(c_out, 3 * c_in, 3, 3).contiguous(
        memory_format=torch.channels_last)


def from_frames(y):
    """(T, C_out, H, W) -> (1, C_out, T, H, W)."""
    return y.transpose(0, 1).unsqueeze(0)


def taps(padded, weight):
    frames = padded[0].transpose(0, 1)  # (T + 2, C, H', W') NHWC view for channels-last input
    t = frames.shape[0] - 2
    out = F.conv2d(frames[0:t], weight[:, :, 0])
    out += F.conv2d(frames[1:t + 1], weight[:, :, 1])
    out += F.conv2d(frames[2:t + 2], weight[:, :, 2])
    return from_frames(out)


def timed(fn, device, warmup, steps):
    for _ in range(warmup):
        fn()
    if device.type == "cuda":
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(steps):
            fn()
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) / steps
    t0 = time.perf_counter()
    for _ in range(steps):
        fn()
    return (time.perf_counter() - t0) * 1e3 / steps


def relative(a, b):
    return ((a.float() - b.float()).abs().max() / b.float().abs().max()).item()


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--shapes", default=None, help="CI:CO:T:H:W,... (default: the encoder's at 33x480x832 "
                        "on CUDA, two small ones on the CPU)")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    if args.shapes:
        shapes = [tuple(int(v) for v in s.split(":")) for s in args.shapes.split(",")]
    else:
        shapes = ENCODER_SHAPES if cuda else SMALL_SHAPES
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    rows = []
    print("| C_in -> C_out, T x H x W | variant | ms | TFLOP/s | max diff / max |")
    print("|---|---|---|---|---|")
    for c_in, c_out, t, h, w in shapes:
        x = torch.randn(1, c_in, t, h, w, device=device, dtype=dtype).contiguous(
            memory_format=torch.channels_last_3d)
        weight = (torch.randn(c_out, c_in, 3, 3, 3, device=device, dtype=dtype) / (27 * c_in) ** 0.5).contiguous(
            memory_format=torch.channels_last_3d)
        padded = causal_pad(x).contiguous(memory_format=torch.channels_last_3d)
        del x
        folded = fold_weight(weight)
        flop = 2.0 * c_in * c_out * 27 * t * h * w
        with torch.no_grad():
            reference = conv3d(padded, weight)
            stacked_input = stack_frames(padded)
            variants = {
                "conv3d": lambda: conv3d(padded, weight),
                "stacked (with the stacking copy)": lambda: from_frames(F.conv2d(stack_frames(padded), folded)),
                "stacked (convolution alone)": lambda: from_frames(F.conv2d(stacked_input, folded)),
                "taps (three conv2d + two adds)": lambda: taps(padded, weight),
            }
            for name, fn in variants.items():
                diff = relative(fn(), reference)
                ms = timed(fn, device, args.warmup, args.steps)
                label = f"{c_in} -> {c_out}, {t}x{h}x{w}"
                print(f"| {label} | {name} | {ms:.3f} | {flop / ms / 1e9:.1f} | {diff:.2e} |", flush=True)
                rows.append({"c_in": c_in, "c_out": c_out, "t": t, "h": h, "w": w, "variant": name, "ms": ms,
                             "tflops": flop / ms / 1e9, "max_rel_diff": diff})
            del stacked_input, reference
        if cuda:
            torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"device": str(device), "dtype": str(dtype), "rows": rows}, f, indent=1)
    # The three compute one function: on the CPU in fp32 they must agree to rounding.
    if not cuda:
        worst = max(r["max_rel_diff"] for r in rows)
        print(f"largest relative difference from conv3d: {worst:.2e}")
        if worst > 1e-5:
            raise SystemExit("the variants disagree")


if __name__ == "__main__":
    main()
