#!/usr/bin/env python3
"""Activation memory of one training step, teletron against diffusers, measured the same way on
both sides: the bytes a step's forward allocates and still holds when the backward starts (what
autograd saved for it), from the allocator events of a profiler trace (teletron train --profile
FIRST:COUNT:memory; torch.profiler with profile_memory=True for diffusers), each held block
attributed to the innermost operator that allocated it.

  activation_memory.py --teletron build/teletron [--device cpu] [--heads 4 --head-dim 64
                       --doubles 2 --singles 2 --frames 9 --height 128 --width 128 --text 32]
                       [--no-compile] [--work DIR]

Rows: teletron with model.fused_kernels off and on, diffusers' HunyuanVideoTransformer3DModel
eager and under torch.compile (default mode), the same architecture and input shapes, every text
token valid (no mask work on either side), fp32 on the CPU.

--lora R [--checkpointing] [--set KEY=VALUE ...]: instead, the peak of one whole LoRA training step (forward, backward,
clipping, AdamW on the adapters; the allocator's most bytes above the step's start), teletron with
model.lora.rank R against diffusers + peft with the same rank and targets (scripts/bench_lora_peer.py's),
both with or both without gradient checkpointing of every block. On the CPU this compares which tensors
each implementation keeps for backward; the GPU's bf16 autocast changes their dtypes (teletron's
bench reports that split on CUDA: parameters, gradients, autocast copies, activations).
"""
import argparse
import collections
import glob
import json
import os
import subprocess
import sys
import tempfile


def held_at_backward(trace_path, top=0):
    """Bytes allocated before the first backward node ran and not freed by then; per operator."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    memory = sorted((e for e in events if e.get("name") == "[memory]"
                     and e.get("args", {}).get("Device Type", 0) == 0), key=lambda e: e["ts"])
    ops = [e for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op"]
    backward = [e["ts"] for e in events if e.get("ph") == "X" and "evaluate_function" in e.get("name", "")]
    if not memory or not backward:
        raise SystemExit(f"{trace_path}: no allocator events or no backward in the trace")
    start_backward = min(backward)
    live = {}
    for m in memory:
        if m["ts"] >= start_backward:
            break
        a = m["args"]
        if a["Bytes"] > 0:
            live[a["Addr"]] = (m["ts"], a["Bytes"])
        else:
            live.pop(a["Addr"], None)
    forward_ops = sorted((o for o in ops if o["ts"] < start_backward), key=lambda o: o["ts"])

    def owner(ts):
        best = None
        for o in forward_ops:
            if o["ts"] > ts:
                break
            if ts <= o["ts"] + o["dur"] and (best is None or o["dur"] < best["dur"]):
                best = o
        return best["name"] if best else "(outside an operator)"

    by_op = collections.Counter()
    for ts, size in live.values():
        by_op[owner(ts)] += size
    return sum(by_op.values()), by_op.most_common(top) if top else []


def step_peak(trace_path):
    """The CPU allocator's most bytes above the start of the trace (its "[memory]" events; the CPU's
    count starts at the trace)."""
    with open(trace_path) as f:
        events = json.load(f)["traceEvents"]
    totals = [e["args"]["Total Allocated"] for e in events
              if e.get("name") == "[memory]" and e.get("args", {}).get("Device Type", 0) == 0]
    return max(totals, default=0)


def teletron_rows(args, work):
    config = os.path.join(work, "config.yaml")
    data = os.path.join(work, "data")
    with open(config, "w") as f:
        f.write("tele_tron:\n"
                f"  model: {{preset: tiny, num_attention_heads: {args.heads}, attention_head_dim: {args.head_dim}, "
                f"rope_axes_dim: {json.dumps(args.rope)}, num_layers: {args.doubles}, "
                f"num_single_layers: {args.singles}, num_refiner_layers: 1}}\n"
                f"  data: {{manifest: {data}/manifest.jsonl, buckets: [{{frames: {args.frames}, height: {args.height}, "
                f"width: {args.width}}}]}}\n"
                "  batch_size: 1\n"
                "  train: {max_steps: 4, log_every: 1, checkpoint_every: 100000}\n")
    subprocess.run([args.teletron, "synth-data", config, "--output", data, "--samples", "4",
                    "--text-length", str(args.text)], check=True, capture_output=True)
    # Every text token valid, as the diffusers rows' mask of ones (no trimming on either side).
    import torch
    from safetensors.torch import load_file, save_file
    for path in glob.glob(os.path.join(data, "*.safetensors")):
        tensors = load_file(path)
        for key, value in tensors.items():
            if value.dtype == torch.bool:
                tensors[key] = torch.ones_like(value)
        save_file(tensors, path)
    rows = []
    if args.lora:
        run = os.path.join(work, "run_lora")
        rows = []
        for fused in ("false", "true"):
            subprocess.run([args.teletron, "train", config, "--output", f"{run}_fused_{fused}", "--device", args.device,
                            "--profile", "3:1:memory", "--set", f"model.lora.rank={args.lora}", "--set",
                            f"model.lora.alpha={args.lora}", "--set", f"model.fused_kernels={fused}", "--set",
                            f"model.activation_checkpointing={'true' if args.checkpointing else 'false'}"]
                           + [a for kv in args.set for a in ("--set", kv)],
                           check=True, capture_output=True)
            trace = glob.glob(os.path.join(f"{run}_fused_{fused}", "profile", "trace_steps_3-3.json"))[0]
            rows.append((f"teletron, LoRA rank {args.lora}, model.fused_kernels {fused}", step_peak(trace), []))
        return rows
    for fused in ("false", "true"):
        run = os.path.join(work, f"run_fused_{fused}")
        subprocess.run([args.teletron, "train", config, "--output", run, "--device", args.device, "--profile",
                        "3:1:memory", "--set", f"model.fused_kernels={fused}"], check=True, capture_output=True)
        trace = glob.glob(os.path.join(run, "profile", "trace_steps_3-3.json"))[0]
        rows.append((f"teletron, model.fused_kernels {fused}", *held_at_backward(trace, args.top)))
    return rows


def diffusers_config(args):
    """HunyuanVideoTransformer3DModel's arguments for the architecture teletron's rows train."""
    return dict(in_channels=16, out_channels=16, num_attention_heads=args.heads, attention_head_dim=args.head_dim,
                num_layers=args.doubles, num_single_layers=args.singles, num_refiner_layers=1, mlp_ratio=4.0,
                patch_size=2, patch_size_t=1, qk_norm="rms_norm", guidance_embeds=True, text_embed_dim=64,
                pooled_projection_dim=32, rope_theta=256.0, rope_axes_dim=args.rope)


def diffusers_inputs(args, guidance):
    """Latents of the clip's shape and the forward's keyword arguments (every text token valid)."""
    import torch
    frames = (args.frames - 1) // 4 + 1
    x = torch.randn(1, 16, frames, args.height // 8, args.width // 8)
    return x, dict(hidden_states=x, timestep=torch.tensor([500.0]), encoder_hidden_states=torch.randn(1, args.text, 64),
                   encoder_attention_mask=torch.ones(1, args.text, dtype=torch.int64),
                   pooled_projections=torch.randn(1, 32), guidance=torch.tensor([guidance]), return_dict=False)


def diffusers_rows(args, work):
    import torch
    from diffusers import HunyuanVideoTransformer3DModel
    from torch.profiler import ProfilerActivity, profile

    config = diffusers_config(args)
    rows = []
    for compiled in ([False] if args.no_compile else [False, True]):
        torch.manual_seed(0)
        model = HunyuanVideoTransformer3DModel(**config)
        step_model = torch.compile(model) if compiled else model
        x, inputs = diffusers_inputs(args, 6000.0)

        def step():
            out = step_model(**inputs)[0]
            (out - x).pow(2).mean().backward()

        for _ in range(3):  # compiled: the graphs are made in the first; gradients exist before the traced step
            step()
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
            step()
        trace = os.path.join(work, f"diffusers_{'compiled' if compiled else 'eager'}.json")
        prof.export_chrome_trace(trace)
        rows.append((f"diffusers {__import__('diffusers').__version__} {'+ torch.compile' if compiled else 'eager'}",
                     *held_at_backward(trace, args.top)))
    return rows


def diffusers_lora_row(args, work):
    import torch
    from diffusers import HunyuanVideoTransformer3DModel
    from peft import LoraConfig
    from torch.profiler import ProfilerActivity, profile
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from bench_lora_peer import TARGETS

    config = diffusers_config(args)
    torch.manual_seed(0)
    model = HunyuanVideoTransformer3DModel(**config)
    model.requires_grad_(False)
    model.add_adapter(LoraConfig(r=args.lora, lora_alpha=args.lora, target_modules=TARGETS,
                                 init_lora_weights="gaussian"))
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:
        torch.nn.init.normal_(p, std=0.02)
    if args.checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    optimizer = torch.optim.AdamW(params, lr=1e-4)
    x, inputs = diffusers_inputs(args, 1000.0)
    target = torch.randn_like(x)

    def step():
        out = model(**inputs)[0]
        torch.nn.functional.mse_loss(out.float(), target).backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        step()
    trace = os.path.join(work, "diffusers_lora.json")
    prof.export_chrome_trace(trace)
    import diffusers
    return [(f"diffusers {diffusers.__version__} + peft, LoRA rank {args.lora}", step_peak(trace), [])]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teletron", required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--head-dim", type=int, default=64)
    parser.add_argument("--rope", type=json.loads, default=[16, 24, 24])
    parser.add_argument("--doubles", type=int, default=2)
    parser.add_argument("--singles", type=int, default=2)
    parser.add_argument("--frames", type=int, default=9)
    parser.add_argument("--height", type=int, default=128)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--text", type=int, default=32)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--top", type=int, default=0, help="also list the N operators holding the most")
    parser.add_argument("--lora", type=int, default=0, help="compare one LoRA training step's peak at this rank")
    parser.add_argument("--checkpointing", action="store_true", help="with --lora: every block checkpointed, both sides")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="with --lora: a config override for teletron's runs (e.g. model.checkpoint_keeps_attention=true)")
    parser.add_argument("--work")
    args = parser.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="tt_activation_memory_")
    os.makedirs(work, exist_ok=True)
    tokens = ((args.frames - 1) // 4 + 1) * (args.height // 16) * (args.width // 16)
    print(f"hidden {args.heads * args.head_dim} ({args.heads} heads x {args.head_dim}), {args.doubles} double + "
          f"{args.singles} single blocks, {tokens} video + {args.text} text tokens, fp32 on {args.device}")
    if args.lora:
        rows = teletron_rows(args, work) + diffusers_lora_row(args, work)
        print(f"| run ({'every block checkpointed' if args.checkpointing else 'no checkpointing'}) | step peak MiB "
              "| vs diffusers + peft |")
        print("|---|---|---|")
        for name, total, _ in rows:
            print(f"| {name} | {total / 2**20:.2f} | {total / rows[-1][1]:.2f}x |")
        return 0
    rows = teletron_rows(args, work) + diffusers_rows(args, work)
    print("| run | held for backward MiB | vs diffusers eager |")
    print("|---|---|---|")
    eager = next(total for name, total, _ in rows if name.endswith("eager"))
    for name, total, top in rows:
        print(f"| {name} | {total / 2**20:.2f} | {total / eager:.2f}x |")
    for name, total, top in rows:
        if top:
            print(f"\n{name}: " + ", ".join(f"{op} {size / 2**20:.2f} MiB" for op, size in top))
    return 0


if __name__ == "__main__":
    sys.exit(main())
