// Launcher of the fused flow-matching mix kernel (no torch here; see cuda/ops.h for the entry).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// noisy[i] = (1 - s[b]) x0[i] + s[b] noise[i]; target[i] = noise[i] - x0[i], where b = i / per_sample.
/// Returns the launch status.
cudaError_t flow_matching_mix(float* noisy, float* target, const float* x0, const float* noise,
                              const float* sigmas, int64_t total, int64_t per_sample, cudaStream_t stream);

}  // namespace tt::kernels
