// The VAE's first convolution (3 input channels -> 128, 3x3x3, causal replicate padding) as one
// GEMM: cuDNN's implicit-GEMM kernels run it at a few percent of the tensor cores' rate (K = 81 is
// far below their tile), while an explicit im2col matrix of K padded to a multiple of 8 (with a
// ones column carrying the bias) goes through cuBLAS at memory speed.
// One thread per 8 entries of a row (one 16-byte store for bf16), consecutive threads side by side.
#include "cuda/causal_im2col.h"

#include <cuda_bf16.h>

#include "cuda/scalar_io.cuh"

namespace tt::kernels {
namespace {

constexpr int kThreads = 128;
constexpr int kVec = 8;

__device__ int64_t clamp_index(int64_t i, int64_t size) {
  return i < 0 ? 0 : (i >= size ? size - 1 : i);
}

template <typename T>
__global__ void causal_im2col_kernel(T* __restrict__ cols, const T* __restrict__ x, Im2colShape s,
                                     int64_t first_row, int64_t rows) {
  // Thread i writes entries [8 * (i % chunks), +8) of row i / chunks: a warp's 16-byte stores land
  // side by side (a thread per row stored 176 bytes apart for 3 channels).
  const int64_t chunks = s.columns / kVec;
  const int64_t index = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (index >= rows * chunks) return;
  const int64_t local = index / chunks, k0 = (index - local * chunks) * kVec;
  int64_t r = first_row + local;
  const int64_t w = r % s.width;
  r /= s.width;
  const int64_t h = r % s.height;
  r /= s.height;
  const int64_t t = r % s.frames;
  const int64_t b = r / s.frames;
  const T* sample = x + b * s.stride[0];
  const int64_t taps = 27 * s.channels;
  float values[kVec];
  for (int j = 0; j < kVec; ++j) {
    const int64_t k = k0 + j;
    float v = 0.0f;
    if (k < taps) {
      const int64_t tap = k / s.channels, c = k - tap * s.channels;
      const int64_t dt = tap / 9, dh = (tap / 3) % 3, dw = tap % 3;
      const int64_t tt = clamp_index(t + dt - 2, s.frames), hh = clamp_index(h + dh - 1, s.height),
                    ww = clamp_index(w + dw - 1, s.width);
      v = load_float(sample + c * s.stride[1] + tt * s.stride[2] + hh * s.stride[3] + ww * s.stride[4]);
    } else if (k == taps) {
      v = 1.0f;
    }
    values[j] = v;
  }
  store_vec<T, kVec>(cols + local * s.columns + k0, values);
}

}  // namespace

cudaError_t causal_im2col(void* cols, const void* x, const Im2colShape& shape, int64_t first_row,
                          int64_t rows, bool bf16, cudaStream_t stream) {
  if (rows == 0) return cudaSuccess;
  if (shape.columns % kVec != 0 || shape.columns < 27 * shape.channels + 1 || rows < 0 || first_row < 0)
    return cudaErrorInvalidValue;
  const auto bytes = static_cast<uintptr_t>(kVec * (bf16 ? 2 : 4));
  if (reinterpret_cast<uintptr_t>(cols) % bytes != 0) return cudaErrorInvalidValue;
  const int64_t threads = rows * (shape.columns / kVec);
  const dim3 grid(static_cast<unsigned>((threads + kThreads - 1) / kThreads));
  if (bf16)
    causal_im2col_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(cols), static_cast<const __nv_bfloat16*>(x), shape, first_row, rows);
  else
    causal_im2col_kernel<float><<<grid, kThreads, 0, stream>>>(
        static_cast<float*>(cols), static_cast<const float*>(x), shape, first_row, rows);
  return cudaGetLastError();
}

}  // namespace tt::kernels
