// Launcher of the residual + per-channel bias kernel (no torch here; see cuda/ops.h for the entry).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// out[i] = out[i] + other[i] + bias[i % channels] over `count` values of dense tensors whose
/// innermost dimension is the channel (channels-last), bf16 (`bf16`) or fp32, added in fp32 and
/// rounded once. bias: (channels) fp32. Queued on `stream`. Returns the launch error.
cudaError_t add_residual_bias(void* out, const void* other, const float* bias, int64_t count,
                              int64_t channels, bool bf16, cudaStream_t stream);

/// The dense (batch, frames, height, width, channels) inputs of add_residual_bias_padded and the
/// pads of its output: `time` frames in front, `space` rows / columns on each side.
struct PaddedShape {
  int64_t batch = 0, channels = 0, frames = 0, height = 0, width = 0;
  int64_t time = 0, space = 0;
};

/// x[i] + other[i] + bias[c] (the same fp32 sum and rounding as add_residual_bias) written into the
/// interior of `out`, a dense channels-last (batch, frames + time, height + 2 space, width + 2 space,
/// channels) buffer; its pads are left as they are. x and other dense channels-last, bf16 or fp32.
cudaError_t add_residual_bias_padded(void* out, const void* x, const void* other, const float* bias,
                                     const PaddedShape& shape, bool bf16, cudaStream_t stream);

}  // namespace tt::kernels
