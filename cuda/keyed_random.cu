// Keyed random kernels: one thread per block of four elements of one sample, so element i of a
// sample is the same number whatever batch the sample is drawn in.
#include "cuda/keyed_random.cuh"
#include "cuda/keyed_random.h"

namespace tt::kernels {

namespace {

constexpr int kThreads = 256;

int64_t blocks_for(int64_t work) {
  const int64_t blocks = (work + kThreads - 1) / kThreads;
  return blocks > 65535 ? 65535 : blocks;
}

}  // namespace

// normal: Box-Muller normals; otherwise the words as uniforms in (0, 1].
static __global__ void keyed_draw_kernel(float* __restrict__ out, const int64_t* __restrict__ keys, int64_t batch,
                                         int64_t per_sample, uint64_t seed, uint32_t draw, bool normal) {
  const int64_t groups = (per_sample + 3) / 4;
  const int64_t total = batch * groups;
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t work = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; work < total; work += stride) {
    const int64_t b = work / groups;
    const int64_t group = work - b * groups;
    const keyed::Block block =
        keyed::block_of(seed, static_cast<uint64_t>(keys[b]), draw, static_cast<uint32_t>(group));
    float values[4];
    if (normal) {
      keyed::normals_of(block, values);
    } else {
      for (int k = 0; k < 4; ++k) values[k] = keyed::open_unit(block.v[k]);
    }
    float* row = out + b * per_sample;
    for (int k = 0; k < 4; ++k) {
      const int64_t i = group * 4 + k;
      if (i < per_sample) row[i] = values[k];
    }
  }
}

static cudaError_t launch(float* out, const int64_t* keys, int64_t batch, int64_t per_sample, uint64_t seed,
                          uint32_t draw, bool normal, cudaStream_t stream) {
  const int64_t work = batch * ((per_sample + 3) / 4);
  if (work == 0) return cudaSuccess;
  keyed_draw_kernel<<<static_cast<unsigned>(blocks_for(work)), kThreads, 0, stream>>>(out, keys, batch, per_sample,
                                                                                    seed, draw, normal);
  return cudaGetLastError();
}

cudaError_t keyed_normal(float* out, const int64_t* keys, int64_t batch, int64_t per_sample, uint64_t seed,
                         uint32_t draw, cudaStream_t stream) {
  return launch(out, keys, batch, per_sample, seed, draw, /*normal=*/true, stream);
}

cudaError_t keyed_uniform(float* out, const int64_t* keys, int64_t batch, int64_t per_sample, uint64_t seed,
                          uint32_t draw, cudaStream_t stream) {
  return launch(out, keys, batch, per_sample, seed, draw, /*normal=*/false, stream);
}

}  // namespace tt::kernels
