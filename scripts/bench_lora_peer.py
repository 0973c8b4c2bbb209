#!/usr/bin/env python3
"""The peer row of issue 14's LoRA target: a LoRA training step of diffusers'
HunyuanVideoTransformer3DModel with peft, timed as `teletron bench --set model.lora.rank=R` times
teletron's (random weights at the real shapes, one sample, fwd + bwd + AdamW on the adapters).

  bench_lora_peer.py [--preset 13b|tiny | --config-json FILE] [--frames 33 --height 480 --width 832]
                     [--text-tokens 256] [--rank 32 --alpha 32] [--checkpointing] [--compile MODE]
                     [--warmup 3 --steps 10] [--device cuda] [--json OUT]

The base is frozen in bf16 on CUDA (fp32 on the CPU) and the adapters are fp32 under bf16 autocast,
as diffusers' LoRA training scripts keep them (cast_training_params) and as teletron does. The
targets are teletron's defaults (model.lora.targets empty): both streams' attention projections and
MLPs in the double blocks, the single blocks' to_q/to_k/to_v/proj_mlp and proj_out; the token
refiner and the final layer get none. --checkpointing: diffusers' gradient checkpointing of every
block (teletron's model.activation_checkpointing: true). --compile: torch.compile of the model
(default, reduce-overhead or max-autotune); none by default. Prints one table row; --json writes it.
--trace DIR: one more step traced, its kernel time by kind (bench_diffusers.py's sorting, as
`teletron bench --trace` sorts teletron's) printed and in the JSON.
"""
import argparse
import json
import os
import sys
import time

import torch

TARGETS = (r"(transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v|to_out\.0|add_q_proj|add_k_proj|add_v_proj|to_add_out)"
           r"|ff\.net\.(0\.proj|2)|ff_context\.net\.(0\.proj|2))"
           r"|single_transformer_blocks\.\d+\.(attn\.(to_q|to_k|to_v)|proj_mlp|proj_out))")

TINY = {"in_channels": 16, "out_channels": 16, "num_attention_heads": 2, "attention_head_dim": 16,
        "num_layers": 1, "num_single_layers": 1, "num_refiner_layers": 1, "mlp_ratio": 4.0, "patch_size": 2,
        "patch_size_t": 1, "qk_norm": "rms_norm", "guidance_embeds": True, "text_embed_dim": 64,
        "pooled_projection_dim": 32, "rope_theta": 256.0, "rope_axes_dim": [4, 6, 6]}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", choices=["13b", "tiny"], default="13b")
    parser.add_argument("--config-json")
    parser.add_argument("--frames", type=int, default=33)
    parser.add_argument("--height", type=int, default=480)
    parser.add_argument("--width", type=int, default=832)
    parser.add_argument("--text-tokens", type=int, default=256)
    parser.add_argument("--rank", type=int, default=32)
    parser.add_argument("--alpha", type=float, default=32)
    parser.add_argument("--checkpointing", action="store_true")
    parser.add_argument("--compile", default="none")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--json")
    parser.add_argument("--trace", metavar="DIR", help="trace one more step here (CUDA)")
    args = parser.parse_args()

    from diffusers import HunyuanVideoTransformer3DModel
    from peft import LoraConfig

    if args.config_json:
        with open(args.config_json) as f:
            config = {k: v for k, v in json.load(f).items() if not k.startswith("_")}
    else:
        config = {} if args.preset == "13b" else dict(TINY)  # diffusers' defaults are the released 13B
    device = torch.device(args.device)
    cuda = device.type == "cuda"
    torch.manual_seed(0)
    model = HunyuanVideoTransformer3DModel(**config)
    model.requires_grad_(False)
    model.to(device, torch.bfloat16 if cuda else torch.float32)
    model.add_adapter(LoraConfig(r=args.rank, lora_alpha=args.alpha, target_modules=TARGETS,
                                 init_lora_weights="gaussian"))
    params = [p for p in model.parameters() if p.requires_grad]
    for p in params:  # fp32 adapters (diffusers' cast_training_params), B random so the graph is the trained one
        p.data = p.data.float()
        torch.nn.init.normal_(p, std=0.02)
    if args.checkpointing:
        model.enable_gradient_checkpointing()
    model.train()
    step_model = model if args.compile == "none" else torch.compile(model, mode=args.compile)
    optimizer = torch.optim.AdamW(params, lr=1e-4, fused=cuda)

    c = model.config
    lt, lh, lw = (args.frames - 1) // 4 + 1, args.height // 8, args.width // 8
    latents = torch.randn(1, c.in_channels, lt, lh, lw, device=device)
    target = torch.randn_like(latents)
    text = torch.randn(1, args.text_tokens, c.text_embed_dim, device=device)
    mask = torch.ones(1, args.text_tokens, dtype=torch.int64, device=device)
    pooled = torch.randn(1, c.pooled_projection_dim, device=device)
    timestep = torch.tensor([500.0], device=device)
    guidance = torch.tensor([1000.0], device=device)

    def step():
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=cuda):
            out = step_model(hidden_states=latents, timestep=timestep, encoder_hidden_states=text,
                             encoder_attention_mask=mask, pooled_projections=pooled, guidance=guidance,
                             return_dict=False)[0]
        loss = torch.nn.functional.mse_loss(out.float(), target)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    seconds = (time.perf_counter() - start) / args.steps
    peak = torch.cuda.max_memory_allocated() / 2**30 if cuda else float("nan")
    trainable = sum(p.numel() for p in params)
    row = {"peer": "diffusers HunyuanVideoTransformer3DModel + peft LoRA", "rank": args.rank,
           "trainable_parameters": trainable, "checkpointing": args.checkpointing, "compile": args.compile,
           "frames": args.frames, "height": args.height, "width": args.width, "step_ms": seconds * 1e3,
           "samples_per_s": 1.0 / seconds, "peak_gib": peak}
    print("| peer | rank | trainable | checkpointing | compile | step ms | samples/s | peak GiB |")
    print("|---|---|---|---|---|---|---|---|")
    print(f"| diffusers + peft | {args.rank} | {trainable:,} | {args.checkpointing} | {args.compile} | "
          f"{seconds * 1e3:.1f} | {1.0 / seconds:.3f} | {peak:.2f} |")
    if args.trace and cuda:
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        from bench_diffusers import time_split
        os.makedirs(args.trace, exist_ok=True)
        split = time_split(step, 1, os.path.join(args.trace, "peer_lora.json"))
        row["time_split"] = split
        print("peer kernel time per step by kind (ms): " + ", ".join(
            f"{kind} {ms:.1f}" for kind, ms in sorted(split["kernel_ms_by_kind"].items(), key=lambda kv: -kv[1])))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(row, f, indent=2)


if __name__ == "__main__":
    main()
