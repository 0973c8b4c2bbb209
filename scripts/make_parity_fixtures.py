#!/usr/bin/env python3
"""Writes test/fixtures/hunyuan_parity.safetensors: the reference that test/model/test_parity.cpp
compares teletron's HunyuanVideo Transformer against.

A small random diffusers HunyuanVideoTransformer3DModel (not the `tiny` preset: fractional
mlp_ratio, 3 latent frames, uneven RoPE axes, padded text) runs one fp32 forward and backward on
the CPU. The file holds, as fp32 tensors:
  weight.<diffusers key>   every parameter (random, none zero)
  input.<name>             hidden_states, timestep, encoder_hidden_states, encoder_attention_mask
                           (0/1 floats, right padded), pooled_projections, guidance
  output.sample            the forward's output, (B, C, T, H, W)
  loss.weights             w: the scalar loss is sum(output.sample * w)
  grad.<diffusers key>     d loss / d parameter, for a few parameters
  grad.input.<name>        d loss / d input, for hidden_states and encoder_hidden_states
and in its metadata the model's config.json (diffusers' field names) as a JSON string.

Usage (needs torch and diffusers):
    python3 scripts/make_parity_fixtures.py [--out test/fixtures/hunyuan_parity.safetensors]
Deterministic: same library versions give the same bytes (the file is written here, with sorted
keys, because safetensors' own writer orders the metadata map differently from run to run).
"""

import argparse
import json
import math
import os
import struct
import sys

import torch
import diffusers
from diffusers import HunyuanVideoTransformer3DModel

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_frames import save_safetensors  # noqa: E402

CONFIG = {
    "in_channels": 16,
    "out_channels": 16,
    "num_attention_heads": 2,
    "attention_head_dim": 24,
    "num_layers": 2,
    "num_single_layers": 2,
    "num_refiner_layers": 2,
    "mlp_ratio": 2.5,  # 48 * 2.5 = 120: diffusers truncates int(hidden * ratio)
    "patch_size": 2,
    "patch_size_t": 1,
    "qk_norm": "rms_norm",
    "guidance_embeds": True,
    "text_embed_dim": 40,
    "pooled_projection_dim": 24,
    "rope_theta": 256.0,
    "rope_axes_dim": [4, 10, 10],
}

BATCH = 2
LATENT_SHAPE = (16, 3, 8, 10)  # (C, T, H, W): 3 x 4 x 5 = 60 video tokens
TEXT_LENGTH = 7
VALID_TOKENS = (4, 7)  # sample 0 right-padded, sample 1 full

GRAD_KEYS = [
    "x_embedder.proj.weight",
    "context_embedder.proj_in.weight",
    "context_embedder.token_refiner.refiner_blocks.0.attn.to_v.weight",
    "context_embedder.token_refiner.refiner_blocks.1.ff.net.0.proj.weight",
    "time_text_embed.timestep_embedder.linear_1.weight",
    "time_text_embed.guidance_embedder.linear_1.weight",
    "time_text_embed.text_embedder.linear_1.weight",
    "transformer_blocks.0.attn.to_q.weight",
    "transformer_blocks.0.norm1.linear.weight",
    "transformer_blocks.1.attn.add_k_proj.weight",
    "transformer_blocks.1.attn.norm_added_q.weight",
    "transformer_blocks.1.ff_context.net.2.weight",
    "single_transformer_blocks.0.attn.norm_k.weight",
    "single_transformer_blocks.1.proj_out.weight",
    "norm_out.linear.weight",
    "proj_out.weight",
]


def randomise_(model: torch.nn.Module, generator: torch.Generator) -> None:
    """Every parameter random and nonzero. Norm gains near 1, everything else ~N(0, s^2) with s
    scaled by fan-in so activations stay O(1) through the blocks."""
    with torch.no_grad():
        for name, param in model.named_parameters():
            noise = torch.randn(param.shape, generator=generator, dtype=torch.float32)
            is_norm_gain = name.endswith(".weight") and param.dim() == 1
            if is_norm_gain:  # RMSNorm / LayerNorm weights
                param.copy_(1.0 + 0.2 * noise)
            elif param.dim() == 1:  # biases
                param.copy_(0.1 * noise)
            else:
                fan_in = param[0].numel()
                param.copy_(noise * (0.8 / math.sqrt(fan_in)))
            assert param.abs().min() > 0, f"{name} has a zero entry"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "test", "fixtures", "hunyuan_parity.safetensors"))
    args = parser.parse_args()

    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)  # fixed reduction order
    generator = torch.Generator().manual_seed(20240611)

    model = HunyuanVideoTransformer3DModel(**CONFIG)  # fp32
    model.train(False)
    randomise_(model, generator)

    def randn(*shape, scale=1.0):
        return torch.randn(shape, generator=generator, dtype=torch.float32) * scale

    hidden_states = randn(BATCH, *LATENT_SHAPE)
    encoder_hidden_states = randn(BATCH, TEXT_LENGTH, CONFIG["text_embed_dim"])
    mask = torch.zeros(BATCH, TEXT_LENGTH, dtype=torch.float32)
    for b, valid in enumerate(VALID_TOKENS):
        mask[b, :valid] = 1.0
    inputs = {
        "hidden_states": hidden_states,
        "timestep": torch.tensor([250.0, 875.0]),
        "encoder_hidden_states": encoder_hidden_states,
        "encoder_attention_mask": mask,
        "pooled_projections": randn(BATCH, CONFIG["pooled_projection_dim"]),
        "guidance": torch.tensor([1000.0, 6000.0]),
    }
    grad_inputs = ["hidden_states", "encoder_hidden_states"]
    feed = {k: (v.clone().requires_grad_(True) if k in grad_inputs else v.clone()) for k, v in inputs.items()}

    (sample,) = model(**feed, return_dict=False)
    loss_weights = randn(*sample.shape)
    loss = (sample * loss_weights).sum()
    loss.backward()

    tensors = {}
    for name, param in model.named_parameters():
        tensors["weight." + name] = param.detach().clone().contiguous()
    for name, value in inputs.items():
        tensors["input." + name] = value.contiguous()
    tensors["output.sample"] = sample.detach().contiguous()
    tensors["loss.weights"] = loss_weights.contiguous()
    params = dict(model.named_parameters())
    for key in GRAD_KEYS:
        grad = params[key].grad
        assert grad is not None and grad.abs().max() > 0, f"no gradient reaches {key}"
        tensors["grad." + key] = grad.detach().clone().contiguous()
    for name in grad_inputs:
        tensors["grad.input." + name] = feed[name].grad.detach().clone().contiguous()

    metadata = {
        "generated_by": "scripts/make_parity_fixtures.py",
        "@generated": "by scripts/make_parity_fixtures.py; do not edit, regenerate",
        "diffusers_version": diffusers.__version__,
        "torch_version": torch.__version__,
        # What diffusers writes as config.json (with _class_name, image_condition_type, ...).
        "config": json.dumps(json.loads(model.to_json_string()), sort_keys=True),
        "loss": "sum(output.sample * loss.weights)",
    }
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    save_safetensors(args.out, tensors, metadata)
    size = os.path.getsize(args.out)
    print(f"wrote {args.out}: {len(tensors)} tensors, {size / 1e6:.2f} MB, loss {loss.item():.6f}, "
          f"|sample| max {sample.abs().max().item():.4f} std {sample.std().item():.4f}")


if __name__ == "__main__":
    main()
