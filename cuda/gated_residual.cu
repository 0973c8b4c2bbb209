// Gated residual of the Transformer blocks, out = x + gate.unsqueeze(1) * y, and its backward.
//
// Forward: one pass, block threads across channels, blocks across (b, n) rows, so the gate element
// is read per channel without a division per element.
// Backward: dx = grad (no kernel), dy = grad * gate, dgate = sum_n grad * y. One pass reads grad and
// y once, writes dy and, per block of 32 channels x kChunk tokens, one fp32 partial of dgate per
// channel; a second small kernel adds a (b, c)'s partials in chunk order. No atomics: the result
// does not depend on scheduling. Autograd's addcmul keeps the same two tensors (y and gate) for
// backward, so the saving here is the (B, N, C) grad * y temporary and its separate reduction, not
// a saved activation. Scalar loads (no vectors); the speed has not been measured.
#include "cuda/gated_residual.cuh"
#include "cuda/row_chunks.h"
#include "cuda/scalar_io.cuh"

namespace tt::kernels {
namespace {

constexpr int kThreads = 256;    // forward: channels per block
constexpr int kColumns = 32;     // backward: channels per block (threadIdx.x)
constexpr int kLanes = 8;        // backward: token lanes per block (threadIdx.y)
constexpr int64_t kChunk = 128;  // backward: tokens per block, before kMaxChunks caps it
constexpr int64_t kMaxChunks = 65535;

// Tokens per backward block: kChunk, more when that would need over kMaxChunks blocks along N.
int64_t chunk_tokens(int64_t tokens) {
  return chunk_rows(tokens, kChunk, kMaxChunks);
}

int64_t chunks_of(int64_t tokens) {
  return chunk_count(tokens, kChunk, kMaxChunks);
}

}  // namespace

// out, x, y (rows = B * N, C); gate (B, C); grid (ceil(C / kThreads), min(rows, 65535)).
template <typename T>
static __global__ void gated_residual_kernel(T* __restrict__ out, const T* __restrict__ x,
                                             const T* __restrict__ y, const T* __restrict__ gate,
                                             int64_t rows, int64_t tokens, int64_t channels) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  if (c >= channels) return;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const float g = load_float(gate + (row / tokens) * channels + c);
    const int64_t i = row * channels + c;
    store_float(out + i, load_float(x + i) + g * load_float(y + i));
  }
}

// dy (B, N, C) and partials (B, chunks, C) fp32; grid (ceil(C / kColumns), chunks, B),
// block (kColumns, kLanes).
template <typename T>
static __global__ void gated_residual_backward_kernel(T* __restrict__ dy, float* __restrict__ partials,
                                                      const T* __restrict__ grad, const T* __restrict__ y,
                                                      const T* __restrict__ gate, int64_t tokens,
                                                      int64_t channels, int64_t per_chunk) {
  __shared__ float sums[kLanes][kColumns + 1];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumns + threadIdx.x;
  const int64_t b = blockIdx.z;
  const int64_t begin = static_cast<int64_t>(blockIdx.y) * per_chunk;
  const int64_t end = begin + per_chunk < tokens ? begin + per_chunk : tokens;
  float acc = 0.0f;
  if (c < channels) {
    const float g8 = load_float(gate + b * channels + c);
    for (int64_t n = begin + threadIdx.y; n < end; n += kLanes) {
      const int64_t i = (b * tokens + n) * channels + c;
      const float g = load_float(grad + i);
      store_float(dy + i, g * g8);
      acc += g * load_float(y + i);
    }
  }
  sums[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y == 0 && c < channels) {
    float total = 0.0f;
    for (int lane = 0; lane < kLanes; ++lane) total += sums[lane][threadIdx.x];
    partials[(b * gridDim.y + blockIdx.y) * channels + c] = total;
  }
}

// dgate (B, C) <- partials (B, chunks, C), summed in chunk order; grid-stride over B * C.
template <typename T>
static __global__ void gated_residual_gate_kernel(T* __restrict__ dgate, const float* __restrict__ partials,
                                                  int64_t batch, int64_t chunks, int64_t channels) {
  const int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < batch * channels;
       i += stride) {
    const int64_t b = i / channels, c = i - b * channels;
    float total = 0.0f;
    for (int64_t k = 0; k < chunks; ++k) total += partials[(b * chunks + k) * channels + c];
    store_float(dgate + i, total);
  }
}

namespace {

template <typename T>
cudaError_t launch_forward(T* out, const T* x, const T* y, const T* gate, int64_t batch, int64_t tokens,
                           int64_t channels, cudaStream_t stream) {
  const int64_t rows = batch * tokens;
  const dim3 grid(static_cast<unsigned>(ceil_div(channels, kThreads)),
                  static_cast<unsigned>(rows < 65535 ? rows : 65535));
  gated_residual_kernel<T><<<grid, kThreads, 0, stream>>>(out, x, y, gate, rows, tokens, channels);
  return cudaGetLastError();
}

template <typename T>
cudaError_t launch_backward(T* dy, T* dgate, const T* grad, const T* y, const T* gate, float* scratch,
                            int64_t batch, int64_t tokens, int64_t channels, cudaStream_t stream) {
  const int64_t chunks = chunks_of(tokens);
  if (chunks > 0) {
    const dim3 grid(static_cast<unsigned>(ceil_div(channels, kColumns)), static_cast<unsigned>(chunks),
                    static_cast<unsigned>(batch));
    gated_residual_backward_kernel<T><<<grid, dim3(kColumns, kLanes), 0, stream>>>(
        dy, scratch, grad, y, gate, tokens, channels, chunk_tokens(tokens));
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  const int64_t blocks = ceil_div(batch * channels, kThreads);
  gated_residual_gate_kernel<T>
      <<<static_cast<unsigned>(blocks < 65535 ? blocks : 65535), kThreads, 0, stream>>>(dgate, scratch, batch,
                                                                                        chunks, channels);
  return cudaGetLastError();
}

}  // namespace

cudaError_t gated_residual_forward(void* out, const void* x, const void* y, const void* gate, int64_t batch,
                                   int64_t tokens, int64_t channels, bool bf16, cudaStream_t stream) {
  if (batch * tokens * channels == 0) return cudaSuccess;
  if (batch > 65535) return cudaErrorInvalidValue;
  if (bf16)
    return launch_forward(static_cast<__nv_bfloat16*>(out), static_cast<const __nv_bfloat16*>(x),
                          static_cast<const __nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(gate),
                          batch, tokens, channels, stream);
  return launch_forward(static_cast<float*>(out), static_cast<const float*>(x), static_cast<const float*>(y),
                        static_cast<const float*>(gate), batch, tokens, channels, stream);
}

int64_t gated_residual_scratch_size(int64_t batch, int64_t tokens, int64_t channels) {
  return batch * chunks_of(tokens) * channels;
}

cudaError_t gated_residual_backward(void* dy, void* dgate, const void* grad, const void* y, const void* gate,
                                    float* scratch, int64_t batch, int64_t tokens, int64_t channels,
                                    bool bf16, cudaStream_t stream) {
  if (batch * channels == 0) return cudaSuccess;
  if (batch > 65535) return cudaErrorInvalidValue;
  if (bf16)
    return launch_backward(static_cast<__nv_bfloat16*>(dy), static_cast<__nv_bfloat16*>(dgate),
                           static_cast<const __nv_bfloat16*>(grad), static_cast<const __nv_bfloat16*>(y),
                           static_cast<const __nv_bfloat16*>(gate), scratch, batch, tokens, channels, stream);
  return launch_backward(static_cast<float*>(dy), static_cast<float*>(dgate), static_cast<const float*>(grad),
                         static_cast<const float*>(y), static_cast<const float*>(gate), scratch, batch,
                         tokens, channels, stream);
}

}  // namespace tt::kernels
