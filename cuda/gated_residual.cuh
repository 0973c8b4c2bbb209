// Launchers of the gated-residual kernels (no torch here; see cuda/ops.h for the entry and
// cuda/gated_residual.cu for the algorithm).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// out = x + gate[b, c] * y for x, y, out (B, N, C) and gate (B, C), dense, all bf16 (`bf16`) or all
/// fp32; fp32 math, one rounding. Queued on `stream`; returns the launch status.
cudaError_t gated_residual_forward(void* out, const void* x, const void* y, const void* gate, int64_t batch,
                                   int64_t tokens, int64_t channels, bool bf16, cudaStream_t stream);

/// fp32 scratch elements gated_residual_backward needs: per-chunk partial sums of dgate.
int64_t gated_residual_scratch_size(int64_t batch, int64_t tokens, int64_t channels);

/// dy = grad * gate[b, c] (B, N, C) and dgate[b, c] = sum_n grad * y (B, C), accumulated in fp32
/// in a fixed order (deterministic); grad, y, dy (B, N, C) and gate, dgate (B, C) dense, one dtype.
/// dx is grad itself and needs no kernel. scratch: gated_residual_scratch_size(...) fp32.
cudaError_t gated_residual_backward(void* dy, void* dgate, const void* grad, const void* y, const void* gate,
                                    float* scratch, int64_t batch, int64_t tokens, int64_t channels,
                                    bool bf16, cudaStream_t stream);

}  // namespace tt::kernels
