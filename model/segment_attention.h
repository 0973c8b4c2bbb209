// Joint attention over [video | text] with right-padded text, without a mask: each sample's
// valid tokens (all video tokens, then its valid text prefix) form one sequence of flash
// attention's variable-length mode, and its padding tokens form a second sequence of their own.
// Valid tokens then see exactly the keys a padding mask would leave them, and the padded
// (B, S, ...) layout is kept as is (no gather, static shapes, so a CUDA graph can hold it): the
// offsets are computed on the device from the mask. Padding rows attend only to padding; their
// outputs differ from the masked computation's, but padding rows never reach a valid token (they
// are never keys of one) nor the video output, so the loss and every gradient are the same.
#pragma once

#include <torch/types.h>

namespace tt {

/// Segment offsets (2B + 1, int32, on lengths' device): [0, l_0, S, S + l_1, 2S, ..., BS] for
/// lengths (B) (valid tokens per sample, each in [0, S]) of rows of S tokens.
torch::Tensor segment_offsets(const torch::Tensor& lengths, int64_t tokens);

/// True when segment attention can run q (B, H, S, D) on this device and dtype: CUDA, fp16 or
/// bf16 (after autocast), head_dim a multiple of 8 up to 256, a GPU of sm_80 or newer.
bool segment_attention_takes(const torch::Tensor& q);

/// softmax(q k^T / sqrt(D)) v within each segment of `offsets` (segment_offsets over S = q's
/// tokens). q, k, v (B, H, S, D); returns (B, S, H * D), as the masked attention does. CUDA runs
/// flash attention's variable-length kernels (autograd included); elsewhere, or for inputs
/// segment_attention_takes refuses, the reference below.
torch::Tensor segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& offsets);

/// The same through SDPA with a block-diagonal boolean mask built from the offsets (any device
/// and dtype): the definition the kernel path is tested against.
torch::Tensor segment_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& offsets);

}  // namespace tt
