#!/usr/bin/env python3
"""Parity of scripts/encode_text.py with diffusers' HunyuanVideoPipeline.encode_prompt, on tiny random
Llama and CLIP text encoders and tokenizers built here (no downloads), in fp32 (<= 1e-5); plus the
cache's behaviour (one file per distinct caption and the empty one, a second run encodes nothing,
the files' layout) and the content key shared with C++ (pipeline/text_cache.cpp).

Run by ctest (test/CMakeLists.txt); exits 4 (ctest: skipped) saying what is missing when torch,
transformers, tokenizers, safetensors or diffusers are not installed.
"""
import json
import os
import subprocess
import sys
import tempfile

SKIP = 4
HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, "..", "..", "scripts", "encode_text.py")

try:
    import torch
    import transformers
    import tokenizers
    from safetensors.torch import load_file
    from safetensors import safe_open
    import diffusers
    from diffusers import HunyuanVideoPipeline
except ImportError as error:
    print(f"SKIP: {error} (python3 -m pip install torch transformers tokenizers safetensors diffusers)")
    sys.exit(SKIP)

sys.path.insert(0, os.path.dirname(SCRIPT))
import encode_text  # noqa: E402

CAPTIONS = ["A cat walks across a sunny kitchen floor.",
            "Slow aerial shot over a foggy pine forest at dawn, the camera drifting left.",
            "",
            "A cat walks across a sunny kitchen floor.",  # a repeat: one file
            "Close-up of rain on a window; " * 40]  # longer than both tokenizers' limits: truncated


def build_llama_tokenizer(folder):
    """A byte-level BPE trained here on the template and a few sentences, Llama-3-like specials."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>",
                "<|pad|>"]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator([encode_text.TEMPLATE.replace("{}", "")] * 3 + CAPTIONS, trainer=trainer)
    bos = tok.token_to_id("<|begin_of_text|>")
    tok.post_processor = processors.TemplateProcessing(single="<|begin_of_text|> $A", pair="<|begin_of_text|> $A $B",
                                                       special_tokens=[("<|begin_of_text|>", bos)])
    wrapped = transformers.PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|begin_of_text|>",
                                                   eos_token="<|eot_id|>", pad_token="<|pad|>")
    wrapped.padding_side = "right"
    wrapped.save_pretrained(folder)
    return len(tok.get_vocab())


def build_clip_tokenizer(folder):
    """CLIP's byte-level BPE over single characters (no merges): vocab.json + merges.txt."""
    # GPT-2's byte-to-character table: printable bytes stand for themselves, the rest map above 255.
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("\u00a1"), ord("\u00ac") + 1),
                 *range(ord("\u00ae"), ord("\u00ff") + 1)]
    extra = iter(range(256, 512))
    chars = [chr(b) if b in printable else chr(next(extra)) for b in range(256)]
    vocab = {c: i for i, c in enumerate(chars + [c + "</w>" for c in chars])}
    vocab["<|startoftext|>"] = len(vocab)
    vocab["<|endoftext|>"] = len(vocab)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "vocab.json"), "w") as f:
        json.dump(vocab, f)
    with open(os.path.join(folder, "merges.txt"), "w") as f:
        f.write("#version: 0.2\n")
    tok = transformers.CLIPTokenizer(os.path.join(folder, "vocab.json"), os.path.join(folder, "merges.txt"),
                                     pad_token="<|endoftext|>")
    tok.model_max_length = 77
    tok.save_pretrained(folder)
    return len(vocab), vocab["<|startoftext|>"], vocab["<|endoftext|>"]


def build_pipeline_folder(root):
    torch.manual_seed(0)
    llama_vocab = build_llama_tokenizer(os.path.join(root, "tokenizer"))
    clip_vocab, bos, eos = build_clip_tokenizer(os.path.join(root, "tokenizer_2"))
    llama = transformers.LlamaModel(transformers.LlamaConfig(
        vocab_size=llama_vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=512, pad_token_id=llama_vocab - 1))
    llama.save_pretrained(os.path.join(root, "text_encoder"))
    clip = transformers.CLIPTextModel(transformers.CLIPTextConfig(
        vocab_size=clip_vocab, hidden_size=24, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        max_position_embeddings=77, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos, projection_dim=24))
    clip.save_pretrained(os.path.join(root, "text_encoder_2"))
    with open(os.path.join(root, "model_index.json"), "w") as f:
        json.dump({"_class_name": "HunyuanVideoPipeline", "text_encoder": ["transformers", "LlamaModel"],
                   "tokenizer": ["transformers", "PreTrainedTokenizerFast"],
                   "text_encoder_2": ["transformers", "CLIPTextModel"],
                   "tokenizer_2": ["transformers", "CLIPTokenizer"]}, f)


def diffusers_encode(root, prompts):
    """diffusers' encode_prompt on components loaded from the folder on their own."""
    pipe = HunyuanVideoPipeline(
        text_encoder=transformers.LlamaModel.from_pretrained(os.path.join(root, "text_encoder")).eval(),
        tokenizer=transformers.PreTrainedTokenizerFast.from_pretrained(os.path.join(root, "tokenizer")),
        transformer=None, vae=None, scheduler=None,
        text_encoder_2=transformers.CLIPTextModel.from_pretrained(os.path.join(root, "text_encoder_2")).eval(),
        tokenizer_2=transformers.CLIPTokenizer.from_pretrained(os.path.join(root, "tokenizer_2")))
    with torch.no_grad():
        return pipe.encode_prompt(prompts, device=torch.device("cpu"))


def check(condition, message):
    if not condition:
        print(f"FAIL: {message}")
        sys.exit(1)


def main():
    # The key C++ computes for the same inputs (test/pipeline/test_text_cache.cpp holds this value).
    check(encode_text.content_key("identity-0", "A cat.") == "3a5e35dbbc111c8b51eb337777430c91",
          "content_key differs from the value C++'s text_cache_key gives")
    transformers.logging.set_verbosity_error()
    diffusers.utils.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    with tempfile.TemporaryDirectory() as root:
        pipeline = os.path.join(root, "pipeline")
        build_pipeline_folder(pipeline)
        prompts = list(dict.fromkeys(CAPTIONS))
        ref_states, ref_pooled, ref_mask = diffusers_encode(pipeline, prompts)
        check(ref_states.shape[1] == 256, f"diffusers' states have {ref_states.shape[1]} tokens, expected 256")

        # In process: the encoder class against encode_prompt, batched as one.
        encoders = encode_text.HunyuanTextEncoders(pipeline, "cpu", torch.float32)
        states, mask, pooled = encoders.encode(prompts)
        check(torch.equal(mask, ref_mask), "text_mask differs from encode_prompt's")
        lengths = mask.sum(1).tolist()  # the long caption fills all 256 tokens, the others fewer
        check(min(lengths) > 0 and sorted(lengths)[-2] < 256 and max(lengths) == 256, f"mask lengths {lengths}")
        err_states = (states - ref_states).abs().max().item()
        err_pooled = (pooled - ref_pooled).abs().max().item()
        print(f"in process: max |states - diffusers| = {err_states:.3g}, max |pooled - diffusers| = {err_pooled:.3g}")
        check(err_states <= 1e-5 and err_pooled <= 1e-5, "encode() differs from encode_prompt by more than 1e-5")

        # The script: one file per distinct caption (the empty one included), each equal to diffusers'
        # row for its caption, encoded in batches of 2.
        cache = os.path.join(root, "cache")
        listing = os.path.join(root, "captions.json")
        with open(listing, "w") as f:
            json.dump(CAPTIONS, f)
        command = [sys.executable, SCRIPT, "--pipeline", pipeline, "--out", cache, "--captions", listing,
                   "--device", "cpu", "--dtype", "fp32", "--batch-size", "2"]
        first = subprocess.run(command, capture_output=True, text=True)
        print(first.stdout, first.stderr[-2000:])
        check(first.returncode == 0, "encode_text.py failed")
        check("captions/s" in first.stdout and "ETA" in first.stdout, "no progress line")
        with open(os.path.join(cache, "encoder.json")) as f:
            record = json.load(f)
        identity = record["identity"]
        check(record["empty"] == encode_text.content_key(identity, "") + ".safetensors", "encoder.json: wrong empty")
        check(record["text_dim"] == 32 and record["pooled_dim"] == 24, f"encoder.json sizes: {record}")
        files = sorted(n for n in os.listdir(cache) if n.endswith(".safetensors"))
        check(len(files) == len(prompts), f"{len(files)} files for {len(prompts)} distinct captions")
        for i, prompt in enumerate(prompts):
            path = os.path.join(cache, encode_text.content_key(identity, prompt) + ".safetensors")
            saved = load_file(path)
            check(saved["text_states"].dtype == torch.float32 and saved["text_mask"].dtype == torch.uint8,
                  "dtypes: text_states fp32 (with --dtype fp32), text_mask uint8")
            check(saved["text_states"].shape == (256, 32) and saved["pooled"].shape == (24,), "shapes")
            check(torch.equal(saved["text_mask"].long(), ref_mask[i]), f"{path}: mask differs")
            check((saved["text_states"] - ref_states[i]).abs().max().item() <= 1e-5, f"{path}: states differ")
            check((saved["pooled"] - ref_pooled[i]).abs().max().item() <= 1e-5, f"{path}: pooled differs")
            with safe_open(path, "pt") as f:
                check(f.metadata()["caption"] == prompt, "metadata caption")

        # Resume: nothing left to encode, nothing rewritten.
        stamps = {n: os.stat(os.path.join(cache, n)).st_mtime_ns for n in files}
        second = subprocess.run(command, capture_output=True, text=True)
        check(second.returncode == 0 and "0 to encode" in second.stdout, f"second run: {second.stdout}")
        check(all(os.stat(os.path.join(cache, n)).st_mtime_ns == t for n, t in stamps.items()), "files rewritten")
        # A missing file (a run stopped before it) is encoded again, and only it.
        os.remove(os.path.join(cache, files[0]))
        third = subprocess.run(command, capture_output=True, text=True)
        check(third.returncode == 0 and "1 to encode" in third.stdout, f"third run: {third.stdout}")
        # Another dtype is another encoder identity: other names.
        identity_bf16, _ = encode_text.encoder_identity(pipeline, "bf16")
        check(identity_bf16 != identity, "the identity must depend on the dtype")
    print("PASS: encode_text.py equals diffusers' encode_prompt (fp32, <= 1e-5)")


if __name__ == "__main__":
    main()
