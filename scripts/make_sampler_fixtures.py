#!/usr/bin/env python3
"""Writes test/fixtures/hunyuan_sampler_parity.safetensors: the reference that
test/model/test_flow_sampler.cpp compares teletron's flow-matching sampler (model/flow_sampler.h)
against.

diffusers' HunyuanVideoPipeline (text encoders, tokenizers and VAE left out: the prompt
embeddings are given and output_type="latent") samples with a tiny random
HunyuanVideoTransformer3DModel (guidance-distilled) and FlowMatchEulerDiscreteScheduler(shift=
FLOW_SHIFT), from given initial latents, in fp32 on the CPU. Two runs: RUNS below (steps, shift,
guidance). The file holds, as fp32 tensors:
  weight.<diffusers key>          every parameter of the transformer
  input.latents                   (B, 16, T', H', W') the initial noise
  input.prompt_embeds             (B, L, text_embed_dim)
  input.prompt_attention_mask     (B, L) 0/1, sample 0 right-padded
  input.pooled_prompt_embeds      (B, pooled_projection_dim)
  output.<run>.latents            the pipeline's final latents
  output.<run>.sigmas             the scheduler's sigmas (steps + 1, the last 0)
  output.<run>.timesteps          the scheduler's timesteps (steps)
and in its metadata the model's config.json and each run's settings (JSON).

Usage (needs torch and diffusers):
    python3 scripts/make_sampler_fixtures.py [--out test/fixtures/hunyuan_sampler_parity.safetensors]
"""

import argparse
import json
import math
import os
import sys

import torch
import diffusers
from diffusers import FlowMatchEulerDiscreteScheduler, HunyuanVideoPipeline, HunyuanVideoTransformer3DModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_frames import save_safetensors  # noqa: E402

CONFIG = {
    "in_channels": 16,
    "out_channels": 16,
    "num_attention_heads": 2,
    "attention_head_dim": 16,
    "num_layers": 1,
    "num_single_layers": 1,
    "num_refiner_layers": 1,
    "mlp_ratio": 2.0,
    "patch_size": 2,
    "patch_size_t": 1,
    "qk_norm": "rms_norm",
    "guidance_embeds": True,
    "text_embed_dim": 32,
    "pooled_projection_dim": 16,
    "rope_theta": 256.0,
    "rope_axes_dim": [4, 6, 6],
}

BATCH = 2
FRAMES, HEIGHT, WIDTH = 5, 32, 48  # video pixels: latents (16, 2, 4, 6)
TEXT_LENGTH = 6
VALID_TOKENS = (4, 6)
# name -> (steps, flow_shift, guidance_scale)
RUNS = {"a": (4, 7.0, 6.0), "b": (3, 3.0, 1.0)}


def randomise_(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Every parameter random: norm gains near 1, biases small, weights ~N(0, (0.8^2)/fan_in), so
    the velocity stays O(1) and the steps move the latents visibly."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            if name.endswith(".weight") and param.dim() == 1:
                param.copy_(1.0 + 0.2 * noise)
            elif param.dim() == 1:
                param.copy_(0.1 * noise)
            else:
                param.copy_(noise * (0.8 / math.sqrt(param[0].numel())))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "test", "fixtures", "hunyuan_sampler_parity.safetensors"))
    args = parser.parse_args()

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    generator = torch.Generator().manual_seed(20251203)

    transformer = HunyuanVideoTransformer3DModel(**CONFIG)
    transformer.train(False)
    randomise_(transformer, generator)

    def randn(*shape):
        return torch.randn(shape, generator=generator, dtype=torch.float32)

    latent_shape = (BATCH, 16, (FRAMES - 1) // 4 + 1, HEIGHT // 8, WIDTH // 8)
    latents = randn(*latent_shape)
    prompt_embeds = randn(BATCH, TEXT_LENGTH, CONFIG["text_embed_dim"])
    mask = torch.zeros(BATCH, TEXT_LENGTH, dtype=torch.float32)
    for b, valid in enumerate(VALID_TOKENS):
        mask[b, :valid] = 1.0
    pooled = randn(BATCH, CONFIG["pooled_projection_dim"])

    tensors = {"weight." + k: v.detach().clone().contiguous() for k, v in transformer.named_parameters()}
    tensors["input.latents"] = latents.clone()
    tensors["input.prompt_embeds"] = prompt_embeds.clone()
    tensors["input.prompt_attention_mask"] = mask.clone()
    tensors["input.pooled_prompt_embeds"] = pooled.clone()

    runs = {}
    for name, (steps, shift, guidance) in RUNS.items():
        scheduler = FlowMatchEulerDiscreteScheduler(shift=shift)
        pipe = HunyuanVideoPipeline(text_encoder=None, tokenizer=None, transformer=transformer, vae=None,
                                    scheduler=scheduler, text_encoder_2=None, tokenizer_2=None)
        pipe.set_progress_bar_config(disable=True)
        with torch.no_grad():
            out = pipe(prompt_embeds=prompt_embeds.clone(), prompt_attention_mask=mask.clone(),
                       pooled_prompt_embeds=pooled.clone(), latents=latents.clone(), num_frames=FRAMES,
                       height=HEIGHT, width=WIDTH, num_inference_steps=steps, guidance_scale=guidance,
                       output_type="latent", return_dict=False)[0]
        moved = (out - latents).abs().max().item()
        assert moved > 0.1, f"run {name}: the latents barely moved ({moved})"
        tensors[f"output.{name}.latents"] = out.detach().float().contiguous()
        tensors[f"output.{name}.sigmas"] = scheduler.sigmas.float().contiguous()
        tensors[f"output.{name}.timesteps"] = scheduler.timesteps.float().contiguous()
        runs[name] = {"steps": steps, "flow_shift": shift, "guidance_scale": guidance}
        print(f"run {name}: steps {steps}, shift {shift}, guidance {guidance}: |latents| max "
              f"{out.abs().max().item():.4f}, moved {moved:.4f}")

    metadata = {
        "generated_by": "scripts/make_sampler_fixtures.py",
        "@generated": "by scripts/make_sampler_fixtures.py; do not edit, regenerate",
        "diffusers_version": diffusers.__version__,
        "torch_version": torch.__version__,
        "config": json.dumps(json.loads(transformer.to_json_string()), sort_keys=True),
        "runs": json.dumps(runs, sort_keys=True),
        "frames": str(FRAMES),
        "height": str(HEIGHT),
        "width": str(WIDTH),
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_safetensors(args.out, tensors, metadata)
    print(f"wrote {args.out}: {len(tensors)} tensors, {os.path.getsize(args.out) / 1e6:.3f} MB")


if __name__ == "__main__":
    main()
