// Launchers of the GELU (tanh approximation) kernels (no torch here; see cuda/ops.h for the entry
// and cuda/gelu_tanh.cu for the formulas).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// y = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))) in fp32 math. x: `rows` rows of `cols`
/// elements, row r starting at x + r * x_row_stride (a column slice of a wider matrix reads in
/// place); y: (rows, cols) dense. Both bf16 (`bf16`) or both fp32. Returns the launch status.
cudaError_t gelu_tanh_forward(void* y, const void* x, int64_t rows, int64_t cols, int64_t x_row_stride,
                              bool bf16, cudaStream_t stream);

/// dx = grad * gelu_tanh'(x), the derivative as PyTorch's GeluBackward (tanh) writes it. dx, grad
/// and x strided by rows as x in gelu_tanh_forward (column slices of wider matrices are read and
/// written in place); one dtype. y, when not null: gelu_tanh(x) as gelu_tanh_forward writes it,
/// (rows, cols) dense, from the same read of x.
cudaError_t gelu_tanh_backward(void* dx, void* y, const void* grad, const void* x, int64_t rows, int64_t cols,
                               int64_t dx_row_stride, int64_t grad_row_stride, int64_t x_row_stride,
                               bool bf16, cudaStream_t stream);

}  // namespace tt::kernels
