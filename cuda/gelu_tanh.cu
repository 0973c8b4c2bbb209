// GELU, tanh approximation, forward and backward, elementwise in fp32 math with the operation
// order of PyTorch's CUDA GeluKernel (tanh), so results round alike. Its input in the single
// blocks is a column slice of linear1's output: the kernels read rows with a stride instead of
// copying the slice. Autograd's gelu already keeps only x for backward, so this saves no
// activation; a GELU "epilogue" inside the GEMM (cuBLASLt) would save the (B, N, mlp) round trip
// but is out of scope here. Vector loads and stores where the row, x's stride and the pointers
// allow (16 bytes), else narrower down to one element.
#include "cuda/gelu_tanh.cuh"
#include "cuda/scalar_io.cuh"
#include "cuda/vector_width.h"

#include <algorithm>

namespace tt::kernels {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65536;         // grid-stride beyond
constexpr float kBeta = 0.7978845608028654f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

__device__ float gelu_tanh_of(float x) {
  const float x_cube = x * x * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  return 0.5f * x * (1.0f + tanhf(inner));
}

__device__ float gelu_tanh_grad_of(float grad, float x) {
  const float x_sq = x * x;
  const float x_cube = x_sq * x;
  const float inner = kBeta * (x + kKappa * x_cube);
  const float tanh_inner = tanhf(inner);
  const float left = 0.5f * x;
  const float right = 1.0f + tanh_inner;
  const float left_derivative = 0.5f * right;
  const float tanh_derivative = 1.0f - tanh_inner * tanh_inner;
  const float inner_derivative = kBeta * (1.0f + 3.0f * kKappa * x_sq);
  const float right_derivative = left * tanh_derivative * inner_derivative;
  return grad * (left_derivative + right_derivative);
}

// f(i, r, c) for every vector i of kVec consecutive elements of a (rows, cols) matrix, r its row and
// c its first column; a grid-stride loop over the vectors.
template <int kVec, typename F>
__device__ void for_each_vector(int64_t rows, int64_t cols, F f) {
  const int64_t per_row = cols / kVec;
  const int64_t vectors = rows * per_row;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < vectors; i += step) {
    const int64_t r = i / per_row;
    f(i, r, (i - r * per_row) * kVec);
  }
}

}  // namespace

// y (rows, cols) <- x rows of stride x_stride, kVec consecutive elements of a row per thread and step
// (one 16-byte load and store for bf16 x 8 or fp32 x 4).
template <typename T, int kVec>
static __global__ void gelu_tanh_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t rows,
                                        int64_t cols, int64_t x_stride) {
  for_each_vector<kVec>(rows, cols, [&](int64_t i, int64_t r, int64_t c) {
    float v[kVec];
    load_vec<T, kVec>(x + r * x_stride + c, v);
    for (int k = 0; k < kVec; ++k) v[k] = gelu_tanh_of(v[k]);
    store_vec<T, kVec>(y + i * kVec, v);
  });
}

// dx rows of stride d_stride <- grad rows of stride g_stride, x rows of stride x_stride; with kValue
// also y (rows, cols) dense <- gelu(x) from the same load of x. Vectors as gelu_tanh_kernel.
template <typename T, int kVec, bool kValue>
static __global__ void gelu_tanh_backward_kernel(T* __restrict__ dx, T* __restrict__ y,
                                                 const T* __restrict__ grad, const T* __restrict__ x,
                                                 int64_t rows, int64_t cols, int64_t d_stride,
                                                 int64_t g_stride, int64_t x_stride) {
  for_each_vector<kVec>(rows, cols, [&](int64_t i, int64_t r, int64_t c) {
    float g[kVec], v[kVec];
    load_vec<T, kVec>(grad + r * g_stride + c, g);
    load_vec<T, kVec>(x + r * x_stride + c, v);
    if constexpr (kValue) {
      float h[kVec];
      for (int k = 0; k < kVec; ++k) h[k] = gelu_tanh_of(v[k]);
      store_vec<T, kVec>(y + i * kVec, h);
    }
    for (int k = 0; k < kVec; ++k) v[k] = gelu_tanh_grad_of(g[k], v[k]);
    store_vec<T, kVec>(dx + r * d_stride + c, v);
  });
}

namespace {

// The widest vector every operand allows: it divides the row and the row strides, and keeps each
// pointer aligned (halving a width that fits keeps it fitting).
int width_of(int64_t cols, int64_t stride_a, int64_t stride_b, int element_size, const void* a, const void* b,
             const void* x) {
  int vec = std::min(vector_width(cols, element_size, a, b), vector_width(cols, element_size, x, x));
  while (vec > 1 && (stride_a % vec != 0 || stride_b % vec != 0)) vec /= 2;
  return vec;
}

dim3 grid_of(int64_t rows, int64_t cols, int vec) {
  const int64_t blocks = ceil_div(rows * (cols / vec), kThreads);
  return dim3(static_cast<unsigned>(blocks < kMaxBlocks ? blocks : kMaxBlocks));
}

template <typename T>
void launch_forward(T* y, const T* x, int64_t rows, int64_t cols, int64_t x_stride, cudaStream_t stream) {
  const int vec = width_of(cols, x_stride, x_stride, sizeof(T), y, y, x);
  const dim3 grid = grid_of(rows, cols, vec);
  if constexpr (sizeof(T) == 2) {
    if (vec == 8) return gelu_tanh_kernel<T, 8><<<grid, kThreads, 0, stream>>>(y, x, rows, cols, x_stride);
  }
  if (vec >= 4) return gelu_tanh_kernel<T, 4><<<grid, kThreads, 0, stream>>>(y, x, rows, cols, x_stride);
  if (vec == 2) return gelu_tanh_kernel<T, 2><<<grid, kThreads, 0, stream>>>(y, x, rows, cols, x_stride);
  gelu_tanh_kernel<T, 1><<<grid, kThreads, 0, stream>>>(y, x, rows, cols, x_stride);
}

template <typename T, bool kValue>
void launch_backward(T* dx, T* y, const T* grad, const T* x, int64_t rows, int64_t cols, int64_t d_stride,
                     int64_t g_stride, int64_t x_stride, cudaStream_t stream) {
  int vec = width_of(cols, g_stride, x_stride, sizeof(T), dx, grad, x);
  if (kValue) vec = std::min(vec, width_of(cols, cols, cols, sizeof(T), y, y, y));
  while (vec > 1 && d_stride % vec != 0) vec /= 2;
  const dim3 grid = grid_of(rows, cols, vec);
  if constexpr (sizeof(T) == 2) {
    if (vec == 8)
      return gelu_tanh_backward_kernel<T, 8, kValue>
          <<<grid, kThreads, 0, stream>>>(dx, y, grad, x, rows, cols, d_stride, g_stride, x_stride);
  }
  if (vec >= 4)
    return gelu_tanh_backward_kernel<T, 4, kValue>
        <<<grid, kThreads, 0, stream>>>(dx, y, grad, x, rows, cols, d_stride, g_stride, x_stride);
  if (vec == 2)
    return gelu_tanh_backward_kernel<T, 2, kValue>
        <<<grid, kThreads, 0, stream>>>(dx, y, grad, x, rows, cols, d_stride, g_stride, x_stride);
  gelu_tanh_backward_kernel<T, 1, kValue>
      <<<grid, kThreads, 0, stream>>>(dx, y, grad, x, rows, cols, d_stride, g_stride, x_stride);
}

template <typename T>
void launch_backward(T* dx, T* y, const T* grad, const T* x, int64_t rows, int64_t cols, int64_t d_stride,
                     int64_t g_stride, int64_t x_stride, cudaStream_t stream) {
  if (y != nullptr) {
    launch_backward<T, true>(dx, y, grad, x, rows, cols, d_stride, g_stride, x_stride, stream);
  } else {
    launch_backward<T, false>(dx, y, grad, x, rows, cols, d_stride, g_stride, x_stride, stream);
  }
}

}  // namespace

cudaError_t gelu_tanh_forward(void* y, const void* x, int64_t rows, int64_t cols, int64_t x_row_stride,
                              bool bf16, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  if (bf16) {
    launch_forward(static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(x), rows, cols,
                   x_row_stride, stream);
  } else {
    launch_forward(static_cast<float*>(y), static_cast<const float*>(x), rows, cols, x_row_stride, stream);
  }
  return cudaGetLastError();
}

cudaError_t gelu_tanh_backward(void* dx, void* y, const void* grad, const void* x, int64_t rows, int64_t cols,
                               int64_t dx_row_stride, int64_t grad_row_stride, int64_t x_row_stride,
                               bool bf16, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  if (bf16) {
    launch_backward(static_cast<__nv_bfloat16*>(dx), static_cast<__nv_bfloat16*>(y),
                    static_cast<const __nv_bfloat16*>(grad), static_cast<const __nv_bfloat16*>(x), rows, cols,
                    dx_row_stride, grad_row_stride, x_row_stride, stream);
  } else {
    launch_backward(static_cast<float*>(dx), static_cast<float*>(y), static_cast<const float*>(grad),
                    static_cast<const float*>(x), rows, cols, dx_row_stride, grad_row_stride, x_row_stride,
                    stream);
  }
  return cudaGetLastError();
}

}  // namespace tt::kernels
