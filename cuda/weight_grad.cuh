// A Linear's weight and bias gradients by one cuBLASLt GEMM (no torch here; see cuda/ops.h for the
// entry): the bias's column sums come from the GEMM's epilogue instead of a separate pass over the
// output's gradient.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

namespace tt::kernels {

/// Where cuBLASLt runs the GEMM: the handle, a workspace of `workspace_bytes` and the stream.
struct LtContext {
  cublasLtHandle_t handle = nullptr;
  void* workspace = nullptr;
  size_t workspace_bytes = 0;
  cudaStream_t stream = nullptr;
};

/// Row-major operands: grad (tokens, out) rows `grad_ld` apart, x (tokens, in) rows `x_ld` apart, both
/// bf16 (`bf16`) or fp16, unit column stride. Writes weight_grad = grad^T x (out, in) fp32, rows
/// `weight_grad_ld` apart, and, when bias_grad is not null, bias_grad = the column sums of grad (out)
/// fp32, with fp32 accumulation. Returns CUBLAS_STATUS_SUCCESS, CUBLAS_STATUS_NOT_SUPPORTED where
/// cuBLASLt has no kernel for it (nothing written; the caller runs its own), or the failing call's
/// status.
cublasStatus_t weight_bias_grad(const LtContext& lt, const void* grad, int64_t grad_ld, const void* x,
                                int64_t x_ld, int64_t tokens, int64_t out, int64_t in, bool bf16,
                                float* weight_grad, int64_t weight_grad_ld, float* bias_grad);

}  // namespace tt::kernels
