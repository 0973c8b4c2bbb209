#!/usr/bin/env python3
"""The fine-tune workflow of README.md's walkthrough, end to end on the CPU at a tiny scale: captioned
clips -> `teletron validate-data` -> `teletron encode-text` (tiny random Llama + CLIP encoders built
here, as test_encode_text.py builds them) -> `teletron train` with LoRA, caption dropout, an EMA and
validation videos from `validation.prompt` -> `teletron sample` with the LoRA -> `teletron export`.

Checks along the way: every command succeeds and says what the walkthrough shows; encode-text
writes one file per distinct caption (a row's "caption" key and a <stem>.txt beside a clip) plus
the empty caption and the prompts; the run holds LoRA checkpoints, validation MP4s and TensorBoard
events; caption dropout with a resume: 4 steps straight equal 2 steps + resume + 2 (adapters, EMA
and optimizer state bit for bit); sample writes an MP4; export writes pytorch_lora_weights.

Usage: test_finetune_walkthrough.py --teletron BUILD/teletron [--transcript FILE] [--keep DIR]
Exit 4 (ctest: skipped) when torch, transformers, tokenizers or diffusers, or the ffmpeg CLI, are
missing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

SKIP = 4
HERE = os.path.dirname(os.path.abspath(__file__))

try:
    import torch  # noqa: F401
    import transformers  # noqa: F401
    import tokenizers  # noqa: F401
    import diffusers  # noqa: F401
    from safetensors.torch import load_file
except ImportError as error:
    print(f"SKIP: {error} (python3 -m pip install torch transformers tokenizers safetensors diffusers)")
    sys.exit(SKIP)
if shutil.which("ffmpeg") is None:
    print("SKIP: the ffmpeg CLI makes the clips (apt install ffmpeg)")
    sys.exit(SKIP)

sys.path.insert(0, HERE)
from test_encode_text import build_pipeline_folder  # noqa: E402

CAPTIONS = {"a": "A red square slides to the right over a grey floor.",
            "b": "Colour bars scroll slowly upwards.",
            "c": "A test pattern with a moving clock hand."}
PROMPT = "A red square slides to the left."


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)


class Session:
    """Runs teletron commands in one folder and keeps a transcript of what each printed."""

    def __init__(self, teletron, folder):
        self.teletron = os.path.abspath(teletron)
        self.folder = folder
        self.transcript = []

    def run(self, args, expect=0):
        shown = "teletron " + " ".join(a if " " not in a else json.dumps(a) for a in args)
        done = subprocess.run([self.teletron] + args, cwd=self.folder, capture_output=True, text=True,
                              env=dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "2")))
        output = done.stdout + done.stderr
        self.transcript.append((shown, output))
        if done.returncode != expect:
            print(output[-6000:])
            check(False, f"`{shown}` exited {done.returncode}, expected {expect}")
        return output


def make_clips(folder):
    """Three 17-frame 96x64 H.264/MPEG-4 clips of FFmpeg's test sources, captions two ways."""
    sources = {"a": "testsrc2=size=96x64:rate=24", "b": "smptebars=size=96x64:rate=24",
               "c": "testsrc=size=96x64:rate=24"}
    os.makedirs(os.path.join(folder, "clips"))
    rows = []
    for name, source in sources.items():
        path = os.path.join(folder, "clips", name + ".mp4")
        subprocess.run(["ffmpeg", "-v", "error", "-f", "lavfi", "-i", source, "-frames:v", "17", "-pix_fmt",
                        "yuv420p", path], check=True)
        if name == "c":  # the caption beside the clip
            with open(os.path.join(folder, "clips", "c.txt"), "w") as f:
                f.write(CAPTIONS["c"] + "\n")
            rows.append({"video": "clips/c.mp4"})
        else:
            rows.append({"video": f"clips/{name}.mp4", "caption": CAPTIONS[name]})
    with open(os.path.join(folder, "manifest.jsonl"), "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")


CONFIG = """tele_tron:
  model:
    preset: tiny
    num_attention_heads: 2
    attention_head_dim: 16
    rope_axes_dim: [4, 6, 6]
    num_layers: 1
    num_single_layers: 1
    text_embed_dim: 32            # the tiny Llama's hidden size (4096 for the released encoders)
    pooled_projection_dim: 24     # the tiny CLIP's (768 released)
    weights: base/checkpoints/step_0000020/model.safetensors
    lora: {rank: 4, alpha: 4}
  vae: {preset: tiny}
  text_encoder: {pipeline: text_pipeline}
  data:
    source: video
    manifest: manifest.jsonl
    buckets: [{frames: 5, height: 64, width: 64}]
    caption_dropout: 0.3
  batch_size: 2
  optimizer: {lr: 1.0e-2, warmup_steps: 0, weight_decay: 0.0}
  flow_matching: {shift: 1.0}
  train: {device: cpu, max_steps: 4, log_every: 1, checkpoint_every: 2, seed: 7, ema_decay: 0.9}
  validation: {every: 2, prompt: "%s", steps: 2, frames: 5, height: 32, width: 32}
""" % PROMPT
# The base model's run: the same without LoRA, its weights, an EMA or validation.
BASE_CONFIG = "\n".join(line for line in CONFIG.splitlines()
                        if not line.strip().startswith(("weights:", "lora:", "validation:"))).replace(
    ", ema_decay: 0.9", "") + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--teletron", required=True)
    parser.add_argument("--transcript", help="write each command and what it printed here (markdown)")
    parser.add_argument("--keep", help="work in this folder and keep it")
    args = parser.parse_args()
    transformers.logging.set_verbosity_error()
    with tempfile.TemporaryDirectory() as temp:
        folder = args.keep or temp
        os.makedirs(folder, exist_ok=True)
        build_pipeline_folder(os.path.join(folder, "text_pipeline"))
        make_clips(folder)
        with open(os.path.join(folder, "finetune.yaml"), "w") as f:
            f.write(CONFIG)
        with open(os.path.join(folder, "base.yaml"), "w") as f:
            f.write(BASE_CONFIG)
        t = Session(args.teletron, folder)
        out = t.run(["validate-data", "finetune.yaml"])
        check("checked 3: 3 ok, 0 with errors" in out, "validate-data: the clips are not all fine")
        check("3 sample(s) have a caption whose embedding is not in the text cache" in out,
              "validate-data: the captions to encode are not listed")
        out = t.run(["encode-text", "finetune.yaml", "--device", "cpu", "--prompt", PROMPT])
        check("3 rows" in out and "3 distinct captions" in out, "encode-text: no summary of the manifest")
        check(f'prompt "{PROMPT}" ->' in out, "encode-text: the prompt's file is not printed")
        prompt_file = out.split(f'prompt "{PROMPT}" -> ')[1].split("\n")[0].strip()
        cache = os.path.join(folder, "text_cache")
        files = [n for n in os.listdir(cache) if n.endswith(".safetensors")]
        check(len(files) == 5, f"text cache: {len(files)} files, expected 3 captions + the prompt + the empty one")
        saved = load_file(os.path.join(folder, prompt_file))
        check(saved["text_states"].shape[1] == 32 and saved["pooled"].shape == (24,), "prompt file shapes")
        out = t.run(["validate-data", "finetune.yaml"])
        check("not in the text cache" not in out, "validate-data after encode-text still lists captions")
        t.transcript.pop()

        # The walkthrough's base model: with no released weights here, 20 steps of full training of
        # the tiny model on the same clips (its zero-initialised output layer would give LoRA no
        # gradient). Not part of the transcript.
        t.run(["train", "base.yaml", "--output", "base", "--max-steps", "20", "--set", "train.checkpoint_every=20"])
        t.transcript.pop()

        out = t.run(["train", "finetune.yaml", "--output", "runs/lora"])
        check("LoRA: rank 4" in out and "EMA: decay 0.9" in out, "train: no LoRA / EMA line")
        check("validation: step 4" in out, "train: no validation video at step 4")
        for step in (2, 4):
            check(os.path.exists(os.path.join(folder, f"runs/lora/samples/step_00000{step}.mp4")),
                  f"no validation video at step {step}")
        check(any(n.startswith("events.out.tfevents") for n in os.listdir(os.path.join(folder, "runs/lora"))),
              "no TensorBoard event file")
        lora = os.path.join(folder, "runs/lora/checkpoints/step_0000004/lora.safetensors")
        check(os.path.exists(lora), "no LoRA checkpoint at step 4")

        out = t.run(["sample", "finetune.yaml", "--weights", "base/checkpoints/step_0000020/model.safetensors",
                     "--lora", "runs/lora/checkpoints/step_0000004/lora.safetensors", "--text-embeddings",
                     prompt_file, "--frames", "5", "--height", "32", "--width", "32", "--steps", "3", "--seed", "1",
                     "--output", "sample.mp4"])
        check(os.path.getsize(os.path.join(folder, "sample.mp4")) > 0, "sample: no MP4")

        out = t.run(["export", "runs/lora", "--output", "export/lora"])
        check(os.path.exists(os.path.join(folder, "export/lora/pytorch_lora_weights.safetensors")), "export: no file")
        out = t.run(["export", "runs/lora", "--output", "export/lora_ema", "--ema"])
        out = t.run(["export", "runs/lora", "--output", "export/merged", "--merge-lora"])
        check(os.path.exists(os.path.join(folder, "export/merged/config.json")), "export --merge-lora: no config")
        transcript = list(t.transcript)

        # Caption dropout (0.3: some samples train on the empty caption) with a resume: 2 steps, then
        # on to 4, equal the straight run bit for bit (adapters, their EMA, the optimizer state).
        t.run(["train", "finetune.yaml", "--output", "runs/split", "--max-steps", "2", "--set", "validation.every=0"])
        t.run(["train", "finetune.yaml", "--output", "runs/split", "--resume", "auto", "--set", "validation.every=0"])
        straight = os.path.join(folder, "runs/lora/checkpoints/step_0000004")
        split = os.path.join(folder, "runs/split/checkpoints/step_0000004")
        for name in ("lora.safetensors", "state.safetensors"):
            left, right = load_file(os.path.join(straight, name)), load_file(os.path.join(split, name))
            check(left.keys() == right.keys(), f"{name}: other tensors after the resume")
            for key in left:
                check(torch.equal(left[key], right[key]), f"{name}: {key} differs after the resume")
        check(any(k.startswith("ema.") for k in load_file(os.path.join(straight, "state.safetensors"))),
              "no EMA in the state")

        if args.transcript:
            with open(args.transcript, "w") as f:
                for shown, output in transcript:
                    f.write(f"$ {shown}\n{output}\n")
    print("PASS: validate-data -> encode-text -> train (LoRA, caption dropout, EMA, validation) -> sample -> export;"
          " a resume with caption dropout is exact")


if __name__ == "__main__":
    main()
