// Launchers of the fused QK RMSNorm + RoPE kernels (no torch here; see cuda/ops.h for the entry
// and cuda/rms_norm_rope.cu for the algorithm).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// Largest head_dim the kernels take (each lane keeps head_dim / 64 pairs in registers).
inline constexpr int64_t kRmsNormRopeMaxDim = 256;

/// Element strides of a (B, H, N, D) tensor along B, H and N (D's is 1).
struct RowStrides {
  int64_t batch = 0, heads = 0, tokens = 0;
};

/// q or k of one attention: x (B, H, N, D) with unit stride along D and any strides along B, H, N
/// (a permuted view of the fused QKV projection reads in place).
struct RmsNormRopeShape {
  int64_t batch = 0;         /// B
  int64_t heads = 0;         /// H
  int64_t tokens = 0;        /// N
  int64_t dim = 0;           /// D, even, <= kRmsNormRopeMaxDim
  int64_t stride_batch = 0;  /// x's element strides; D's is 1
  int64_t stride_heads = 0;
  int64_t stride_tokens = 0;
  int64_t rope_tokens = 0;  /// tokens n < rope_tokens are rotated, the rest only normalised
  float eps = 1e-6f;        /// added to mean(x^2)
  bool bf16 = false;        /// x, out, grad, dx bf16, else fp32
  RowStrides out;           /// out's (forward) and dx's (backward) strides
  RowStrides grad;          /// grad's (backward)
};

/// out[b,h,n,:] = rope_n(round(x * rstd * weight)) with rstd = rsqrt(mean(x^2) + eps) over D in
/// fp32; round() is the rounding to x's dtype that the unfused model does between its two ops;
/// rope_n rotates each pair (2j, 2j+1) by rope[n, j] = (cos, sin) for n < rope_tokens.
/// out: (B, H, N, D) strided as shape.out; rstd: (B, H, N) fp32 dense (kept for backward); weight: (D) fp32;
/// rope: (>= rope_tokens, D/2, 2) fp32 (may be null when rope_tokens is 0).
cudaError_t rms_norm_rope_forward(void* out, float* rstd, const void* x, const float* weight,
                                  const float* rope, const RmsNormRopeShape& shape, cudaStream_t stream);

/// fp32 scratch elements rms_norm_rope_backward needs (per-block partial sums of dweight).
int64_t rms_norm_rope_scratch_size(const RmsNormRopeShape& shape);

/// dx (B, H, N, D) in x's dtype strided as shape.out and dweight (D) fp32 from grad (B, H, N, D)
/// strided as shape.grad, x (strided as in the forward), the forward's rstd, weight and rope. dweight sums
/// over B, H, N in fp32 in a fixed order. scratch: rms_norm_rope_scratch_size(shape) fp32.
cudaError_t rms_norm_rope_backward(void* dx, float* dweight, const void* grad, const void* x,
                                   const float* rstd, const float* weight, const float* rope, float* scratch,
                                   const RmsNormRopeShape& shape, cudaStream_t stream);

}  // namespace tt::kernels
