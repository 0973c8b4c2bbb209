// Launcher of the YUV 4:2:0 -> RGB colour kernel (no torch here; see cuda/ops.h for the entry).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/colour.h"

namespace tt::kernels {

/// rgb (T, H, W, 3) uint8, contiguous <- y (T, H, W) and interleaved uv (T, ceil(H/2), ceil(W/2), 2),
/// both uint8 (bit_depth 8, NV12) or uint16 with the value in the high 10 bits (bit_depth 10, P010).
/// Pitches and frame strides are in bytes, so padded NVDEC surfaces are read in place (the uv pitch
/// is the byte distance between chroma rows; within a row the uv pairs are packed). Chroma is
/// upsampled as cuda/colour.h says (8-bit: 2x2 replicate; 10-bit: vertical cubic). Returns the launch status.
cudaError_t yuv420_to_rgb(uint8_t* rgb, const void* y, const void* uv, int64_t frames, int height, int width,
                          int64_t y_pitch_bytes, int64_t uv_pitch_bytes, int64_t y_frame_stride_bytes,
                          int64_t uv_frame_stride_bytes, YuvFormat format, cudaStream_t stream);

}  // namespace tt::kernels
