#!/usr/bin/env python3
"""Reference timing for `teletron bench`: the same HunyuanVideo Transformer configuration and input
shape in diffusers (HunyuanVideoTransformer3DModel), bf16 weights, forward + backward (no
optimizer), eager and torch.compile, on the same GPU in the same run. Prints one JSON object.
The FLOP count is the exact one docs/ARCHITECTURE.md defines (the same formula as model/flops.cpp).
--trace DIR also traces two passes of each (torch.profiler) and gives their kernel time by kind, sorted
as `teletron bench --trace` sorts its own (core/profiler.cpp's kernel_kind, plus Inductor's Triton
kernels), so the two step's time can be compared part by part."""
import argparse
import json
import os
import time

import torch


def exact_training_flops(c, batch, n, l):
    h = c["num_attention_heads"] * c["attention_head_dim"]
    mlp = int(h * c["mlp_ratio"])
    lin = lambda rows, i, o: 2.0 * rows * i * o
    att = lambda tokens: 4.0 * tokens * tokens * h
    p_in = c["in_channels"] * c["patch_size_t"] * c["patch_size"] ** 2
    p_out = c["out_channels"] * c["patch_size_t"] * c["patch_size"] ** 2
    f = lin(n, p_in, h)                                                     # patch embedding
    f += lin(1, 256, h) + lin(1, h, h)                                      # timestep MLP
    f += lin(1, c["pooled_projection_dim"], h) + lin(1, h, h)               # pooled text MLP
    if c["guidance_embeds"]:
        f += lin(1, 256, h) + lin(1, h, h)                                  # guidance MLP
    f += lin(l, c["text_embed_dim"], h)                                     # refiner proj_in
    f += lin(1, 256, h) + lin(1, h, h)                                      # refiner timestep MLP
    f += lin(1, c["text_embed_dim"], h) + lin(1, h, h)                      # refiner pooled MLP
    for _ in range(c["num_refiner_layers"]):
        f += lin(l, h, 3 * h) + lin(l, h, h) + lin(l, h, 4 * h) + lin(l, 4 * h, h) + lin(1, h, 2 * h) + att(l)
    j = n + l
    for _ in range(c["num_layers"]):
        for rows in (n, l):
            f += lin(rows, h, 3 * h) + lin(rows, h, h) + lin(rows, h, mlp) + lin(rows, mlp, h) + lin(1, h, 6 * h)
        f += att(j)
    for _ in range(c["num_single_layers"]):
        f += lin(j, h, 3 * h + mlp) + lin(j, h + mlp, h) + lin(1, h, 3 * h) + att(j)
    f += lin(1, h, 2 * h) + lin(n, h, p_out)
    return 3.0 * f * batch


def kernel_kind(name):
    """core/profiler.cpp's kernel_kind, in the same order; Inductor's generated kernels are `triton`."""
    lower = name.lower()
    has = lambda *parts: any(p in lower for p in parts)
    if has("sdpa", "fmha", "flash", "attention", "attn"):
        return "attention"
    if has("multi_tensor", "adam", "_amp_", "amp_update", "non_finite"):
        return "optimizer"
    if has("triton"):
        return "triton"
    if has("tt::", "teletron"):
        return "teletron"
    if has("norm"):
        return "norm"
    if has("gemm", "nvjet", "xmma", "cutlass", "cublas", "gemv", "matmul", "splitk"):
        return "GEMM"
    if has("conv", "implicit_", "winograd", "cudnn"):
        return "convolution"
    if has("elementwise", "vectorized", "unrolled", "copy", "cast", "reduce", "index", "cat", "fill", "softmax",
           "scatter", "gather", "where", "sum", "pow", "add", "mul"):
        return "elementwise"
    return "other"


def time_split(fn, passes, path):
    """Kernel time by kind (ms per pass) and the longest kernels of `passes` calls of fn, traced."""
    from torch.profiler import ProfilerActivity, profile
    cuda = torch.cuda.is_available()
    with profile(activities=[ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])) as prof:
        for _ in range(passes):
            fn()
        if cuda:
            torch.cuda.synchronize()
    prof.export_chrome_trace(path)
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    kinds, names = {}, {}
    for e in events:
        if e.get("ph") != "X" or e.get("cat") != "kernel":
            continue
        ms = e.get("dur", 0) / 1e3 / passes
        kind = kernel_kind(e.get("name", ""))
        kinds[kind] = kinds.get(kind, 0.0) + ms
        names[e["name"]] = names.get(e["name"], 0.0) + ms
    top = sorted(names.items(), key=lambda kv: -kv[1])[:15]
    return dict(trace=path, passes=passes, kernel_ms_by_kind=kinds,
                top_kernels=[dict(name=n, kind=kernel_kind(n), ms=ms) for n, ms in top])


def timed(fn, warmup, steps):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(steps):
        fn()
    torch.cuda.synchronize()
    return (time.perf_counter() - start) / steps


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--preset", default="1b", choices=["1b", "13b"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--text-tokens", type=int, default=256)
    parser.add_argument("--text-valid", type=int, default=256)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--trace", metavar="DIR", help="also trace two passes of each variant here")
    args = parser.parse_args()

    import diffusers
    from diffusers import HunyuanVideoTransformer3DModel

    config = dict(in_channels=16, out_channels=16, num_attention_heads=24, attention_head_dim=128,
                  num_layers=20, num_single_layers=40, num_refiner_layers=2, mlp_ratio=4.0, patch_size=2,
                  patch_size_t=1, qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=4096,
                  pooled_projection_dim=768, rope_theta=256.0, rope_axes_dim=(16, 56, 56))
    if args.preset == "1b":
        config.update(num_attention_heads=12, num_layers=6, num_single_layers=14)
    device = torch.device("cuda")
    torch.manual_seed(0)
    model = HunyuanVideoTransformer3DModel(**config).to(device, torch.bfloat16)
    model.train()
    params = sum(p.numel() for p in model.parameters())

    lt, lh, lw = (args.frames - 1) // 4 + 1, args.height // 8, args.width // 8
    n = lt * (lh // 2) * (lw // 2)
    b, l = args.batch, args.text_tokens
    opts = dict(device=device, dtype=torch.bfloat16)
    hidden = torch.randn(b, 16, lt, lh, lw, **opts)
    timestep = torch.full((b,), 500.0, device=device)
    text = torch.randn(b, l, 4096, **opts)
    mask = torch.zeros(b, l, device=device, dtype=torch.bool)
    mask[:, : args.text_valid] = True
    pooled = torch.randn(b, 768, **opts)
    guidance = torch.full((b,), 1000.0, device=device)
    target = torch.randn_like(hidden)

    # The bf16 matmul rate of this GPU, now.
    a = torch.randn(8192, 8192, **opts)
    bm = torch.randn(8192, 8192, **opts)
    matmul_s = timed(lambda: torch.mm(a, bm), 3, 50)
    matmul_rate = 2 * 8192 ** 3 / matmul_s
    del a, bm

    def step(module):
        def run():
            for p in model.parameters():
                p.grad = None
            out = module(hidden_states=hidden, timestep=timestep, encoder_hidden_states=text,
                         encoder_attention_mask=mask, pooled_projections=pooled, guidance=guidance,
                         return_dict=False)[0]
            torch.nn.functional.mse_loss(out.float(), target.float()).backward()
        return run

    flops = exact_training_flops(config, b, n, l)
    result = dict(diffusers_version=diffusers.__version__, torch_version=torch.__version__,
                  device=torch.cuda.get_device_name(), parameters=params, video_tokens=n, text_tokens=l,
                  text_valid=args.text_valid, matmul_tflops=matmul_rate / 1e12, step_tflop=flops / 1e12)
    gib = 2 ** 30
    torch.cuda.reset_peak_memory_stats()
    eager_s = timed(step(model), args.warmup, args.steps)
    # The peak's parts as teletron's bench gives them: what stays after the step (bf16 weights,
    # their gradients, the inputs), and the rest, the activations and backward's scratch (no
    # autocast copies: the weights are bf16 themselves).
    weight_bytes = sum(p.numel() * p.element_size() for p in model.parameters())
    grad_bytes = sum(p.grad.numel() * p.grad.element_size() for p in model.parameters() if p.grad is not None)
    result.update(eager_ms=eager_s * 1e3, eager_mfu_measured=flops / eager_s / matmul_rate,
                  eager_mfu_datasheet=flops / eager_s / 989e12,
                  eager_peak_gb=torch.cuda.max_memory_allocated() / gib,
                  parameter_gb=weight_bytes / gib, gradient_gb=grad_bytes / gib,
                  eager_activation_gb=(torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()) / gib)
    if args.trace:
        os.makedirs(args.trace, exist_ok=True)
        result.update(eager_time_split=time_split(step(model), 2, os.path.join(args.trace, "diffusers_eager.json")))
    if not args.no_compile:
        compiled = torch.compile(model)
        torch.cuda.reset_peak_memory_stats()
        compiled_s = timed(step(compiled), max(args.warmup, 3), args.steps)
        result.update(compiled_ms=compiled_s * 1e3, compiled_mfu_measured=flops / compiled_s / matmul_rate,
                      compiled_mfu_datasheet=flops / compiled_s / 989e12,
                      compiled_peak_gb=torch.cuda.max_memory_allocated() / gib,
                      compiled_activation_gb=(torch.cuda.max_memory_allocated() - torch.cuda.memory_allocated()) / gib)
        if args.trace:
            result.update(compiled_time_split=time_split(step(compiled), 2,
                                                         os.path.join(args.trace, "diffusers_compiled.json")))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
