// Fused flow-matching mix: one read of x0 and noise writes both the model input and the target.
#include "cuda/flow_matching.cuh"

namespace tt::kernels {

static __global__ void flow_matching_mix_kernel(float* __restrict__ noisy, float* __restrict__ target,
                                                const float* __restrict__ x0, const float* __restrict__ noise,
                                                const float* __restrict__ sigmas, int64_t total,
                                                int64_t per_sample) {
  int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    float s = sigmas[i / per_sample];
    float a = x0[i];
    float e = noise[i];
    noisy[i] = (1.0f - s) * a + s * e;
    target[i] = e - a;
  }
}

cudaError_t flow_matching_mix(float* noisy, float* target, const float* x0, const float* noise,
                              const float* sigmas, int64_t total, int64_t per_sample, cudaStream_t stream) {
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535;
  flow_matching_mix_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(noisy, target, x0, noise,
                                                                                 sigmas, total, per_sample);
  return cudaGetLastError();
}

}  // namespace tt::kernels
