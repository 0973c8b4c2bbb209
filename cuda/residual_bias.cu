// out += other + bias[c] for channels-last tensors: the VAE's resnet sum with its last convolution's
// bias (and the shortcut's) added here instead of in a pass of their own over the output.
// Each thread handles kVec consecutive values (16 bytes when the channel count and the pointers
// allow), all of one position, so their channels are consecutive too.
#include "cuda/residual_bias.h"

#include <cuda_bf16.h>

#include <algorithm>

#include "cuda/scalar_io.cuh"
#include "cuda/vector_width.h"

namespace tt::kernels {
namespace {

constexpr int kThreads = 256;

template <typename T, int kVec>
__global__ void add_residual_bias_kernel(T* __restrict__ out, const T* __restrict__ other,
                                         const float* __restrict__ bias, int64_t vectors, int64_t channels) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    float a[kVec], b[kVec];
    load_vec<T, kVec>(out + i * kVec, a);
    load_vec<T, kVec>(other + i * kVec, b);
    const int64_t c0 = (i * kVec) % channels;
    for (int k = 0; k < kVec; ++k) a[k] = a[k] + b[k] + bias[c0 + k];  // (out + other) + bias
    store_vec<T, kVec>(out + i * kVec, a);
  }
}

template <typename T>
cudaError_t launch(T* out, const T* other, const float* bias, int64_t count, int64_t channels,
                   cudaStream_t stream) {
  const int vec = vector_width(channels, sizeof(T), out, other);
  const int64_t vectors = count / vec;
  int64_t blocks = (vectors + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;  // grid-stride beyond
  const dim3 grid(static_cast<unsigned>(blocks));
  if (vec == 8)
    add_residual_bias_kernel<T, 8><<<grid, kThreads, 0, stream>>>(out, other, bias, vectors, channels);
  if (vec == 4)
    add_residual_bias_kernel<T, 4><<<grid, kThreads, 0, stream>>>(out, other, bias, vectors, channels);
  if (vec == 2)
    add_residual_bias_kernel<T, 2><<<grid, kThreads, 0, stream>>>(out, other, bias, vectors, channels);
  if (vec == 1)
    add_residual_bias_kernel<T, 1><<<grid, kThreads, 0, stream>>>(out, other, bias, vectors, channels);
  return cudaGetLastError();
}

// The same sum written into the interior of a padded channels-last buffer: position (b, t, h, w) of
// the dense inputs lands at (b, t + time, h + space, w + space) of `out` (frames t + time, rows
// h + 2 space, columns w + 2 space). One thread per kVec channels of a position.
template <typename T, int kVec>
__global__ void add_residual_bias_padded_kernel(T* __restrict__ out, const T* __restrict__ x,
                                                const T* __restrict__ other, const float* __restrict__ bias,
                                                PaddedShape s) {
  const int64_t per_position = s.channels / kVec;
  const int64_t vectors = s.batch * s.frames * s.height * s.width * per_position;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += stride) {
    int64_t p = i / per_position;
    const int64_t c0 = (i - p * per_position) * kVec;
    const int64_t w = p % s.width;
    p /= s.width;
    const int64_t h = p % s.height;
    p /= s.height;
    const int64_t t = p % s.frames;
    const int64_t b = p / s.frames;
    const int64_t padded_position =
        ((b * (s.frames + s.time) + t + s.time) * (s.height + 2 * s.space) + h + s.space) *
            (s.width + 2 * s.space) +
        w + s.space;
    float a[kVec], o[kVec];
    load_vec<T, kVec>(x + i * kVec, a);
    load_vec<T, kVec>(other + i * kVec, o);
    for (int k = 0; k < kVec; ++k) a[k] = a[k] + o[k] + bias[c0 + k];  // as add_residual_bias_kernel
    store_vec<T, kVec>(out + padded_position * s.channels + c0, a);
  }
}

template <typename T>
cudaError_t launch_padded(T* out, const T* x, const T* other, const float* bias, const PaddedShape& shape,
                          cudaStream_t stream) {
  // Widths are powers of two and a width that fits fits halved: the smaller of the two fits all three.
  const int vec = std::min(vector_width(shape.channels, sizeof(T), out, x),
                           vector_width(shape.channels, sizeof(T), other, other));
  const int64_t vectors = shape.batch * shape.frames * shape.height * shape.width * (shape.channels / vec);
  int64_t blocks = (vectors + kThreads - 1) / kThreads;
  if (blocks > 65536) blocks = 65536;  // grid-stride beyond
  const dim3 grid(static_cast<unsigned>(blocks));
  if (vec == 8)
    add_residual_bias_padded_kernel<T, 8><<<grid, kThreads, 0, stream>>>(out, x, other, bias, shape);
  if (vec == 4)
    add_residual_bias_padded_kernel<T, 4><<<grid, kThreads, 0, stream>>>(out, x, other, bias, shape);
  if (vec == 2)
    add_residual_bias_padded_kernel<T, 2><<<grid, kThreads, 0, stream>>>(out, x, other, bias, shape);
  if (vec == 1)
    add_residual_bias_padded_kernel<T, 1><<<grid, kThreads, 0, stream>>>(out, x, other, bias, shape);
  return cudaGetLastError();
}

}  // namespace

cudaError_t add_residual_bias_padded(void* out, const void* x, const void* other, const float* bias,
                                     const PaddedShape& shape, bool bf16, cudaStream_t stream) {
  if (shape.batch * shape.frames * shape.height * shape.width == 0) return cudaSuccess;
  if (shape.channels <= 0 || shape.time < 0 || shape.space < 0) return cudaErrorInvalidValue;
  if (bf16)
    return launch_padded(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(x),
                         static_cast<const __nv_bfloat16*>(other), bias, shape, stream);
  return launch_padded(static_cast<float*>(out), static_cast<const float*>(x),
                       static_cast<const float*>(other), bias, shape, stream);
}

cudaError_t add_residual_bias(void* out, const void* other, const float* bias, int64_t count,
                              int64_t channels, bool bf16, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  if (channels <= 0 || count % channels != 0) return cudaErrorInvalidValue;
  if (bf16)
    return launch(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(other), bias, count,
                  channels, stream);
  return launch(static_cast<float*>(out), static_cast<const float*>(other), bias, count, channels, stream);
}

}  // namespace tt::kernels
