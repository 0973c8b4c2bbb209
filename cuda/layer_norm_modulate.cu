// adaLN modulation of the Transformer blocks in one pass, and its backward: LayerNorm over C without
// affine (eps), then shift + x̂ (1 + scale), as model/layers.cpp's norm_modulate composes it from
// ATen's LayerNorm and addcmul.
//
// Forward: one block of kThreads per (b, n) row; thread t holds channels t, t + kThreads, ... (at
// most kPerThread) in registers. Mean, then the variance around it (two passes over registers, fp32),
// rstd = rsqrt(var + eps); x̂ is rounded to x's dtype (LayerNorm's output in the composition) and
// 1 + scale too (addcmul's operand), then m = shift + x̂ (1 + scale) in fp32, rounded once.
// Backward: one block per chunk of rows of one sample. Per row, g = round(grad (1 + scale)) (the
// composition's product in x's dtype) and LayerNorm's dx = rstd (g - mean(g) - x̂ mean(g x̂)) with
// x̂ in fp32 from the saved mean and rstd; each thread also adds grad and grad * round(x̂) of its
// channels over the chunk's rows, written as one partial row per chunk, which a second kernel adds
// in chunk order (dshift, dscale). No atomics: deterministic. Scalar loads.
#include "cuda/layer_norm_modulate.cuh"
#include "cuda/row_chunks.h"
#include "cuda/scalar_io.cuh"

namespace tt::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kPerThread = static_cast<int>(kLayerNormModulateMaxChannels / kThreads);  // 12
constexpr int64_t kChunk = 32;  // backward: rows per block, before the grid's limit raises it
constexpr int64_t kMaxChunks = 65535;

int64_t chunk_tokens(int64_t tokens) {
  return chunk_rows(tokens, kChunk, kMaxChunks);
}

int64_t chunks_of(int64_t tokens) {
  return chunk_count(tokens, kChunk, kMaxChunks);
}

// Sums of a and b over the block, in every thread (shared: kWarps float2 of scratch). Fixed order.
__device__ float2 block_sum2(float a, float b, float2* shared) {
  a = warp_sum(a);
  b = warp_sum(b);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // shared may still be read by the previous call
  if (lane == 0) shared[warp] = make_float2(a, b);
  __syncthreads();
  float2 total = make_float2(0.0f, 0.0f);
  for (int w = 0; w < kWarps; ++w) {
    total.x += shared[w].x;
    total.y += shared[w].y;
  }
  return total;
}

}  // namespace

// m, x (rows = B * N, C); shift, scale (B, C); mean, rstd (rows); one block per row (grid-stride).
template <typename T>
static __global__ void __launch_bounds__(kThreads)
    layer_norm_modulate_kernel(T* __restrict__ m, float* __restrict__ mean_out, float* __restrict__ rstd_out,
                               const T* __restrict__ x, const T* __restrict__ shift,
                               const T* __restrict__ scale, int64_t rows, int64_t tokens, int64_t channels,
                               float eps) {
  __shared__ float2 shared[kWarps];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * channels;
    float v[kPerThread];
    float sum = 0.0f;
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      v[k] = c < channels ? load_float(xr + c) : 0.0f;
      sum += v[k];
    }
    const float mean = block_sum2(sum, 0.0f, shared).x / static_cast<float>(channels);
    float sq = 0.0f;
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      const float d = c < channels ? v[k] - mean : 0.0f;
      sq += d * d;
    }
    const float var = block_sum2(sq, 0.0f, shared).x / static_cast<float>(channels);
    const float rstd = rsqrtf(var + eps);
    if (threadIdx.x == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
    const int64_t b = row / tokens;
    T* mr = m + row * channels;
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      if (c >= channels) break;
      const float normed = round_to(mr, (v[k] - mean) * rstd);
      const float factor = round_to(mr, 1.0f + load_float(scale + b * channels + c));
      store_float(mr + c, load_float(shift + b * channels + c) + normed * factor);
    }
  }
}

// dx (B, N, C); partials (B, chunks, 2, C) fp32 (grad's column sums, then grad * round(x̂)'s); grid
// (chunks, B), one block each.
template <typename T>
static __global__ void __launch_bounds__(kThreads)
    layer_norm_modulate_backward_kernel(T* __restrict__ dx, float* __restrict__ partials,
                                        const T* __restrict__ grad, const T* __restrict__ x,
                                        const T* __restrict__ scale, const float* __restrict__ mean,
                                        const float* __restrict__ rstd, int64_t tokens, int64_t channels,
                                        int64_t per_chunk) {
  __shared__ float2 shared[kWarps];
  const int64_t b = blockIdx.y;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * per_chunk;
  const int64_t end = begin + per_chunk < tokens ? begin + per_chunk : tokens;
  const float inv_c = 1.0f / static_cast<float>(channels);
  float factor[kPerThread], dshift[kPerThread], dscale[kPerThread];
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    factor[k] = c < channels ? round_to(dx, 1.0f + load_float(scale + b * channels + c)) : 0.0f;
    dshift[k] = dscale[k] = 0.0f;
  }
  for (int64_t n = begin; n < end; ++n) {
    const int64_t row = b * tokens + n;
    const float mu = mean[row], r = rstd[row];
    const T* gr = grad + row * channels;
    const T* xr = x + row * channels;
    float xh[kPerThread], gn[kPerThread];
    float sum_g = 0.0f, sum_gx = 0.0f;
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      xh[k] = gn[k] = 0.0f;
      if (c >= channels) continue;
      const float g = load_float(gr + c);
      xh[k] = (load_float(xr + c) - mu) * r;
      dshift[k] += g;
      dscale[k] += round_to(dx, g * round_to(dx, xh[k]));  // the product in x's dtype, as the composition
      gn[k] = round_to(dx, g * factor[k]);
      sum_g += gn[k];
      sum_gx += gn[k] * xh[k];
    }
    const float2 sums = block_sum2(sum_g, sum_gx, shared);
    const float mean_g = sums.x * inv_c, mean_gx = sums.y * inv_c;
    T* dr = dx + row * channels;
    for (int k = 0; k < kPerThread; ++k) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
      if (c >= channels) break;
      store_float(dr + c, r * (gn[k] - mean_g - xh[k] * mean_gx));
    }
  }
  float* out = partials + (b * gridDim.x + blockIdx.x) * 2 * channels;
  for (int k = 0; k < kPerThread; ++k) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(k) * kThreads;
    if (c >= channels) break;
    out[c] = dshift[k];
    out[channels + c] = dscale[k];
  }
}

// dshift, dscale (B, C) <- partials (B, chunks, 2, C), added in chunk order; grid-stride over B * C.
template <typename T>
static __global__ void layer_norm_modulate_columns_kernel(T* __restrict__ dshift, T* __restrict__ dscale,
                                                          const float* __restrict__ partials, int64_t batch,
                                                          int64_t chunks, int64_t channels) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch * channels;
       i += stride) {
    const int64_t b = i / channels, c = i - b * channels;
    float shift_total = 0.0f, scale_total = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) {
      const float* p = partials + (b * chunks + k) * 2 * channels;
      shift_total += p[c];
      scale_total += p[channels + c];
    }
    store_float(dshift + i, shift_total);
    store_float(dscale + i, scale_total);
  }
}

namespace {

bool valid(int64_t batch, int64_t channels) {
  return channels > 0 && channels <= kLayerNormModulateMaxChannels && batch <= 65535;
}

template <typename T>
cudaError_t launch_forward(T* m, float* mean, float* rstd, const T* x, const T* shift, const T* scale,
                           int64_t batch, int64_t tokens, int64_t channels, float eps, cudaStream_t stream) {
  const int64_t rows = batch * tokens;
  const auto blocks = static_cast<unsigned>(rows < 1048576 ? rows : 1048576);
  layer_norm_modulate_kernel<T>
      <<<blocks, kThreads, 0, stream>>>(m, mean, rstd, x, shift, scale, rows, tokens, channels, eps);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_backward(T* dx, T* dshift, T* dscale, const T* grad, const T* x, const T* scale,
                            const float* mean, const float* rstd, float* scratch, int64_t batch,
                            int64_t tokens, int64_t channels, cudaStream_t stream) {
  const int64_t chunks = chunks_of(tokens);
  if (chunks > 0) {
    const dim3 grid(static_cast<unsigned>(chunks), static_cast<unsigned>(batch));
    layer_norm_modulate_backward_kernel<T><<<grid, kThreads, 0, stream>>>(
        dx, scratch, grad, x, scale, mean, rstd, tokens, channels, chunk_tokens(tokens));
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  const int64_t blocks = ceil_div(batch * channels, kThreads);
  layer_norm_modulate_columns_kernel<T>
      <<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, 0, stream>>>(
          dshift, dscale, scratch, batch, chunks, channels);
  return cudaGetLastError();
}

}  // namespace

cudaError_t layer_norm_modulate_forward(void* m, float* mean, float* rstd, const void* x, const void* shift,
                                        const void* scale, int64_t batch, int64_t tokens, int64_t channels,
                                        float eps, bool bf16, cudaStream_t stream) {
  if (!valid(batch, channels)) return cudaErrorInvalidValue;
  if (batch * tokens == 0) return cudaSuccess;
  if (bf16)
    return launch_forward(static_cast<__nv_bfloat16*>(m), mean, rstd, static_cast<const __nv_bfloat16*>(x),
                          static_cast<const __nv_bfloat16*>(shift), static_cast<const __nv_bfloat16*>(scale),
                          batch, tokens, channels, eps, stream);
  return launch_forward(static_cast<float*>(m), mean, rstd, static_cast<const float*>(x),
                        static_cast<const float*>(shift), static_cast<const float*>(scale), batch, tokens,
                        channels, eps, stream);
}

int64_t layer_norm_modulate_scratch_size(int64_t batch, int64_t tokens, int64_t channels) {
  return batch * chunks_of(tokens) * 2 * channels;
}

cudaError_t layer_norm_modulate_backward(void* dx, void* dshift, void* dscale, const void* grad,
                                         const void* x, const void* scale, const float* mean,
                                         const float* rstd, float* scratch, int64_t batch, int64_t tokens,
                                         int64_t channels, bool bf16, cudaStream_t stream) {
  if (!valid(batch, channels)) return cudaErrorInvalidValue;
  if (batch == 0) return cudaSuccess;
  if (bf16)
    return launch_backward(static_cast<__nv_bfloat16*>(dx), static_cast<__nv_bfloat16*>(dshift),
                           static_cast<__nv_bfloat16*>(dscale), static_cast<const __nv_bfloat16*>(grad),
                           static_cast<const __nv_bfloat16*>(x), static_cast<const __nv_bfloat16*>(scale),
                           mean, rstd, scratch, batch, tokens, channels, stream);
  return launch_backward(static_cast<float*>(dx), static_cast<float*>(dshift), static_cast<float*>(dscale),
                         static_cast<const float*>(grad), static_cast<const float*>(x),
                         static_cast<const float*>(scale), mean, rstd, scratch, batch, tokens, channels,
                         stream);
}

}  // namespace tt::kernels
