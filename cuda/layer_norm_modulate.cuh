// Launchers of the adaLN modulation kernels: LayerNorm without affine, then shift + x̂ (1 + scale)
// (no torch here; see cuda/ops.h for the entry and cuda/layer_norm_modulate.cu for the algorithm).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// Largest channel count the kernels take (each thread keeps up to 12 channels of a row).
inline constexpr int64_t kLayerNormModulateMaxChannels = 3072;

/// x (B, N, C) dense; shift, scale (B, C) dense; all bf16 (`bf16`) or all fp32. Writes
/// m = shift + round(x̂) * round(1 + scale) (B, N, C) in x's dtype, with x̂ = (x - mean) * rstd over C
/// in fp32 and the roundings to x's dtype that LayerNorm's output and `1 + scale` get in the
/// composition; mean and rstd = rsqrt(var + eps) (B * N) fp32.
cudaError_t layer_norm_modulate_forward(void* m, float* mean, float* rstd, const void* x, const void* shift,
                                        const void* scale, int64_t batch, int64_t tokens, int64_t channels,
                                        float eps, bool bf16, cudaStream_t stream);

/// fp32 scratch elements layer_norm_modulate_backward needs (per-chunk partial column sums).
int64_t layer_norm_modulate_scratch_size(int64_t batch, int64_t tokens, int64_t channels);

/// From grad = dL/dm (B, N, C), x, scale and the forward's mean and rstd: dx (B, N, C) (LayerNorm's
/// backward of g = round(grad * round(1 + scale))), dshift = sum_n grad and dscale = sum_n grad *
/// round(x̂) (the product rounded to x's dtype, as the composition's) (B, C), the sums in fp32 in a fixed
/// order (deterministic). All tensors dense, one dtype (mean, rstd and scratch fp32). scratch:
/// layer_norm_modulate_scratch_size(...) fp32.
cudaError_t layer_norm_modulate_backward(void* dx, void* dshift, void* dscale, const void* grad,
                                         const void* x, const void* scale, const float* mean,
                                         const float* rstd, float* scratch, int64_t batch, int64_t tokens,
                                         int64_t channels, bool bf16, cudaStream_t stream);

}  // namespace tt::kernels
