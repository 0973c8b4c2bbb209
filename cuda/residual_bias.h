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

}  // namespace tt::kernels
