#!/usr/bin/env python3
"""Writes test/fixtures/hunyuan_vae_decoder_parity.safetensors (@generated): the reference that
teletron's HunyuanVideo VAE decoder (model/vae_decoder.h) is compared against in
test/model/test_vae_decoder.cpp.

A small random diffusers AutoencoderKLHunyuanVideo (block_out_channels (8, 8, 16, 16), one resnet per
down block and so two per up block, 4 groups, 4 latent channels, mid-block attention on; 8x spatial
and 4x temporal compression as the real one) decodes latents in fp32 on the CPU through
`AutoencoderKLHunyuanVideo.decode` in four modes. The file holds, as fp32 tensors:
  weight.<diffusers key>      every decoder parameter (decoder.*, post_quant_conv.*), random, nonzero
  whole.latents               (2, 4, 3, 3, 4)
  whole.video                 decode with framewise decoding and tiling off: (2, 3, 9, 24, 32)
  temporal.latents            (1, 4, 7, 2, 3)
  temporal.video              decode as diffusers does by default (framewise decoding on, its default
                              frame windows: 4 + 1 latent frames every 3, the last window a single
                              frame), tiling off: (1, 3, 25, 16, 24)
  spatial.latents             (1, 4, 2, 4, 6)
  spatial.video               decode with framewise decoding off and enable_tiling(SPATIAL_TILES):
                              a 2 x 3 grid of tiles blended 8 rows / 16 columns: (1, 3, 5, 32, 48)
  both.latents                (1, 4, 5, 4, 6)
  both.video                  decode with framewise decoding on and enable_tiling(SPATIAL_TILES +
                              FRAME_TILES): windows of 3 + 1 latent frames every 2 (three windows, the
                              last a single frame), each a 2 x 3 grid: (1, 3, 17, 32, 48)
and in its metadata the VAE's config.json (diffusers' field names) and the tile settings as JSON.

Usage (needs torch and diffusers; CI does not run it):
    python3 scripts/make_vae_decoder_fixtures.py [--out test/fixtures/hunyuan_vae_decoder_parity.safetensors]
"""

import argparse
import json
import os
import sys

import torch
import diffusers
from diffusers import AutoencoderKLHunyuanVideo

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_parity_fixtures import randomise_, save_safetensors  # noqa: E402

CONFIG = {
    "in_channels": 3,
    "out_channels": 3,
    "latent_channels": 4,
    "block_out_channels": [8, 8, 16, 16],
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "act_fn": "silu",
    "scaling_factor": 0.476986,
    "spatial_compression_ratio": 8,
    "temporal_compression_ratio": 4,
    "mid_block_add_attention": True,
}

# Tiles of 3 x 4 latents every 2 x 2 (24 x 32 pixels every 16 x 16): height and width differ, so a
# swapped pair shows.
SPATIAL_TILES = {
    "tile_sample_min_height": 24,
    "tile_sample_min_width": 32,
    "tile_sample_stride_height": 16,
    "tile_sample_stride_width": 16,
}
# Windows of 3 + 1 latent frames every 2 (12 + 1 frames every 8, blending 4).
FRAME_TILES = {
    "tile_sample_min_num_frames": 12,
    "tile_sample_stride_num_frames": 8,
}

SHAPES = {
    "whole": (2, 4, 3, 3, 4),
    "temporal": (1, 4, 7, 2, 3),
    "spatial": (1, 4, 2, 4, 6),
    "both": (1, 4, 5, 4, 6),
}


def decode(config: dict, latents: torch.Tensor, framewise: bool, tiles: dict | None) -> torch.Tensor:
    """A fresh model per mode (enable_tiling changes the model's tile settings for good)."""
    vae = AutoencoderKLHunyuanVideo(**config).to(torch.float32).eval()
    vae.load_state_dict(STATE, strict=True)
    vae.use_framewise_decoding = framewise
    if tiles is not None:
        vae.enable_tiling(**tiles)
    with torch.no_grad():
        return vae.decode(latents).sample


def main() -> None:
    global STATE
    parser = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out",
                        default=os.path.join(here, "..", "test", "fixtures", "hunyuan_vae_decoder_parity.safetensors"))
    args = parser.parse_args()

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(4321)
    vae = AutoencoderKLHunyuanVideo(**CONFIG).to(torch.float32).eval()
    decoder_parts = torch.nn.ModuleDict({"decoder": vae.decoder, "post_quant_conv": vae.post_quant_conv})
    randomise_(decoder_parts, generator)
    STATE = vae.state_dict()

    latents = {name: torch.randn(shape, generator=generator, dtype=torch.float32) for name, shape in SHAPES.items()}
    videos = {
        "whole": decode(CONFIG, latents["whole"], False, None),
        "temporal": decode(CONFIG, latents["temporal"], True, None),
        "spatial": decode(CONFIG, latents["spatial"], False, SPATIAL_TILES),
        "both": decode(CONFIG, latents["both"], True, {**SPATIAL_TILES, **FRAME_TILES}),
    }
    # Each tiled mode really tiles: it differs from decoding the same latents whole.
    for name in ("temporal", "spatial", "both"):
        whole = decode(CONFIG, latents[name], False, None)
        assert whole.shape == videos[name].shape, name
        ratio = ((whole - videos[name]).abs().max() / whole.abs().max()).item()
        assert ratio > 1e-3, f"{name}: tiling changes nothing ({ratio})"

    tensors = {f"weight.{name}": p.detach().clone() for name, p in decoder_parts.named_parameters()}
    for name in SHAPES:
        tensors[f"{name}.latents"] = latents[name]
        tensors[f"{name}.video"] = videos[name].contiguous()
    metadata = {
        "config": json.dumps(json.loads(vae.to_json_string()), sort_keys=True),
        "spatial_tiles": json.dumps(SPATIAL_TILES, sort_keys=True),
        "frame_tiles": json.dumps(FRAME_TILES, sort_keys=True),
        "diffusers": diffusers.__version__,
        "torch": torch.__version__,
    }
    save_safetensors(args.out, tensors, metadata)
    shapes = ", ".join(f"{name} {tuple(videos[name].shape)}" for name in SHAPES)
    print(f"wrote {args.out}: {len(tensors)} tensors; {shapes}")


STATE: dict = {}

if __name__ == "__main__":
    main()
