#!/usr/bin/env python3
"""Captions -> HunyuanVideo text embeddings, as diffusers' HunyuanVideoPipeline.encode_prompt makes them.

Loads the two text encoders of a diffusers HunyuanVideo pipeline folder with transformers (diffusers
is not needed here):
  text_encoder + tokenizer     LLaVA-Llama-3: the caption in HunyuanVideo's prompt template,
                               tokenized to crop_start + 256 tokens (padded, truncated), the hidden
                               states 3 from the end (num_hidden_layers_to_skip = 2), then the first
                               crop_start (95) positions cut off the states and the mask.
  text_encoder_2 + tokenizer_2 CLIP-L: the caption tokenized to 77 tokens, pooler_output.
and writes one safetensors file per caption into the cache folder, as teletron reads them:
  text_states (256, D) in the encoder's dtype (bf16 on CUDA by default, fp32 with --dtype fp32),
  text_mask (256) uint8, pooled (P) in the encoder's dtype; metadata: the caption and the identity.

Resumable: a caption's file is named by content_key(identity, caption), a 128-bit FNV-1a hash
(the same as teletron's core/content_hash, so the C++ side finds the file from the caption), where
the identity hashes the encoders' configs, tokenizer files, weight file sizes and these settings.
Files are written to a temporary name and renamed, so a file that exists is complete; existing
ones are skipped. The empty caption's embedding is always written (data.caption_dropout uses it).
<cache>/encoder.json records the identity for teletron.

Usage: encode_text.py --pipeline DIR --out CACHE --captions LIST.json [--device auto|cuda|cpu]
                      [--dtype bf16|fp32] [--batch-size 8]
LIST.json is a JSON list of caption strings (teletron encode-text writes it from the manifest).
"""
import argparse
import json
import os
import sys
import time

TEMPLATE = (
    "<|start_header_id|>system<|end_header_id|>\n\nDescribe the video by detailing the following aspects: "
    "1. The main content and theme of the video."
    "2. The color, shape, size, texture, quantity, text, and spatial relationships of the objects."
    "3. Actions, events, behaviors temporal relationships, physical movement changes of the objects."
    "4. background environment, light, style and atmosphere."
    "5. camera angles, movements, and transitions used in the video:<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\n{}<|eot_id|>"
)
CROP_START = 95  # the template's tokens before the caption (diffusers' DEFAULT_PROMPT_TEMPLATE)
MAX_SEQUENCE_LENGTH = 256  # text tokens kept after the crop
LAYERS_TO_SKIP = 2  # hidden_states[-(2 + 1)]
CLIP_MAX_LENGTH = 77
FORMAT_VERSION = "teletron-encode-text-1"

# --- teletron's content hash (core/content_hash.cpp): 128-bit FNV-1a, strings length-prefixed ---
_FNV_OFFSET = 0x6C62272E07BB014262B821756295C58D
_FNV_PRIME = (1 << 88) | 0x13B
_MASK128 = (1 << 128) - 1


class ContentHash:
    def __init__(self):
        self.state = _FNV_OFFSET

    def _mix(self, data):
        state = self.state
        for byte in data:
            state = ((state ^ byte) * _FNV_PRIME) & _MASK128
        self.state = state

    def add_int(self, value):
        self._mix((value & ((1 << 64) - 1)).to_bytes(8, "little"))

    def add(self, data):
        if isinstance(data, str):
            data = data.encode("utf-8")
        self.add_int(len(data))
        self._mix(data)

    def hex(self):
        return f"{self.state:032x}"


def content_key(identity, caption):
    """The cache file's stem for `caption` under encoder `identity` (pipeline/text_cache.cpp agrees)."""
    h = ContentHash()
    h.add(identity)
    h.add(caption)
    return h.hex()


# --- the encoders ---------------------------------------------------------------------------------

def encoder_identity(pipeline, dtype_name):
    """What the embeddings depend on: small files' bytes (configs, tokenizer files), the weight files'
    names and sizes, and the settings. The hash of its JSON is the identity."""
    description = {"format": FORMAT_VERSION, "template": TEMPLATE, "crop_start": CROP_START,
                   "max_sequence_length": MAX_SEQUENCE_LENGTH, "layers_to_skip": LAYERS_TO_SKIP,
                   "clip_max_length": CLIP_MAX_LENGTH, "dtype": dtype_name, "files": {}}
    for sub in ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"):
        folder = os.path.join(pipeline, sub)
        for name in sorted(os.listdir(folder)):
            path = os.path.join(folder, name)
            if not os.path.isfile(path):
                continue
            size = os.path.getsize(path)
            if size <= (16 << 20) and not name.endswith((".safetensors", ".bin", ".pt", ".pth")):
                h = ContentHash()
                with open(path, "rb") as f:
                    h.add(f.read())
                description["files"][f"{sub}/{name}"] = h.hex()
            else:
                description["files"][f"{sub}/{name}"] = f"size {size}"
    h = ContentHash()
    h.add(json.dumps(description, sort_keys=True))
    return h.hex(), description


def _component_class(transformers, pipeline, name, fallback):
    """The transformers class model_index.json names for a component (as diffusers loads it)."""
    index = os.path.join(pipeline, "model_index.json")
    if os.path.isfile(index):
        with open(index) as f:
            entry = json.load(f).get(name)
        if isinstance(entry, list) and len(entry) == 2 and entry[0] == "transformers" and hasattr(transformers, entry[1]):
            return getattr(transformers, entry[1])
    return getattr(transformers, fallback)


def _load_model(cls, folder, dtype, device):
    try:
        model = cls.from_pretrained(folder, dtype=dtype)
    except TypeError:  # transformers < 4.56 spells it torch_dtype
        model = cls.from_pretrained(folder, torch_dtype=dtype)
    return model.to(device).eval().requires_grad_(False)


class HunyuanTextEncoders:
    """The two encoders and tokenizers of a pipeline folder; encode() is encode_prompt's math."""

    def __init__(self, pipeline, device, dtype):
        import transformers
        for sub in ("text_encoder", "tokenizer", "text_encoder_2", "tokenizer_2"):
            if not os.path.isdir(os.path.join(pipeline, sub)):
                raise FileNotFoundError(f"{pipeline}: no {sub}/ folder (expected a diffusers HunyuanVideo pipeline "
                                        "folder with text_encoder, tokenizer, text_encoder_2 and tokenizer_2)")
        self.device = device
        self.tokenizer = _component_class(transformers, pipeline, "tokenizer", "AutoTokenizer").from_pretrained(
            os.path.join(pipeline, "tokenizer"))
        self.tokenizer_2 = _component_class(transformers, pipeline, "tokenizer_2", "AutoTokenizer").from_pretrained(
            os.path.join(pipeline, "tokenizer_2"))
        self.text_encoder = _load_model(_component_class(transformers, pipeline, "text_encoder", "AutoModel"),
                                        os.path.join(pipeline, "text_encoder"), dtype, device)
        self.text_encoder_2 = _load_model(_component_class(transformers, pipeline, "text_encoder_2", "CLIPTextModel"),
                                          os.path.join(pipeline, "text_encoder_2"), dtype, device)

    def encode(self, captions):
        """captions: list of str -> text_states (B, 256, D), text_mask (B, 256) int64, pooled (B, P),
        states and pooled in the encoders' dtype, as encode_prompt returns them."""
        import torch
        with torch.no_grad():
            inputs = self.tokenizer([TEMPLATE.format(c) for c in captions], max_length=MAX_SEQUENCE_LENGTH + CROP_START,
                                    padding="max_length", truncation=True, return_tensors="pt",
                                    return_length=False, return_overflowing_tokens=False, return_attention_mask=True)
            ids = inputs.input_ids.to(self.device)  # (B, 351)
            mask = inputs.attention_mask.to(self.device)  # (B, 351) int64
            hidden = self.text_encoder(input_ids=ids, attention_mask=mask,
                                       output_hidden_states=True).hidden_states[-(LAYERS_TO_SKIP + 1)]
            states = hidden.to(self.text_encoder.dtype)[:, CROP_START:]  # (B, 256, D)
            mask = mask[:, CROP_START:]  # (B, 256)
            clip_ids = self.tokenizer_2(captions, padding="max_length", max_length=CLIP_MAX_LENGTH, truncation=True,
                                        return_tensors="pt").input_ids  # (B, 77)
            pooled = self.text_encoder_2(clip_ids.to(self.device), output_hidden_states=False).pooler_output  # (B, P)
        return states, mask, pooled


# --- the cache --------------------------------------------------------------------------------------

def _is_complete(path):
    """A file written by this script (renamed into place only once complete) whose header parses."""
    try:
        with open(path, "rb") as f:
            size = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(size))
        return all(name in header for name in ("text_states", "text_mask", "pooled"))
    except (OSError, ValueError):
        return False


def _save(path, states, mask, pooled, caption, identity):
    from safetensors.torch import save_file
    temp = f"{path}.tmp{os.getpid()}"
    save_file({"text_states": states.contiguous().cpu(),  # (256, D)
               "text_mask": mask.to(dtype=__import__("torch").uint8).contiguous().cpu(),  # (256)
               "pooled": pooled.contiguous().cpu()},  # (P)
              temp, metadata={"caption": caption, "identity": identity, "format": FORMAT_VERSION})
    os.replace(temp, path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--pipeline", required=True, help="diffusers HunyuanVideo pipeline folder")
    parser.add_argument("--out", required=True, help="cache folder (data.text_cache)")
    parser.add_argument("--captions", required=True, help="JSON list of caption strings")
    parser.add_argument("--device", default="auto", help="auto (cuda when available), cuda, cuda:N or cpu")
    parser.add_argument("--dtype", default="auto", choices=["auto", "bf16", "fp32"],
                        help="auto: bf16 on CUDA, fp32 on the CPU")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()
    try:
        import torch
        import transformers  # noqa: F401
        import safetensors  # noqa: F401
    except ImportError as error:
        sys.exit(f"encode_text.py: {error}: install them with `python3 -m pip install torch transformers safetensors`")
    if args.batch_size < 1:
        sys.exit("encode_text.py: --batch-size must be >= 1")
    device = args.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device.startswith("cuda") and not torch.cuda.is_available():
        sys.exit(f"encode_text.py: --device {device}, but torch sees no CUDA device")
    dtype_name = args.dtype if args.dtype != "auto" else ("bf16" if device.startswith("cuda") else "fp32")
    dtype = torch.bfloat16 if dtype_name == "bf16" else torch.float32
    if not os.path.isdir(args.pipeline):
        sys.exit(f"encode_text.py: --pipeline {args.pipeline}: no such folder")
    with open(args.captions, encoding="utf-8") as f:
        captions = json.load(f)
    if not isinstance(captions, list) or not all(isinstance(c, str) for c in captions):
        sys.exit(f"encode_text.py: {args.captions}: expected a JSON list of strings")

    identity, description = encoder_identity(args.pipeline, dtype_name)
    os.makedirs(args.out, exist_ok=True)
    unique = list(dict.fromkeys([""] + captions))  # the empty prompt first, each caption once
    todo = [c for c in unique if not _is_complete(os.path.join(args.out, content_key(identity, c) + ".safetensors"))]
    print(f"encode-text: {len(unique)} distinct captions (the empty one included), {len(unique) - len(todo)} already "
          f"in {args.out}, {len(todo)} to encode on {device} in {dtype_name}", flush=True)
    text_dim = pooled_dim = None
    if todo:
        start = time.monotonic()
        encoders = HunyuanTextEncoders(args.pipeline, device, dtype)
        print(f"encode-text: encoders loaded in {time.monotonic() - start:.1f} s", flush=True)
        start = time.monotonic()
        last_print = 0.0
        for first in range(0, len(todo), args.batch_size):
            batch = todo[first:first + args.batch_size]
            states, mask, pooled = encoders.encode(batch)
            text_dim, pooled_dim = states.shape[-1], pooled.shape[-1]
            for i, caption in enumerate(batch):
                _save(os.path.join(args.out, content_key(identity, caption) + ".safetensors"), states[i], mask[i],
                      pooled[i], caption, identity)
            done = first + len(batch)
            elapsed = time.monotonic() - start
            if elapsed - last_print >= 5.0 or done == len(todo):
                last_print = elapsed
                rate = done / max(elapsed, 1e-9)
                print(f"encode-text: {done}/{len(todo)} captions, {rate:.1f} captions/s, "
                      f"ETA {(len(todo) - done) / rate:.0f} s", flush=True)
    record = {"identity": identity, "format": FORMAT_VERSION,
              "empty": content_key(identity, "") + ".safetensors", "text_length": MAX_SEQUENCE_LENGTH,
              "dtype": dtype_name, "pipeline": os.path.abspath(args.pipeline), "description": description}
    if text_dim is not None:
        record.update(text_dim=int(text_dim), pooled_dim=int(pooled_dim))
    temp = os.path.join(args.out, f"encoder.json.tmp{os.getpid()}")
    with open(temp, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, sort_keys=True)
    os.replace(temp, os.path.join(args.out, "encoder.json"))
    print(f"encode-text: done; {args.out}/encoder.json names encoder {identity}", flush=True)


if __name__ == "__main__":
    main()
