#!/usr/bin/env python3
"""Writes test/fixtures/hunyuan_vae_parity.safetensors: the reference that teletron's HunyuanVideo
VAE encoder is compared against (test/model/test_vae.cpp).

A small random diffusers AutoencoderKLHunyuanVideo (block_out_channels (8, 16, 16, 16), one resnet
per block, 4 groups, 4 latent channels, mid-block attention on; 8x spatial and 4x temporal
compression as the real one) encodes a batch of 2 clips of 9 frames at 24x40 in fp32 on the CPU.
The file holds, as fp32 tensors:
  weight.<diffusers key>   every encoder parameter (encoder.*, quant_conv.*), random and nonzero
  input.sample             (2, 3, 9, 24, 40) in [-1, 1]
  output.moments           quant_conv(encoder(sample)): (2, 8, 3, 3, 5), mean then log-variance
  output.moments_tiled     diffusers' tiled encode of the same sample (AutoencoderKLHunyuanVideo._encode
                           with framewise encoding and spatial tiling at the small tile sizes in TILING)
and in its metadata the VAE's config.json (diffusers' field names) as a JSON string.

Usage (needs torch and diffusers):
    python3 scripts/make_vae_fixtures.py [--out test/fixtures/hunyuan_vae_parity.safetensors]
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
    "block_out_channels": [8, 16, 16, 16],
    "layers_per_block": 1,
    "norm_num_groups": 4,
    "act_fn": "silu",
    "scaling_factor": 0.476986,
    "spatial_compression_ratio": 8,
    "temporal_compression_ratio": 4,
    "mid_block_add_attention": True,
}

INPUT_SHAPE = (2, 3, 9, 24, 40)

# Small tiles so that the 9x24x40 input is split in time (tiles of 8 + 1 frames every 4) and in
# space (16x16 tiles every 8 pixels), with blending in all three directions.
TILING = {
    "tile_sample_min_num_frames": 8,
    "tile_sample_stride_num_frames": 4,
    "tile_sample_min_height": 16,
    "tile_sample_min_width": 16,
    "tile_sample_stride_height": 8,
    "tile_sample_stride_width": 8,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    here = os.path.dirname(os.path.abspath(__file__))
    parser.add_argument("--out", default=os.path.join(here, "..", "test", "fixtures", "hunyuan_vae_parity.safetensors"))
    args = parser.parse_args()

    torch.manual_seed(0)
    generator = torch.Generator().manual_seed(1234)
    vae = AutoencoderKLHunyuanVideo(**CONFIG).to(torch.float32).eval()
    encoder_parts = torch.nn.ModuleDict({"encoder": vae.encoder, "quant_conv": vae.quant_conv})
    randomise_(encoder_parts, generator)

    sample = torch.rand(INPUT_SHAPE, generator=generator, dtype=torch.float32) * 2 - 1
    with torch.no_grad():
        moments = vae.quant_conv(vae.encoder(sample))
        vae.use_framewise_encoding = True
        vae.enable_tiling(**TILING)
        moments_tiled = vae._encode(sample)

    tensors = {f"weight.{name}": p for name, p in encoder_parts.named_parameters()}
    tensors["input.sample"] = sample
    tensors["output.moments"] = moments
    tensors["output.moments_tiled"] = moments_tiled
    metadata = {
        "config": json.dumps(json.loads(vae.to_json_string()), sort_keys=True),
        "tiling": json.dumps(TILING, sort_keys=True),
        "diffusers": diffusers.__version__,
        "torch": torch.__version__,
    }
    save_safetensors(args.out, tensors, metadata)
    print(f"wrote {args.out}: moments {tuple(moments.shape)}, {len(tensors)} tensors")


if __name__ == "__main__":
    main()
