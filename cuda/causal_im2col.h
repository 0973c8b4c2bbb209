// Launcher of the causal im2col kernel (no torch here; see cuda/ops.h causal_conv3d_gemm for the entry).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// Shape of a 3x3x3 causal convolution's input: (batch, channels, frames, height, width) at the
/// given element strides; the convolution reads two copies of the first frame in front and one
/// edge row / column on each side (replicate padding, as clamped indices).
struct Im2colShape {
  int64_t batch = 0, channels = 0, frames = 0, height = 0, width = 0;
  int64_t stride[5] = {0, 0, 0, 0, 0};
  int64_t columns = 0;  /// cols' row length: >= 27 * channels + 1, a multiple of 8
};

/// rows [first_row, first_row + rows) of the im2col matrix, row r = output position (b, t, h, w) in
/// that order: entry (dt * 9 + dh * 3 + dw) * channels + c is x at (b, c, clamp(t + dt - 2),
/// clamp(h + dh - 1), clamp(w + dw - 1)); entry 27 * channels is 1 (the bias row of the weight
/// matrix); the rest up to `columns` 0. x and cols bf16 (`bf16`) or fp32; cols dense (rows, columns).
cudaError_t causal_im2col(void* cols, const void* x, const Im2colShape& shape, int64_t first_row,
                          int64_t rows, bool bf16, cudaStream_t stream);

}  // namespace tt::kernels
