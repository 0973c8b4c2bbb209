// GELU, tanh approximation, forward and backward, elementwise in fp32 math with the operation
// order of PyTorch's CUDA GeluKernel (tanh), so results round alike. Its input in the single
// blocks is a column slice of linear1's output: the kernels read rows with a stride instead of
// copying the slice. Autograd's gelu already keeps only x for backward, so this saves no
// activation; a GELU "epilogue" inside the GEMM (cuBLASLt) would save the (B, N, mlp) round trip
// but is out of scope here. Scalar loads; the speed has not been measured.
#include "cuda/gelu_tanh.cuh"
#include "cuda/scalar_io.cuh"

namespace tt::kernels {
namespace {

constexpr int kThreads = 256;
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

}  // namespace

// y (rows, cols) <- x rows of stride x_stride; grid (ceil(cols / kThreads), min(rows, 65535)).
template <typename T>
static __global__ void gelu_tanh_kernel(T* __restrict__ y, const T* __restrict__ x, int64_t rows,
                                        int64_t cols, int64_t x_stride) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    store_float(y + r * cols + c, gelu_tanh_of(load_float(x + r * x_stride + c)));
  }
}

// dx (rows, cols) <- grad (rows, cols), x rows of stride x_stride; grid as gelu_tanh_kernel.
template <typename T>
static __global__ void gelu_tanh_backward_kernel(T* __restrict__ dx, const T* __restrict__ grad,
                                                 const T* __restrict__ x, int64_t rows, int64_t cols,
                                                 int64_t x_stride) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= cols) return;
  for (int64_t r = blockIdx.y; r < rows; r += gridDim.y) {
    const int64_t i = r * cols + c;
    store_float(dx + i, gelu_tanh_grad_of(load_float(grad + i), load_float(x + r * x_stride + c)));
  }
}

namespace {

dim3 grid_of(int64_t rows, int64_t cols) {
  return dim3(static_cast<unsigned>(ceil_div(cols, kThreads)),
              static_cast<unsigned>(rows < 65535 ? rows : 65535));
}

}  // namespace

cudaError_t gelu_tanh_forward(void* y, const void* x, int64_t rows, int64_t cols, int64_t x_row_stride,
                              bool bf16, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  const dim3 grid = grid_of(rows, cols);
  if (bf16) {
    gelu_tanh_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(x), rows, cols, x_row_stride);
  } else {
    gelu_tanh_kernel<float><<<grid, kThreads, 0, stream>>>(
        static_cast<float*>(y), static_cast<const float*>(x), rows, cols, x_row_stride);
  }
  return cudaGetLastError();
}

cudaError_t gelu_tanh_backward(void* dx, const void* grad, const void* x, int64_t rows, int64_t cols,
                               int64_t x_row_stride, bool bf16, cudaStream_t stream) {
  if (rows * cols == 0) return cudaSuccess;
  const dim3 grid = grid_of(rows, cols);
  if (bf16) {
    gelu_tanh_backward_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(dx), static_cast<const __nv_bfloat16*>(grad),
        static_cast<const __nv_bfloat16*>(x), rows, cols, x_row_stride);
  } else {
    gelu_tanh_backward_kernel<float>
        <<<grid, kThreads, 0, stream>>>(static_cast<float*>(dx), static_cast<const float*>(grad),
                                        static_cast<const float*>(x), rows, cols, x_row_stride);
  }
  return cudaGetLastError();
}

}  // namespace tt::kernels
