#!/usr/bin/env python3
"""Times the joint attention of the 1b preset's blocks, forward and backward, the ways it could run.

Benchmark (c)'s default stack spends two thirds of its kernel time in attention (BENCHMARKS.md,
stop 50): this measures what the key mask costs there. For each micro-batch size it times SDPA on
(B, heads, video + text, head_dim) bf16 tensors laid out as the model makes them ((B, N, H, D)
transposed), text right-padded to `--text` columns with each sample's own caption length:

  mask:auto        a bool key mask (B, 1, 1, N), SDPA's own choice of kernel (what teletron runs)
  mask:cudnn       the same mask, cuDNN's kernel forced
  mask:efficient   the same mask, the memory-efficient kernel forced
  bias:cudnn       the mask as an additive float bias (0 / -inf), cuDNN forced
  nomask:cudnn     the padded shape without a mask (wrong numbers: the speed a mask-free kernel reaches)
  nomask:flash     the same, flash attention forced
  exact:cudnn      one call per sample at its exact length, no mask (micro-batch 1 with exact trimming)
  exact64:cudnn    one call per sample, its text rounded up to 64 columns, masked

Each row: milliseconds for forward + backward (median of --iters after --warmup), and the rate in
TFLOP/s of the attention it computes (4 * Nq * Nk * D per head forward, backward counted as 2.5
forwards). Then the cost of a new shape: --new-lengths text lengths never seen before, each timed
at its first call and again at its second (masked at micro-batch 2, unmasked at 1): the difference
is cuDNN building its plans. Run on the GPU machine:
  python3 scripts/attention_bench.py --json $OUT/attention.json
  TORCH_CUDNN_SDPA_AVOID_RECOMPILE=1 python3 scripts/attention_bench.py --json $OUT/attention_avoid.json
(the variable lets unmasked calls share plans across lengths; PyTorch 2.11 ignores it for masked ones).
A dry run on the CPU: --device cpu --video 64 --text 16 --batches 1,2 --iters 1 --warmup 0.
"""
import argparse
import json
import statistics
import sys
import time

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def make_qkv(batch, tokens, heads, dim, device, generator):
    def one():
        x = torch.randn(batch, tokens, heads, dim, device=device, dtype=torch.bfloat16, generator=generator)
        return x.transpose(1, 2).requires_grad_(True)  # (B, H, N, D) view of (B, N, H, D), as the model's

    return one(), one(), one()


def timed(fn, iters, warmup, device):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t0 = time.perf_counter()
            fn()
            times.append(1000.0 * (time.perf_counter() - t0))
    return statistics.median(times)


def fwd_bwd(q, k, v, mask, backends):
    def run():
        for t in (q, k, v):
            t.grad = None
        if backends is None:
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        else:
            with sdpa_kernel(backends):
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        out.backward(torch.ones_like(out))

    return run


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", default="1,2,8")
    parser.add_argument("--video", type=int, default=14040, help="video tokens (33x480x832: 9 x 30 x 52)")
    parser.add_argument("--text", type=int, default=256)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--iters", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--new-lengths", type=int, default=4, help="fresh text lengths timed cold and warm")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    device = args.device
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("attention_bench: no CUDA device (use --device cpu for a dry run)")
    generator = torch.Generator(device=device).manual_seed(5)

    def forced(backend):  # the CPU has only the math kernel: there every way runs it
        return None if device == "cpu" else [backend]

    lengths_gen = torch.Generator().manual_seed(7)
    rows = []
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, "
          f"{torch.cuda.get_device_name() if device == 'cuda' else 'cpu'}; video {args.video} + text {args.text} "
          f"tokens, {args.heads} heads x {args.dim}")
    print("| micro-batch | way | ms fwd+bwd | TFLOP/s | keys kept |")
    print("|---|---|---|---|---|")
    for batch in [int(b) for b in args.batches.split(",")]:
        lengths = torch.randint(1, args.text + 1, (batch,), generator=lengths_gen).tolist()
        n = args.video + args.text
        valid = torch.zeros(batch, n, dtype=torch.bool)
        for i, length in enumerate(lengths):
            valid[i, : args.video + length] = True
        mask = valid.to(device).view(batch, 1, 1, n)
        bias = torch.zeros(batch, 1, 1, n, device=device, dtype=torch.bfloat16).masked_fill(~mask, float("-inf"))
        q, k, v = make_qkv(batch, n, args.heads, args.dim, device, generator)
        padded_flop = 3.5 * 4 * n * n * args.dim * args.heads * batch
        cases = [
            ("mask:auto", fwd_bwd(q, k, v, mask, None), padded_flop),
            ("mask:cudnn", fwd_bwd(q, k, v, mask, forced(SDPBackend.CUDNN_ATTENTION)), padded_flop),
            ("mask:efficient", fwd_bwd(q, k, v, mask, forced(SDPBackend.EFFICIENT_ATTENTION)), padded_flop),
            ("bias:cudnn", fwd_bwd(q, k, v, bias, forced(SDPBackend.CUDNN_ATTENTION)), padded_flop),
            ("nomask:cudnn", fwd_bwd(q, k, v, None, forced(SDPBackend.CUDNN_ATTENTION)), padded_flop),
            ("nomask:flash", fwd_bwd(q, k, v, None, forced(SDPBackend.FLASH_ATTENTION)), padded_flop),
        ]

        def per_sample(multiple):
            parts, flop = [], 0.0
            for length in lengths:
                kept = min(args.text, -(-length // multiple) * multiple)
                tokens = args.video + kept
                qs, ks, vs = make_qkv(1, tokens, args.heads, args.dim, device, generator)
                m = None
                if kept != length:
                    m = torch.zeros(1, 1, 1, tokens, dtype=torch.bool, device=device)
                    m[..., : args.video + length] = True
                parts.append(fwd_bwd(qs, ks, vs, m, forced(SDPBackend.CUDNN_ATTENTION)))
                flop += 3.5 * 4 * tokens * tokens * args.dim * args.heads
            return (lambda: [p() for p in parts]), flop

        run, flop = per_sample(1)
        cases.append(("exact:cudnn", run, flop))
        run, flop = per_sample(64)
        cases.append(("exact64:cudnn", run, flop))
        for name, fn, flop in cases:
            row = {"batch": batch, "way": name, "lengths": lengths}
            try:
                ms = timed(fn, args.iters, args.warmup, device)
                row.update(ms=ms, tflops=flop / ms / 1e9)
                print(f"| {batch} | {name} | {ms:.2f} | {row['tflops']:.0f} | {sum(lengths) + batch * args.video} "
                      f"of {batch * n} |")
            except RuntimeError as error:  # a kernel that does not take these inputs
                row["error"] = str(error).splitlines()[0][:200]
                print(f"| {batch} | {name} | not run: {row['error']} | — | — |")
            rows.append(row)
            if device == "cuda":
                torch.cuda.empty_cache()
    # New shapes: text lengths none of the rows above used, each timed at its first and second call.
    used = {length for row in rows for length in row["lengths"]}
    fresh = [length for length in range(args.text - 1, 0, -1) if length not in used][: args.new_lengths]
    print("| micro-batch | new length | first call ms | second call ms | way |")
    print("|---|---|---|---|---|")
    for length in fresh:
        for batch, masked in ((2, True), (1, False)):
            n = args.video + length
            q, k, v = make_qkv(batch, n, args.heads, args.dim, device, generator)
            m = None
            if masked:  # the second sample a little shorter: its last key masked
                m = torch.ones(batch, 1, 1, n, dtype=torch.bool, device=device)
                m[1, ..., n - 1] = False
            fn = fwd_bwd(q, k, v, m, None)
            first = timed(fn, 1, 0, device)
            second = timed(fn, 1, 0, device)
            way = "mask:auto" if masked else "nomask:auto"
            print(f"| {batch} | {length} | {first:.2f} | {second:.2f} | {way} |")
            rows.append({"batch": batch, "way": way, "new_length": length, "first_ms": first, "second_ms": second})
            if device == "cuda":
                torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as out:
            json.dump(rows, out, indent=1)


if __name__ == "__main__":
    main()
