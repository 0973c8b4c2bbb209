#!/usr/bin/env python3
"""GPU machine: ATen's flash varlen forward/backward at teletron's packed layout, per shape: is the
output contiguous, does .view((B, S, H*D)) hold, do the gradients come back. A diagnostic for
model/segment_attention.cpp."""
import torch

def check(batch, heads, tokens, d, valid):
    torch.manual_seed(0)
    q, k, v = (torch.randn(batch, heads, tokens, d, device="cuda", dtype=torch.bfloat16, requires_grad=True)
               for _ in range(3))
    pieces = []
    for b in range(batch):
        pieces += [valid[b], tokens - valid[b]]
    offsets = torch.zeros(2 * batch + 1, dtype=torch.int32, device="cuda")
    offsets[1:] = torch.tensor(pieces, device="cuda").cumsum(0)
    packed = [t.transpose(1, 2).reshape(batch * tokens, heads, d) for t in (q, k, v)]
    out = torch.ops.aten._flash_attention_forward(*packed, offsets, offsets, tokens, tokens, 0.0, False, False)
    o = out[0]
    line = f"B{batch} H{heads} S{tokens} D{d} valid {valid}: out {tuple(o.shape)} stride {o.stride()} contiguous {o.is_contiguous()}"
    try:
        y = o.view(batch, tokens, heads * d)
        y.float().square().sum().backward()
        line += f"; view ok, grad q {q.grad.abs().max().item():.3g}"
    except RuntimeError as error:
        line += f"; FAILED: {str(error).splitlines()[0]}"
    print(line, flush=True)

for shape in [(1, 4, 16 + 8, 32, [20]), (2, 4, 24, 32, [20, 17]), (1, 12, 2304 + 256, 128, [2304 + 37]),
              (1, 12, 2304 + 256, 128, [2304 + 256]), (2, 12, 2560, 128, [2341, 2500]),
              (1, 12, 14040 + 256, 128, [14040 + 100])]:
    check(*shape)
