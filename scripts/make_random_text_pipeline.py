#!/usr/bin/env python3
"""A diffusers HunyuanVideo pipeline folder with text encoders of the released shapes and random
weights, for timing `teletron encode-text` where the real weights cannot be downloaded: text_encoder
= a Llama of LLaVA-Llama-3-8B's text shape (hidden 4096, 32 layers, 32 heads, 8 KV heads, MLP 14336,
vocabulary 128,320), text_encoder_2 = CLIP ViT-L/14's text tower (hidden 768, 12 layers, 12 heads,
77 positions, vocabulary 49,408), saved in bf16. The tokenizers are the small ones
test/python/test_encode_text.py trains (their ids index the large embeddings): tokenisation costs
the same order of time, the encoders' work is the real one. The timings mean something, the
embeddings do not.

Usage: make_random_text_pipeline.py OUT [--device cuda] [--tiny]
"""
import argparse
import json
import os
import sys
import time

import torch
import transformers

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "test", "python"))
from test_encode_text import build_clip_tokenizer, build_llama_tokenizer  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("out")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tiny", action="store_true", help="tiny encoders (a smoke test of this script)")
    args = parser.parse_args()
    start = time.time()
    torch.manual_seed(0)
    llama_vocab = build_llama_tokenizer(os.path.join(args.out, "tokenizer"))
    _, bos, eos = build_clip_tokenizer(os.path.join(args.out, "tokenizer_2"))
    if args.tiny:
        llama_cfg = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=max(llama_vocab, 1000))
        clip_cfg = dict(hidden_size=24, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                        projection_dim=24, vocab_size=1000)
    else:
        llama_cfg = dict(hidden_size=4096, intermediate_size=14336, num_hidden_layers=32, num_attention_heads=32,
                         num_key_value_heads=8, vocab_size=128320, rope_theta=500000.0)
        clip_cfg = dict(hidden_size=768, intermediate_size=3072, num_hidden_layers=12, num_attention_heads=12,
                        projection_dim=768, vocab_size=49408)
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(args.device):
        llama = transformers.LlamaModel(transformers.LlamaConfig(max_position_embeddings=8192,
                                                                 pad_token_id=llama_vocab - 1, **llama_cfg))
        llama.save_pretrained(os.path.join(args.out, "text_encoder"))
        params = sum(p.numel() for p in llama.parameters())
        del llama
        clip = transformers.CLIPTextModel(transformers.CLIPTextConfig(
            max_position_embeddings=77, bos_token_id=bos, eos_token_id=eos, pad_token_id=eos, **clip_cfg))
        clip.save_pretrained(os.path.join(args.out, "text_encoder_2"))
        params_2 = sum(p.numel() for p in clip.parameters())
    torch.set_default_dtype(previous)
    with open(os.path.join(args.out, "model_index.json"), "w") as f:
        json.dump({"_class_name": "HunyuanVideoPipeline", "text_encoder": ["transformers", "LlamaModel"],
                   "tokenizer": ["transformers", "PreTrainedTokenizerFast"],
                   "text_encoder_2": ["transformers", "CLIPTextModel"],
                   "tokenizer_2": ["transformers", "CLIPTokenizer"]}, f)
    print(f"random text pipeline in {args.out}: Llama {params / 1e9:.2f} B, CLIP {params_2 / 1e6:.0f} M parameters, "
          f"bf16 ({time.time() - start:.0f} s)")


if __name__ == "__main__":
    main()
