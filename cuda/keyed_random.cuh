// Launchers of the keyed random kernels (no torch here; see cuda/ops.h for the entries and
// cuda/keyed_random.h for the numbers they compute).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// out[b * per_sample + i] = standard normal i of (seed, keys[b], draw): out (batch, per_sample) fp32,
/// keys (batch) int64 on the device. Returns the launch status.
cudaError_t keyed_normal(float* out, const int64_t* keys, int64_t batch, int64_t per_sample, uint64_t seed,
                         uint32_t draw, cudaStream_t stream);

/// out[b * per_sample + i] = uniform i in (0, 1] of (seed, keys[b], draw): the block's words as
/// keyed::open_unit gives them. Returns the launch status.
cudaError_t keyed_uniform(float* out, const int64_t* keys, int64_t batch, int64_t per_sample, uint64_t seed,
                          uint32_t draw, cudaStream_t stream);

}  // namespace tt::kernels
