#!/usr/bin/env python3
"""Writes the fuzz targets' seed corpora into test/fuzz/corpus/<target>/ (checked in; rerun after
changing a format). Every file is small (a few KB at most). Needs python3; torch (for the
torch.save seeds) and the ffmpeg CLI (for the video seeds) -- targets whose tool is missing are
skipped with a note. Deterministic except for the video encoders' own headers (encoder versions).

  scripts/make_fuzz_seeds.py [--out test/fuzz/corpus]
"""
import argparse
import json
import os
import random
import shutil
import struct
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(folder, name, data):
    os.makedirs(folder, exist_ok=True)
    if isinstance(data, str):
        data = data.encode()
    with open(os.path.join(folder, name), "wb") as f:
        f.write(data)


def safetensors_bytes(tensors, metadata=None, pad=0):
    """tensors: name -> (dtype name, shape, raw bytes). Written by hand (no torch needed)."""
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, raw) in tensors.items():
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode() + b" " * pad
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


def make_safetensors(out):
    d = os.path.join(out, "safetensors")
    write(d, "f32_2x2.safetensors", safetensors_bytes({"w": ("F32", [2, 2], f32(1, 2, 3, 4))}))
    write(d, "mixed.safetensors", safetensors_bytes({
        "a": ("BF16", [3], b"\x80\x3f\x00\x40\x40\x40"),
        "b": ("F16", [1, 2], b"\x00\x3c\x00\x40"),
        "c": ("I64", [1], struct.pack("<q", -7)),
        "d": ("BOOL", [2], b"\x01\x00"),
        "e": ("U8", [2, 1], b"\x05\x06"),
        "f": ("I32", [], struct.pack("<i", 3)),
    }, metadata={"format": "pt"}, pad=3))
    write(d, "empty_tensor.safetensors", safetensors_bytes({"z": ("F32", [0, 4], b"")}))
    write(d, "no_tensors.safetensors", safetensors_bytes({}, metadata={"k": "v"}))
    write(d, "f64_i16_i8.safetensors", safetensors_bytes({
        "x": ("F64", [1], struct.pack("<d", 0.5)), "y": ("I16", [2], struct.pack("<hh", 1, -1)),
        "z": ("I8", [3], b"\x01\x02\xff")}))
    # Damaged on purpose: offsets past the end and a header length past the end.
    write(d, "offsets_past_end.safetensors",
          safetensors_bytes({"w": ("F32", [2], f32(1, 2))})[:-4])
    write(d, "header_len_too_big.safetensors", struct.pack("<Q", 1 << 40) + b"{}")


def make_torch_save(out):
    try:
        import torch
    except ImportError:
        print("make_fuzz_seeds: no torch, torch_save seeds skipped", file=sys.stderr)
        return
    from collections import OrderedDict
    d = os.path.join(out, "torch_save")
    os.makedirs(d, exist_ok=True)
    torch.manual_seed(0)
    cases = {
        "plain.pt": {"w": torch.arange(4, dtype=torch.float32).reshape(2, 2), "b": torch.ones(2)},
        "module.pt": {"module": {"layer.weight": torch.zeros(2, 3, dtype=torch.bfloat16)}, "step": 3},
        "ordered_dict.pt": None,  # filled below: an OrderedDict with _metadata, as state_dict() gives
        "strided.pt": {"t": torch.arange(6, dtype=torch.float16).reshape(2, 3).t()},
        "shared_storage.pt": None,
        "scalars.pt": {"model": {"s": torch.tensor(2.5, dtype=torch.float64)}, "cfg": [1, 2.0, "x", None, True]},
    }
    od = OrderedDict([("a", torch.ones(1, dtype=torch.int64)), ("b", torch.zeros(2, dtype=torch.uint8))])
    od._metadata = OrderedDict([("", {"version": 1})])
    cases["ordered_dict.pt"] = od
    base = torch.arange(8, dtype=torch.int32)
    cases["shared_storage.pt"] = {"x": base[:4], "y": base[4:]}
    import zipfile
    for name, obj in cases.items():
        torch.save(obj, os.path.join(d, name))
        # The same pickle alone: the target wraps it into an archive (see fuzz_torch_save.cpp).
        with zipfile.ZipFile(os.path.join(d, name)) as z:
            pkl = [n for n in z.namelist() if n.endswith("/data.pkl")][0]
            write(d, name.replace(".pt", ".pkl"), z.read(pkl))


def make_config(out):
    d = os.path.join(out, "config")
    os.makedirs(d, exist_ok=True)
    for name in ("quickstart.yaml", "seed_8xa100.yaml"):
        shutil.copy(os.path.join(ROOT, "configs", name), os.path.join(d, name))
    write(d, "minimal.yaml", "tele_tron: {}\n")
    write(d, "video.yaml", """tele_tron:
  data:
    source: video
    manifest: data/videos.jsonl
    buckets: [{frames: 17, height: 256, width: 256}, {frames: 33, height: 480, width: 832}]
  data_pipeline:
    frame_sampler: {mode: fps, target_fps: 24, samples_per_clip: null}
    augment: {flip: true, crop: center}
  optimizer: {lr: 1.0e-4, betas: [0.9, 0.95]}
  model: {preset: tiny, activation_checkpointing: {every_n: 2}}
""")
    write(d, "typo.yaml", "tele_tron:\n  optimiser:\n    lr: -1\n")
    write(d, "anchors.yaml", "tele_tron:\n  model: &m {preset: tiny}\n  train: {max_steps: 2, seed: 7}\n  x: *m\n")


def make_latent_manifest(out):
    # The fuzz target puts a/b/c/rank/junk.safetensors next to the manifest (see its header).
    d = os.path.join(out, "latent_manifest")
    row = lambda f: json.dumps({"latents": f}) + "\n"
    write(d, "one_row.jsonl", row("a.safetensors"))
    write(d, "two_rows.jsonl", row("a.safetensors") + "\n" + row("./a.safetensors"))
    write(d, "shape_mismatch.jsonl", row("a.safetensors") + row("b.safetensors"))
    write(d, "length_mismatch.jsonl", row("a.safetensors") + row("c.safetensors"))
    write(d, "bad_rank.jsonl", row("rank.safetensors"))
    write(d, "junk_file.jsonl", row("junk.safetensors"))
    write(d, "missing.jsonl", row("nope.safetensors"))
    write(d, "bad_json.jsonl", '{"latents": "a.safetensors"\n[1, 2]\n{"latents": 3}\n')


def make_video_manifest(out):
    d = os.path.join(out, "video_manifest")
    write(d, "rows.jsonl", '{"video": "clips/a.mp4", "text_embeddings": "emb/a.safetensors"}\n'
          '\n{"video": "/abs/b.mkv"}\n')
    write(d, "bad_rows.jsonl", '{"video": ""}\n{"text_embeddings": "e.safetensors"}\n[1]\nnot json\n'
          '{"video": 5}\n{"video": "a.mp4", "text_embeddings": null}\n')
    write(d, "unicode.jsonl", '{"video": "cl\\u00efp\\ud83d\\ude00.mp4", "extra": {"k": [1.5e3, true]}}\r\n')


def ffmpeg(args):
    subprocess.run(["ffmpeg", "-hide_banner", "-loglevel", "error", "-y"] + args, check=True)


def make_video_reader(out):
    if shutil.which("ffmpeg") is None:
        print("make_fuzz_seeds: no ffmpeg CLI, video_reader seeds skipped", file=sys.stderr)
        return
    d = os.path.join(out, "video_reader")
    os.makedirs(d, exist_ok=True)
    src = ["-f", "lavfi", "-i", "testsrc2=size=16x16:rate=8:duration=0.75"]
    tmp = tempfile.mkdtemp()
    try:
        ffmpeg(src + ["-c:v", "libx264", "-preset", "ultrafast", "-g", "3", "-bf", "2", "-pix_fmt", "yuv420p",
                      "-x264-params", "log-level=none", "-map_metadata", "-1", "-fflags", "+bitexact",
                      os.path.join(d, "h264_bframes.mp4")])
        ffmpeg(src + ["-c:v", "libx264", "-preset", "ultrafast", "-pix_fmt", "yuv420p10le", "-x264-params",
                      "log-level=none", "-fflags", "+bitexact", os.path.join(d, "h264_10bit.mkv")])
        # Odd size (4:2:0 chroma rounds up), full range.
        ffmpeg(src[:3] + ["testsrc2=size=15x9:rate=8:duration=0.25", "-c:v", "mjpeg", "-pix_fmt", "yuvj420p", "-fflags", "+bitexact", os.path.join(d, "mjpeg.avi")])
        ffmpeg(src + ["-c:v", "mpeg4", "-g", "4", "-fflags", "+bitexact", "-f", "mpegts", os.path.join(d, "mpeg4.ts")])
        ffmpeg(src + ["-c:v", "libvpx-vp9", "-deadline", "realtime", "-fflags", "+bitexact", "-colorspace", "bt709",
                      os.path.join(d, "vp9.webm")])
        # Display rotation (a 90-degree display matrix) on a non-square size.
        rotated = os.path.join(tmp, "plain.mp4")
        ffmpeg(["-f", "lavfi", "-i", "testsrc2=size=14x8:rate=5:duration=0.6", "-c:v", "libx264", "-preset",
                "ultrafast", "-pix_fmt", "yuv420p", "-x264-params", "log-level=none", rotated])
        # FFmpeg 5.1 (Debian 12) has no -display_rotation; its mov muxer writes the matrix from the
        # stream's "rotate" tag.
        ffmpeg(["-i", rotated, "-c", "copy", "-metadata:s:v:0", "rotate=90", "-fflags", "+bitexact",
                os.path.join(d, "rotated.mp4")])
    finally:
        shutil.rmtree(tmp)


def make_random(out, target, sizes, seed):
    rng = random.Random(seed)
    d = os.path.join(out, target)
    for i, size in enumerate(sizes):
        write(d, "random_%02d.bin" % i, bytes(rng.randrange(256) for _ in range(size)))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(ROOT, "test", "fuzz", "corpus"))
    args = parser.parse_args()
    make_safetensors(args.out)
    make_torch_save(args.out)
    make_config(args.out)
    make_latent_manifest(args.out)
    make_video_manifest(args.out)
    make_video_reader(args.out)
    make_random(args.out, "frame_choice", [0, 16, 64, 128, 512], 1)
    make_random(args.out, "frame_convert", [0, 8, 64, 600, 2048], 2)
    total = 0
    for folder, _, files in os.walk(args.out):
        for name in files:
            size = os.path.getsize(os.path.join(folder, name))
            total += size
            if size > 16384:
                print("make_fuzz_seeds: %s is %d bytes, keep seeds small" % (os.path.join(folder, name), size))
    print("make_fuzz_seeds: wrote %s (%d bytes in all)" % (args.out, total))


if __name__ == "__main__":
    main()
