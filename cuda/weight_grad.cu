// A Linear's weight gradient with the bias gradient in the GEMM's epilogue (cuBLASLt BGRADB). In
// cuBLASLt's column-major terms the row-major (out, in) result is D = X G^T of shape (in, out): A is
// x viewed as (in, tokens), B is grad viewed as (out, tokens) and transposed, and the bias gradient
// is B's reduction over the GEMM's k (the tokens), one value per column of D.
#include "cuda/weight_grad.cuh"

namespace tt::kernels {
namespace {

// The largest power of two up to 16 bytes that the address is a multiple of (cuBLASLt picks its
// kernels by the operands' alignment; its default assumes 256 bytes).
uint32_t alignment_of(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  uint32_t alignment = 16;
  while (alignment > 1 && address % alignment != 0) alignment /= 2;
  return alignment;
}

// The row stride's part of the alignment: every row must start as aligned as the first.
uint32_t alignment_of(const void* p, int64_t ld, int element_size) {
  uint32_t alignment = alignment_of(p);
  while (alignment > static_cast<uint32_t>(element_size) &&
         (ld * element_size) % static_cast<int64_t>(alignment) != 0)
    alignment /= 2;
  return alignment;
}

// Owns the descriptors of one call.
struct Descriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, d = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~Descriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (d) cublasLtMatrixLayoutDestroy(d);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

cublasStatus_t weight_bias_grad(const LtContext& lt, const void* grad, int64_t grad_ld, const void* x,
                                int64_t x_ld, int64_t tokens, int64_t out, int64_t in, bool bf16,
                                float* weight_grad, int64_t weight_grad_ld, float* bias_grad) {
  if (tokens <= 0 || out <= 0 || in <= 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  const cudaDataType_t half = bf16 ? CUDA_R_16BF : CUDA_R_16F;
  Descriptors desc;
#define TT_LT(call)                                       \
  do {                                                    \
    const cublasStatus_t status_ = (call);                \
    if (status_ != CUBLAS_STATUS_SUCCESS) return status_; \
  } while (0)
  TT_LT(cublasLtMatmulDescCreate(&desc.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const cublasOperation_t no = CUBLAS_OP_N, transposed = CUBLAS_OP_T;
  TT_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSA, &no, sizeof(no)));
  TT_LT(
      cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_TRANSB, &transposed, sizeof(transposed)));
  if (bias_grad != nullptr) {
    const cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_BGRADB;
    const cudaDataType_t bias_type = CUDA_R_32F;
    TT_LT(
        cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
    TT_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias_grad,
                                         sizeof(bias_grad)));
    TT_LT(cublasLtMatmulDescSetAttribute(desc.op, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type,
                                         sizeof(bias_type)));
  }
  TT_LT(cublasLtMatrixLayoutCreate(&desc.a, half, static_cast<uint64_t>(in), static_cast<uint64_t>(tokens),
                                   x_ld));
  TT_LT(cublasLtMatrixLayoutCreate(&desc.b, half, static_cast<uint64_t>(out), static_cast<uint64_t>(tokens),
                                   grad_ld));
  TT_LT(cublasLtMatrixLayoutCreate(&desc.d, CUDA_R_32F, static_cast<uint64_t>(in), static_cast<uint64_t>(out),
                                   weight_grad_ld));
  TT_LT(cublasLtMatmulPreferenceCreate(&desc.preference));
  const uint64_t workspace = lt.workspace_bytes;
  TT_LT(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                             &workspace, sizeof(workspace)));
  const uint32_t align_a = alignment_of(x, x_ld, 2), align_b = alignment_of(grad, grad_ld, 2);
  const uint32_t align_d = alignment_of(weight_grad, weight_grad_ld, 4);
  TT_LT(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &align_a, sizeof(align_a)));
  TT_LT(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &align_b, sizeof(align_b)));
  TT_LT(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &align_d, sizeof(align_d)));
  TT_LT(cublasLtMatmulPreferenceSetAttribute(desc.preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &align_d, sizeof(align_d)));
  cublasLtMatmulHeuristicResult_t heuristic = {};
  int found = 0;
  const cublasStatus_t searched = cublasLtMatmulAlgoGetHeuristic(
      lt.handle, desc.op, desc.a, desc.b, desc.d, desc.d, desc.preference, 1, &heuristic, &found);
  if (searched != CUBLAS_STATUS_SUCCESS || found == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
  const float one = 1.0f, zero = 0.0f;
  TT_LT(cublasLtMatmul(lt.handle, desc.op, &one, x, desc.a, grad, desc.b, &zero, weight_grad, desc.d,
                       weight_grad, desc.d, &heuristic.algo, lt.workspace, lt.workspace_bytes, lt.stream));
#undef TT_LT
  return CUBLAS_STATUS_SUCCESS;
}

}  // namespace tt::kernels
