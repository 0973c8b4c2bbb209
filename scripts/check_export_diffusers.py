#!/usr/bin/env python3
"""Loads teletron's exports with diffusers itself and compares diffusers' forward with teletron's.

  check_export_diffusers.py --teletron build/teletron --model DIR
      DIR: `teletron export RUN --output DIR --dtype fp32` (a full-model checkpoint). diffusers'
      HunyuanVideoTransformer3DModel.from_pretrained(DIR) runs one forward on random inputs; the same
      inputs go through `teletron model-check --weights DIR`; the outputs must agree.
  check_export_diffusers.py --teletron build/teletron --model MERGED --base BASE --lora LORA_DIR
      MERGED: `teletron export LORA_RUN --merge-lora --dtype fp32`; BASE: the run's model.weights as a
      diffusers folder; LORA_DIR: `teletron export LORA_RUN --dtype fp32` (pytorch_lora_weights.safetensors).
      diffusers loads BASE, then the LoRA file through load_lora_adapter (peft), and its forward must
      equal teletron's forward of the merged export.

Needs torch, diffusers, peft and safetensors (pip). Exit status 1 when an output differs by more than
--tolerance (relative to the largest output magnitude), 2 for usage errors. Prints one line per check.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
from safetensors.torch import load_file, save_file


def random_inputs(config, seed):
    g = torch.Generator().manual_seed(seed)
    pt, p = config.get("patch_size_t", 1), config.get("patch_size", 2)
    frames, height, width, length = 2 * pt, 4 * p, 6 * p, 7
    inputs = {
        "hidden_states": torch.randn(2, config["in_channels"], frames, height, width, generator=g),
        "timestep": torch.tensor([250.0, 900.0]),
        "encoder_hidden_states": torch.randn(2, length, config["text_embed_dim"], generator=g),
        "encoder_attention_mask": torch.ones(2, length, dtype=torch.int64),
        "pooled_projections": torch.randn(2, config["pooled_projection_dim"], generator=g),
        "guidance": torch.tensor([6000.0, 1000.0]),
    }
    inputs["encoder_attention_mask"][0, length // 2:] = 0  # right padding in sample 0
    return inputs


def teletron_forward(teletron, weights, inputs, folder):
    inputs_path = os.path.join(folder, "inputs.safetensors")
    output_path = os.path.join(folder, "output.safetensors")
    save_file({k: v.contiguous() for k, v in inputs.items()}, inputs_path)
    run = subprocess.run([teletron, "model-check", "--weights", weights, "--inputs", inputs_path, "--output",
                          output_path], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit(f"teletron model-check failed ({run.returncode}):\n{run.stdout}{run.stderr}")
    return load_file(output_path)["sample"]


def diffusers_forward(model, inputs):
    with torch.no_grad():
        return model(hidden_states=inputs["hidden_states"], timestep=inputs["timestep"],
                     encoder_hidden_states=inputs["encoder_hidden_states"],
                     encoder_attention_mask=inputs["encoder_attention_mask"],
                     pooled_projections=inputs["pooled_projections"], guidance=inputs["guidance"],
                     return_dict=False)[0]


def compare(name, got, want, tolerance):
    scale = want.abs().max().item()
    error = (got - want).abs().max().item() / max(scale, 1e-12)
    ok = error <= tolerance
    print(f"{name}: max |diffusers - teletron| / max |teletron| = {error:.3e} ({'ok' if ok else 'FAILED'}, "
          f"tolerance {tolerance:g}; output scale {scale:.3g})")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teletron", required=True)
    parser.add_argument("--model", required=True, help="teletron export folder (full model, or --merge-lora)")
    parser.add_argument("--base", help="the LoRA run's base as a diffusers folder")
    parser.add_argument("--lora", help="teletron export folder of a LoRA checkpoint")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    if (args.base is None) != (args.lora is None):
        parser.error("--base and --lora go together")

    from diffusers import HunyuanVideoTransformer3DModel

    with open(os.path.join(args.model, "config.json")) as f:
        config = json.load(f)
    inputs = random_inputs(config, args.seed)
    with tempfile.TemporaryDirectory() as folder:
        want = teletron_forward(args.teletron, args.model, inputs, folder)
    if args.lora is None:
        model = HunyuanVideoTransformer3DModel.from_pretrained(args.model, torch_dtype=torch.float32).eval()
        ok = compare("from_pretrained(export)", diffusers_forward(model, inputs), want, args.tolerance)
    else:
        model = HunyuanVideoTransformer3DModel.from_pretrained(args.base, torch_dtype=torch.float32).eval()
        base_output = diffusers_forward(model, inputs)
        model.load_lora_adapter(os.path.join(args.lora, "pytorch_lora_weights.safetensors"), prefix="transformer")
        ok = compare("from_pretrained(base) + load_lora_adapter(export)", diffusers_forward(model, inputs), want,
                     args.tolerance)
        # The adapters must matter here, or the comparison above would pass for a LoRA that loaded nowhere.
        effect = (want - base_output).abs().max().item() / max(want.abs().max().item(), 1e-12)
        print(f"the LoRA's effect on the output: {effect:.3e} of its scale (must exceed 10x the tolerance)")
        ok = ok and effect > 10 * args.tolerance
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
