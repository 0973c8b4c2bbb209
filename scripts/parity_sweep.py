#!/usr/bin/env python3
"""Forward parity with diffusers over randomly drawn architectures and inputs (shapes nobody picked).

  parity_sweep.py --teletron build/teletron [--configs 12] [--seed 0] [--tolerance 1e-4] [--train]
                  [--device cpu|cuda] [--dtype fp32|bf16] [--work DIR]

Each draw: a HunyuanVideoTransformer3DModel with random sizes (heads, head width and its RoPE split,
double / single / refiner block counts, MLP ratio, patch sizes, channels, text and pooled widths,
guidance embedding on or off, now and then image-to-video's latent_concat) and random weights (every parameter, the zero-initialised ones too),
saved with save_pretrained; random latents of a random (frames, height, width) in patch units, a
batch of 1-3 with random timesteps, guidance values and right-padded captions of random valid
lengths (one sample may have every token valid). diffusers' forward and `teletron model-check
--weights DIR` run on the same inputs (fp32, CPU); the outputs must agree within --tolerance of the
largest output magnitude. One line per draw with its architecture; exit status 1 if any draw
differs, 4 when torch or diffusers is missing (ctest counts it as skipped).

--train: each text-to-video draw (input and output channels made equal) then trains a few steps with
teletron from that folder (`model.weights`) on synthetic latents of a random bucket, with a random
LoRA (rank, alpha, init, targets; now and then rank 0, the whole model), model.fused_kernels and
activation checkpointing (false, true or every_n 2) drawn too, exports the result (fp32; the LoRA
file and the merged model), and scripts/check_export_diffusers.py loads the exports with diffusers
(from_pretrained, load_lora_adapter) and compares its forward with teletron's, at a tenth of
--tolerance: that check also wants the adapters' effect on the output above ten times its tolerance
(a LoRA that loaded nowhere must not pass), and two steps on a single target move the output little.

Needs torch, diffusers and safetensors (pip).
"""
import argparse
import os
import random
import shutil
import subprocess
import sys
import tempfile

try:
    import torch
    from diffusers import HunyuanVideoTransformer3DModel
    from safetensors.torch import load_file, save_file
except ImportError as error:  # no Python stack here: skipped, not failed
    print(f"parity_sweep: skipped ({error})")
    sys.exit(4)


def draw_config(rng):
    heads = rng.choice([1, 2, 3, 4])
    # RoPE splits the head width into (t, h, w) parts, each even (complex pairs).
    parts = [2 * rng.randint(1, 6) for _ in range(3)]
    head_dim = sum(parts)
    doubles = rng.randint(0, 2)
    singles = rng.randint(0 if doubles else 1, 2)  # at least one block (teletron rejects none, clearly)
    out_channels = rng.choice([4, 8, 16])
    # Image-to-video's latent_concat takes the noisy latent, the first frame's latent and a mask.
    image = rng.random() < 0.2
    return dict(
        in_channels=2 * out_channels + 1 if image else rng.choice([4, 8, 16]), out_channels=out_channels,
        image_condition_type="latent_concat" if image else None, num_attention_heads=heads,
        attention_head_dim=head_dim, num_layers=doubles, num_single_layers=singles,
        num_refiner_layers=rng.randint(1, 2), mlp_ratio=rng.choice([1.0, 2.0, 4.0, 3.5]),
        patch_size=rng.choice([1, 2]), patch_size_t=rng.choice([1, 2]), qk_norm="rms_norm",
        guidance_embeds=rng.random() < 0.7, text_embed_dim=rng.choice([16, 24, 40]),
        pooled_projection_dim=rng.choice([8, 12, 32]), rope_theta=rng.choice([256.0, 10000.0]),
        rope_axes_dim=tuple(parts))


def draw_inputs(rng, config, generator):
    pt, p = config["patch_size_t"], config["patch_size"]
    batch = rng.randint(1, 3)
    frames, height, width = pt * rng.randint(1, 3), p * rng.randint(1, 5), p * rng.randint(1, 5)
    length = rng.randint(2, 12)
    mask = torch.zeros(batch, length, dtype=torch.int64)
    for b in range(batch):  # right padding, as the text encoders' outputs; sample 0 every token valid
        mask[b, :length if b == 0 else rng.randint(1, length)] = 1
    inputs = {
        "hidden_states": torch.randn(batch, config["in_channels"], frames, height, width, generator=generator),
        "timestep": torch.tensor([float(rng.randint(0, 999)) for _ in range(batch)]),
        "encoder_hidden_states": torch.randn(batch, length, config["text_embed_dim"], generator=generator),
        "encoder_attention_mask": mask,
        "pooled_projections": torch.randn(batch, config["pooled_projection_dim"], generator=generator),
    }
    if config["guidance_embeds"]:
        inputs["guidance"] = torch.tensor([float(rng.randint(1000, 8000)) for _ in range(batch)])
    return inputs


def describe(config, inputs):
    c = config
    x = inputs["hidden_states"]
    return (f"heads {c['num_attention_heads']}x{c['attention_head_dim']} rope {list(c['rope_axes_dim'])} "
            f"blocks {c['num_layers']}+{c['num_single_layers']} refiner {c['num_refiner_layers']} "
            f"mlp {c['mlp_ratio']} patch {c['patch_size_t']}x{c['patch_size']} ch {c['in_channels']}->"
            f"{c['out_channels']} text {c['text_embed_dim']} pooled {c['pooled_projection_dim']} "
            f"guidance {'on' if c['guidance_embeds'] else 'off'}"
            f"{' latent_concat' if c['image_condition_type'] else ''}; latents {list(x.shape)} "
            f"text {list(inputs['encoder_attention_mask'].sum(1).tolist())}/{inputs['encoder_attention_mask'].shape[1]}")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teletron", required=True)
    parser.add_argument("--configs", type=int, default=12)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"],
                        help="where teletron's forward runs (diffusers' stays fp32 on the CPU)")
    parser.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"],
                        help="teletron's precision: bf16 autocast needs CUDA and a looser --tolerance (e.g. 3e-2)")
    parser.add_argument("--train", action="store_true", help="also train, export and load the export in diffusers")
    parser.add_argument("--work")
    args = parser.parse_args()
    return run_in_work(args, sweep, "tt_parity_sweep_")


def run_in_work(args, sweep, prefix):
    """sweep(args, folder) in --work, or in a temporary folder removed afterwards; a few threads
    unless ctest (OMP_NUM_THREADS) decides."""
    if "OMP_NUM_THREADS" not in os.environ:
        torch.set_num_threads(min(4, os.cpu_count() or 1))
    if args.work:
        return sweep(args, args.work)
    with tempfile.TemporaryDirectory(prefix=prefix) as work:
        return sweep(args, work)


def summary(name, checks, failures, args):
    """The last line, and the exit status: 1 if any check failed."""
    print(f"{name}: {checks - failures}/{checks} checks over {args.configs} draws agree with diffusers "
          f"(tolerance {args.tolerance:g}, seed {args.seed})")
    return 1 if failures else 0


def run_teletron(teletron, *command):
    return subprocess.run([teletron, *command], capture_output=True, text=True)


def train_and_export(args, rng, config, folder, work):
    """Trains from `folder` with drawn settings, exports and checks the export in diffusers. Returns
    (ok, what was drawn, the failure's text)."""
    pt = config["patch_size_t"]
    latent_frames = pt * rng.randint(1, 2)
    frames, height, width = 4 * (latent_frames - 1) + 1, 16 * rng.randint(1, 3), 16 * rng.randint(1, 3)
    rank = 0 if rng.random() < 0.2 else rng.randint(1, 6)
    # Named targets from the block kinds the draw has (one naming only a missing kind is an error).
    named = ["to_q", "to_v"] + (["ff.net.2", "to_out.0", "norm1.linear"] if config["num_layers"] else []) + \
        (["proj_out", "norm.linear"] if config["num_single_layers"] else [])
    targets = [] if rng.random() < 0.5 else rng.sample(named, rng.randint(1, 3))
    checkpointing = rng.choice(["false", "true", "{every_n: 2}"])
    fused = rng.choice(["false", "true"])
    batch = rng.randint(1, 2)
    lora = (f"lora: {{rank: {rank}, alpha: {rng.choice([0, 1, 7.5])}, init: {rng.choice(['kaiming', 'gaussian'])}, "
            f"targets: {targets}}}, ") if rank else ""
    drawn = (f"trained: bucket {frames}x{height}x{width} batch {batch} "
             f"{'LoRA rank ' + str(rank) + ' targets ' + str(targets or 'default') if rank else 'whole model'} "
             f"fused_kernels {fused} checkpointing {checkpointing}")
    run_dir, data = os.path.join(work, "run"), os.path.join(work, "data")
    path = os.path.join(work, "config.yaml")
    with open(path, "w") as f:
        f.write("tele_tron:\n"
                f"  model: {{weights: {folder}, out_channels: {config['out_channels']}, "
                f"text_embed_dim: {config['text_embed_dim']}, pooled_projection_dim: {config['pooled_projection_dim']}, "
                f"{lora}fused_kernels: {fused}, activation_checkpointing: {checkpointing}}}\n"
                f"  data: {{manifest: {data}/manifest.jsonl, buckets: [{{frames: {frames}, height: {height}, "
                f"width: {width}}}]}}\n"
                f"  batch_size: {batch}\n"
                "  optimizer: {lr: 0.01, warmup_steps: 0}\n"
                "  train: {max_steps: 2, log_every: 1, checkpoint_every: 2}\n")
    steps = [("synth-data", path, "--output", data, "--samples", "3", "--text-length", str(rng.randint(3, 9))),
             ("train", path, "--output", run_dir, "--device", "cpu")]
    exports = [os.path.join(work, "export")]
    steps.append(("export", run_dir, "--output", exports[0], "--dtype", "fp32"))
    if rank:
        exports.append(os.path.join(work, "merged"))
        steps.append(("export", run_dir, "--output", exports[1], "--dtype", "fp32", "--merge-lora"))
    for step in steps:
        result = run_teletron(args.teletron, *step)
        if result.returncode != 0:
            return False, drawn, f"teletron {step[0]} exit {result.returncode}: {result.stderr.strip()[-400:]}"
    check = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "check_export_diffusers.py"),
             "--teletron", args.teletron, "--tolerance", str(args.tolerance / 10)]
    check += ["--model", exports[1], "--base", folder, "--lora", exports[0]] if rank else ["--model", exports[0]]
    result = subprocess.run(check, capture_output=True, text=True)
    text = " ".join(result.stdout.split())
    return result.returncode == 0, drawn, text


def sweep(args, work):
    if args.device == "cuda" and not torch.cuda.is_available():
        print("parity_sweep: skipped (--device cuda, and this machine has no CUDA device)")
        return 4
    failures, checks = 0, 0
    for index in range(args.configs):
        rng = random.Random(args.seed * 100003 + index)
        generator = torch.Generator().manual_seed(args.seed * 100003 + index)
        config = draw_config(rng)
        if args.train:  # text-to-video, trained on its own output's channels
            config.update(in_channels=config["out_channels"], image_condition_type=None)
        torch.manual_seed(args.seed * 100003 + index)
        model = HunyuanVideoTransformer3DModel(**config).eval()
        with torch.no_grad():  # every weight random (diffusers zero-initialises some)
            for parameter in model.parameters():
                parameter.copy_(torch.randn(parameter.shape, generator=generator) * 0.2)
        folder = os.path.join(work, f"model_{index}")
        model.save_pretrained(folder)
        inputs = draw_inputs(rng, config, generator)
        inputs_path = os.path.join(work, f"inputs_{index}.safetensors")
        output_path = os.path.join(work, f"teletron_{index}.safetensors")
        save_file({k: v.contiguous() for k, v in inputs.items()}, inputs_path)
        with torch.no_grad():
            expected = model(**inputs, return_dict=False)[0]
        run = subprocess.run([args.teletron, "model-check", "--weights", folder, "--inputs", inputs_path,
                              "--output", output_path, "--device", args.device, "--dtype", args.dtype],
                             capture_output=True, text=True)
        line = describe(config, inputs)
        checks += 1
        if run.returncode != 0:
            failures += 1
            print(f"FAIL draw {index}: teletron exit {run.returncode}: {run.stderr.strip()[-400:]}\n  {line}")
            continue
        got = load_file(output_path)["sample"]
        if got.shape != expected.shape:
            failures += 1
            print(f"FAIL draw {index}: shape {list(got.shape)} against diffusers' {list(expected.shape)}\n  {line}")
            continue
        relative = ((got - expected).abs().max() / expected.abs().max().clamp_min(1e-12)).item()
        ok = relative <= args.tolerance
        failures += 0 if ok else 1
        print(f"{'ok  ' if ok else 'FAIL'} draw {index}: max|diff|/max {relative:.2e}  {line}")
        if args.train and ok:
            shutil.rmtree(os.path.join(work, "train"), ignore_errors=True)
            os.makedirs(os.path.join(work, "train"))
            ok, drawn, text = train_and_export(args, rng, config, folder, os.path.join(work, "train"))
            checks += 1
            failures += 0 if ok else 1
            print(f"{'ok  ' if ok else 'FAIL'} draw {index} {drawn}: {text}")
    return summary("parity_sweep", checks, failures, args)


if __name__ == "__main__":
    sys.exit(main())
