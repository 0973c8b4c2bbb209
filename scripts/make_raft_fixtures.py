#!/usr/bin/env python3
"""Writes test/fixtures/raft_tiny.safetensors: the reference that teletron's RAFT (model/raft.h)
is compared against in test/model/test_raft.cpp. @generated files come from here; do not edit them.

Four torchvision RAFT models (torchvision.models.optical_flow.raft), in eval mode, fp32, on the CPU:
  tiny        raft_large's architecture (residual blocks, instance-norm feature encoder, batch-norm
              context encoder, separable 1x5 / 5x1 GRU, convex upsampling) at a few channels, with
              3 pyramid levels of radius 2, so that 64 x 96 images are big enough;
  tiny_small  raft_small's architecture (bottleneck blocks, norm-free context encoder, one 3x3
              GRU, one motion-encoder correlation conv, bilinear upsampling) at a few channels,
              3 levels of radius 1;
  raft_small, raft_large  the presets themselves (torchvision's raft_small() / raft_large()).
Every weight is random (weights_from_seed below). The tiny models' state dicts are stored; the two
presets' weights (1 M and 5.3 M parameters) would not fit a small fixture, so only their seed is,
and the test draws the same numbers with LibTorch's CPU generator (torch.rand is bitwise the same in
Python and C++).

The file holds:
  tiny.weight.<key>, tiny_small.weight.<key>   the state dicts, keys exactly torchvision's (F32;
                                               num_batches_tracked I64)
  input.image1, input.image2   (2, 3, 64, 96) U8: a smooth colour texture and the same texture
                               moved by a sub-pixel shift, one shift per sample; the models' input
                               is u8 / 127.5 - 1 in fp32 (in [-1, 1], as torchvision's transforms)
  tiny.output.flows            (2, 2, 2, 64, 96) F32: the flow after the first and the last of 4
                               updates
  tiny_small.output.flow       (2, 2, 64, 96) F32: the flow after 4 updates
  input.preset_image1, input.preset_image2   (1, 3, 128, 128) U8, the same kind of pair for the
                               presets (4 pyramid levels need 128 pixels)
  raft_small.output.flow, raft_large.output.flow   (1, 2, 128, 128) F32 after 3 updates
and in its metadata (JSON strings): `configs` (the tiny models' fields under teletron's RaftConfig
names), `keys.raft_small` / `keys.raft_large` (every state-dict key of the preset with its shape),
`seeds`, `num_flow_updates`, and the torch / torchvision versions.

How the checked-in file was made: Debian 12 x86-64, no GPU, Python 3.11.7, torch 2.11.0+cu130 and
torchvision 0.26.0+cu130 from pip (run on the CPU), in a venv over the Python that has torch:
    python3 -m venv --system-site-packages .venv
    .venv/bin/pip install torchvision==0.26.0 --no-deps && .venv/bin/pip install pillow numpy
    .venv/bin/python scripts/make_raft_fixtures.py [--out test/fixtures/raft_tiny.safetensors]
(about a minute on 2 cores). Deterministic: a second run gave the same bytes (keys and metadata are
sorted here).
"""

import argparse
import json
import math
import os
import struct

import torch
import torchvision
from torch import nn
from torchvision.models.optical_flow import raft_large, raft_small
from torchvision.models.optical_flow.raft import BottleneckBlock, MaskPredictor, ResidualBlock, _raft

# Field names follow teletron's RaftConfig (model/raft.h), so the test builds the same model.
CONFIGS = {
    "tiny": {
        "feature_layers": [8, 8, 12, 16, 24],
        "feature_block": "residual",
        "feature_norm": "instance",
        "context_layers": [8, 8, 12, 16, 20],
        "context_block": "residual",
        "context_norm": "batch",
        "corr_levels": 3,
        "corr_radius": 2,
        "motion_corr_layers": [16, 12],
        "motion_flow_layers": [8, 6],
        "motion_out_channels": 16,
        "hidden_size": 12,
        "gru": "separable",
        "flow_head_hidden": 16,
        "mask_predictor_hidden": 16,
    },
    "tiny_small": {
        "feature_layers": [8, 8, 12, 16, 16],
        "feature_block": "bottleneck",
        "feature_norm": "instance",
        "context_layers": [8, 8, 12, 16, 20],
        "context_block": "bottleneck",
        "context_norm": "none",
        "corr_levels": 3,
        "corr_radius": 1,
        "motion_corr_layers": [12],
        "motion_flow_layers": [8, 6],
        "motion_out_channels": 14,
        "hidden_size": 10,
        "gru": "conv3x3",
        "flow_head_hidden": 12,
        "mask_predictor_hidden": 0,  # no mask predictor: bilinear upsampling
    },
}

SEEDS = {"tiny": 11, "tiny_small": 12, "raft_small": 13, "raft_large": 14}
TINY_UPDATES = 4
PRESET_UPDATES = 3


def build_tiny(config: dict) -> nn.Module:
    blocks = {"residual": ResidualBlock, "bottleneck": BottleneckBlock}
    norms = {"instance": nn.InstanceNorm2d, "batch": nn.BatchNorm2d, "none": None}
    grus = {"separable": (((1, 5), (5, 1)), ((0, 2), (2, 0))), "conv3x3": ((3,), (1,))}
    kernel_size, padding = grus[config["gru"]]
    mask = config["mask_predictor_hidden"]
    return _raft(
        feature_encoder_layers=tuple(config["feature_layers"]),
        feature_encoder_block=blocks[config["feature_block"]],
        feature_encoder_norm_layer=norms[config["feature_norm"]],
        context_encoder_layers=tuple(config["context_layers"]),
        context_encoder_block=blocks[config["context_block"]],
        context_encoder_norm_layer=norms[config["context_norm"]],
        corr_block_num_levels=config["corr_levels"],
        corr_block_radius=config["corr_radius"],
        motion_encoder_corr_layers=tuple(config["motion_corr_layers"]),
        motion_encoder_flow_layers=tuple(config["motion_flow_layers"]),
        motion_encoder_out_channels=config["motion_out_channels"],
        recurrent_block_hidden_state_size=config["hidden_size"],
        recurrent_block_kernel_size=kernel_size,
        recurrent_block_padding=padding,
        flow_head_hidden_size=config["flow_head_hidden"],
        # _raft builds its mask predictor 256 wide; a narrower one is passed in ready-made.
        use_mask_predictor=False,
        mask_predictor=MaskPredictor(in_channels=config["hidden_size"], hidden_size=mask) if mask else None,
    )


def weights_from_seed(model: nn.Module, seed: int) -> None:
    """Every floating-point state-dict entry from one CPU generator, visited in sorted key order, one
    torch.rand(shape) draw u in [0, 1) per entry (test/model/test_raft.cpp repeats this):
      conv weights (4-D)       (2u - 1) * sqrt(3 / fan_in)  (variance 1 / fan_in)
      BatchNorm running_var    0.5 + u
      BatchNorm running_mean   0.4u - 0.2
      BatchNorm weight (1-D)   0.8 + 0.4u
      biases                   0.2u - 0.1
    num_batches_tracked is left at 0 (eval mode never reads it)."""
    generator = torch.Generator().manual_seed(seed)
    state = model.state_dict()
    with torch.no_grad():
        for key in sorted(state):
            tensor = state[key]
            if key.endswith("num_batches_tracked"):
                continue
            u = torch.rand(tensor.shape, generator=generator, dtype=torch.float32)
            if tensor.dim() == 4:
                value = (2 * u - 1) * math.sqrt(3.0 / tensor[0].numel())
            elif key.endswith("running_var"):
                value = 0.5 + u
            elif key.endswith("running_mean"):
                value = 0.4 * u - 0.2
            elif key.endswith("weight"):
                value = 0.8 + 0.4 * u
            else:
                assert key.endswith("bias"), key
                value = 0.2 * u - 0.1
            tensor.copy_(value)


def texture(height: int, width: int, shift_x: float, shift_y: float, phase: float) -> torch.Tensor:
    """(3, H, W) in [-1, 1]: sums of slanted sinusoids sampled at (x - shift_x, y - shift_y), so the
    second image is the first moved by (shift_x, shift_y) pixels."""
    y = torch.arange(height, dtype=torch.float64)[:, None] - shift_y
    x = torch.arange(width, dtype=torch.float64)[None, :] - shift_x
    channels = []
    for c in range(3):
        a = torch.sin(0.21 * x + 0.13 * y + phase + c)
        b = torch.cos(0.07 * x - 0.17 * y + 2 * phase - c)
        d = torch.sin(0.05 * (x + y) + 0.5 * c)
        channels.append((0.45 * a + 0.35 * b + 0.2 * d).clamp(-1, 1))
    return torch.stack(channels).to(torch.float32)


def image_pair(batch: int, height: int, width: int):
    """Two (B, 3, H, W) uint8 images."""
    shifts = [(2.5, -1.25, 0.3), (-3.0, 2.0, 1.1)]
    first = torch.stack([texture(height, width, 0, 0, p) for _, _, p in shifts[:batch]])
    second = torch.stack([texture(height, width, sx, sy, p) for sx, sy, p in shifts[:batch]])
    return to_u8(first), to_u8(second)


def to_u8(image: torch.Tensor) -> torch.Tensor:
    return ((image + 1) * 127.5).round().clamp(0, 255).to(torch.uint8)


def to_model_input(image: torch.Tensor) -> torch.Tensor:
    """uint8 -> fp32 in [-1, 1]; test_raft.cpp does the same two fp32 operations."""
    return image.to(torch.float32) / 127.5 - 1


DTYPES = {torch.float32: ("F32", "<f4"), torch.int64: ("I64", "<i8"), torch.uint8: ("U8", "u1")}


def save_safetensors(path: str, tensors: dict, metadata: dict) -> None:
    """8-byte little-endian header length, the JSON header (keys sorted, padded with spaces to a
    multiple of 8), then the tensors' bytes in header order; written here so the bytes are stable."""
    header = {"__metadata__": dict(sorted(metadata.items()))}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name].detach().contiguous()
        dtype_name, numpy_type = DTYPES[tensor.dtype]
        data = tensor.numpy().astype(numpy_type).tobytes()
        header[name] = {"dtype": dtype_name, "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in chunks:
            f.write(data)


def describe(name: str, flows: list) -> None:
    magnitudes = [f"{f.norm(dim=1).mean().item():.3f}" for f in flows]
    print(f"{name}: mean |flow| per update {magnitudes}, max |flow| {flows[-1].abs().max().item():.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    parser.add_argument("--out", default=os.path.join(root, "test", "fixtures", "raft_tiny.safetensors"))
    args = parser.parse_args()
    torch.set_num_threads(2)
    tensors = {}

    image1, image2 = image_pair(2, 64, 96)
    tensors["input.image1"], tensors["input.image2"] = image1, image2
    image1, image2 = to_model_input(image1), to_model_input(image2)
    for name, config in CONFIGS.items():
        model = build_tiny(config).eval()
        weights_from_seed(model, SEEDS[name])
        with torch.no_grad():
            flows = model(image1, image2, num_flow_updates=TINY_UPDATES)
        describe(name, flows)
        for key, value in model.state_dict().items():
            tensors[f"{name}.weight.{key}"] = value
        if name == "tiny":
            tensors["tiny.output.flows"] = torch.stack([flows[0], flows[-1]])
        else:
            tensors[f"{name}.output.flow"] = flows[-1]

    image1, image2 = image_pair(1, 128, 128)
    tensors["input.preset_image1"], tensors["input.preset_image2"] = image1, image2
    image1, image2 = to_model_input(image1), to_model_input(image2)
    preset_keys = {}
    for name, build in (("raft_small", raft_small), ("raft_large", raft_large)):
        model = build(weights=None).eval()
        weights_from_seed(model, SEEDS[name])
        with torch.no_grad():
            flows = model(image1, image2, num_flow_updates=PRESET_UPDATES)
        describe(name, flows)
        tensors[f"{name}.output.flow"] = flows[-1]
        preset_keys[name] = {key: list(value.shape) for key, value in model.state_dict().items()}

    metadata = {
        "@generated": "by scripts/make_raft_fixtures.py; do not edit, regenerate",
        "configs": json.dumps(CONFIGS, sort_keys=True),
        "keys.raft_small": json.dumps(preset_keys["raft_small"], sort_keys=True),
        "keys.raft_large": json.dumps(preset_keys["raft_large"], sort_keys=True),
        "seeds": json.dumps(SEEDS, sort_keys=True),
        "num_flow_updates": json.dumps({"tiny": TINY_UPDATES, "presets": PRESET_UPDATES}, sort_keys=True),
        "torch": torch.__version__,
        "torchvision": torchvision.__version__,
    }
    save_safetensors(args.out, tensors, metadata)
    print(f"wrote {args.out}: {len(tensors)} tensors, {os.path.getsize(args.out)} bytes")


if __name__ == "__main__":
    main()
