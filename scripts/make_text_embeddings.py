#!/usr/bin/env python3
"""Random text-embedding files for video benchmarks and tests: N safetensors files holding
text_states (L, D) fp32, text_mask (L) uint8 (the first `valid` tokens 1) and pooled (P) fp32, as
`data.source: video` rows name them. Deterministic from the seed. Needs only torch.

Usage: make_text_embeddings.py OUT_DIR --count N [--length 256] [--valid 200] [--dim 4096] [--pooled 768]
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from compare_frames import save_safetensors  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("out")
    parser.add_argument("--count", type=int, required=True)
    parser.add_argument("--length", type=int, default=256)
    parser.add_argument("--valid", type=int, default=200)
    parser.add_argument("--dim", type=int, default=4096)
    parser.add_argument("--pooled", type=int, default=768)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    generator = torch.Generator().manual_seed(args.seed)
    for i in range(args.count):
        mask = torch.zeros(args.length)
        mask[: args.valid] = 1
        save_safetensors(os.path.join(args.out, f"text{i:04d}.safetensors"),
                         {"text_states": torch.randn(args.length, args.dim, generator=generator),
                          "text_mask": mask,  # fp32 0/1: the reader accepts float masks
                          "pooled": torch.randn(args.pooled, generator=generator)}, {})
    print(f"wrote {args.count} embedding files to {args.out}")


if __name__ == "__main__":
    main()
