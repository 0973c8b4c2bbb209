#!/usr/bin/env python3
"""Compares frames dumped by `teletron probe --dump` with reference frames saved by torch.save.

Usage: compare_frames.py DUMP.safetensors INDEX=REF.pt [INDEX=REF.pt ...]
Each reference is a (H, W, 3) uint8 tensor for frame INDEX of the dump's `indices`. Prints mean,
99th percentile and max |error| per frame (0-255) and exits 1 when a frame misses the colour
tolerance (mean <= 1.0, p99 <= 3). Reads safetensors by hand (header length, JSON, raw bytes) so
it needs only torch.
"""
import json
import struct
import sys

import torch


def read_safetensors(path):
    with open(path, "rb") as f:
        (length,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(length))
        data = f.read()
    dtypes = {"U8": torch.uint8, "I64": torch.int64, "F64": torch.float64, "F32": torch.float32,
              "BF16": torch.bfloat16, "F16": torch.float16}
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        flat = torch.frombuffer(bytearray(data[begin:end]), dtype=dtypes[info["dtype"]])
        out[name] = flat.reshape(info["shape"])
    return out



def save_safetensors(path: str, tensors: dict, metadata: dict) -> None:
    """safetensors layout: u64 little-endian header size, JSON header (keys sorted, padded with
    spaces to 8 bytes), then the raw little-endian fp32 data in header order."""
    header = {"__metadata__": dict(sorted(metadata.items()))}
    chunks = []
    offset = 0
    for name in sorted(tensors):
        tensor = tensors[name].detach().to(torch.float32).contiguous()
        data = tensor.numpy().astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(tensor.shape), "data_offsets": [offset, offset + len(data)]}
        chunks.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in chunks:
            f.write(data)


def main():
    dump = read_safetensors(sys.argv[1])
    frames, indices = dump["frames"], dump["indices"].tolist()
    ok = True
    print("| frame | mean abs err | p99 | max | within tolerance |")
    print("|---|---|---|---|---|")
    for arg in sys.argv[2:]:
        index, ref_path = arg.split("=", 1)
        reference = torch.load(ref_path)
        ours = frames[indices.index(int(index))]
        if ours.shape != reference.shape:
            print(f"| {index} | shape {tuple(ours.shape)} vs reference {tuple(reference.shape)} | | | no |")
            ok = False
            continue
        err = (ours.float() - reference.float()).abs().flatten()
        mean, p99, mx = err.mean().item(), err.kthvalue(int(0.99 * err.numel())).values.item(), err.max().item()
        good = mean <= 1.0 and p99 <= 3
        ok &= good
        print(f"| {index} | {mean:.3f} | {p99:.0f} | {mx:.0f} | {'yes' if good else 'NO'} |")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
