// Joint attention over [video | text] with right-padded text, one call per sample at its own
// length and without a mask. PyTorch turns a key mask into an additive bias for cuDNN's attention,
// and cuDNN's kernel with a bias runs at about 0.58x the speed of its kernel without one (H100,
// 33x480x832 of the 1b preset: 13.73 against 7.91 ms forward + backward, scripts/attention_bench.py
// in BENCHMARKS.md). Cutting each sample to its valid tokens (all video tokens, then its caption)
// gives every call a shape with no padding, so no mask: valid tokens see exactly the keys the mask
// would leave them. Padding rows get zeros; they are never a valid token's key and never reach the
// video output, so the loss and every gradient are those of the masked attention.
//
// The lengths are read on the host (the trimmer knows them), so the call's shapes depend on the
// batch: a step being captured into a CUDA graph keeps the mask (per_sample_attention_allowed).
#pragma once

#include <torch/types.h>

#include <vector>

namespace tt {

/// softmax(q k^T / sqrt(D)) v of each sample b over its first lengths[b] tokens (queries and keys),
/// no mask. q, k, v (B, H, S, D); lengths (B) in [1, S]. Returns (B, S, H * D) as the masked
/// attention does, with zeros in the rows from lengths[b] on. Each call goes through kept_or_sdpa,
/// so a checkpointed block that keeps its attention keeps these calls too.
torch::Tensor per_sample_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const std::vector<int64_t>& lengths);

/// False while the step is recorded into a graph or replayed from one (core/graph_capture.h,
/// step_in_graph: the lengths would be baked into it); true otherwise, on any device.
bool per_sample_attention_allowed(const torch::Tensor& q);

}  // namespace tt
