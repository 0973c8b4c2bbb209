// QK RMSNorm + rotary embedding in one pass, and its backward, for q or k (B, H, N, D).
//
// One warp per (b, h, n) row; lane l holds the pairs j = l, l + 32, ... (at most 4: D <= 256) in
// registers. Forward: sum of squares by warp shuffle, rstd = rsqrt(mean + eps), x̂w = x * rstd *
// weight rounded to x's dtype (the unfused model stores RMSNorm's output in x's dtype before RoPE
// reads it), then for rows n < rope_tokens each pair (a, b) becomes (a cos - b sin, b cos + a sin),
// diffusers' interleaved-pair RoPE as model/rope.cpp's apply_rope computes it. Only x (a view, no
// copy) and rstd (B, H, N) fp32 are kept for backward; the unfused path keeps RMSNorm's input and
// statistics and, in the single blocks, a concatenation of rotated and plain tokens.
// Backward: the pair rotation transposed (g_a = g0 cos + g1 sin, g_b = g1 cos - g0 sin), then
// RMSNorm's dx = rstd * (gw - x̂ * mean(gw * x̂)) with gw = g * weight, and per-lane fp32 sums of
// g * x̂ for dweight, merged per block in shared memory into one partial row per block; a second
// kernel adds the partials in a fixed order, one CUDA block per column (deterministic, no atomics). The
// rounding between norm and rotation is treated as the identity in backward, as autograd treats the cast.
// Scalar loads. out and dx are written token-major by the entry (cuda/ops.cpp), the layout of the
// QKV projection's views and of ATen's unfused ops, which cuDNN's attention is faster with.
#include "cuda/rms_norm_rope.cuh"
#include "cuda/scalar_io.cuh"

namespace tt::kernels {
namespace {

constexpr int kWarps = 8;  // rows in flight per block
constexpr int kThreads = kWarps * 32;
constexpr int kMaxPairsPerLane = static_cast<int>(kRmsNormRopeMaxDim / 64);
constexpr int64_t kMaxBlocks = 1024;  // backward: partial rows of dweight, at most

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

__host__ __device__ int64_t row_count(const RmsNormRopeShape& s) {
  return s.batch * s.heads * s.tokens;
}

int64_t block_count(const RmsNormRopeShape& s) {
  const int64_t needed = ceil_div(row_count(s), kWarps);
  return needed < kMaxBlocks ? needed : kMaxBlocks;
}

// Offset of row (b, h, n) = row, with row = (b * H + h) * N + n, in a tensor of those strides.
__device__ int64_t row_offset(const RmsNormRopeShape& s, const RowStrides& strides, int64_t row) {
  const int64_t n = row % s.tokens;
  const int64_t bh = row / s.tokens;
  const int64_t h = bh % s.heads;
  const int64_t b = bh / s.heads;
  return b * strides.batch + h * strides.heads + n * strides.tokens;
}

__device__ int64_t x_offset(const RmsNormRopeShape& s, int64_t row) {
  return row_offset(s, RowStrides{s.stride_batch, s.stride_heads, s.stride_tokens}, row);
}

}  // namespace

// out (rows, D), rstd (rows) <- x rows; grid-stride over rows, one warp each; block kThreads.
template <typename T>
static __global__ void __launch_bounds__(kThreads)
    rms_norm_rope_kernel(T* __restrict__ out, float* __restrict__ rstd_out, const T* __restrict__ x,
                         const float* __restrict__ weight, const float* __restrict__ rope,
                         RmsNormRopeShape s) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t rows = row_count(s);
  const int pairs = static_cast<int>(s.dim / 2);
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const T* xr = x + x_offset(s, row);
    float v0[kMaxPairsPerLane], v1[kMaxPairsPerLane];
    float sum_sq = 0.0f;
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      const int j = lane + 32 * k;
      v0[k] = j < pairs ? load_float(xr + 2 * j) : 0.0f;
      v1[k] = j < pairs ? load_float(xr + 2 * j + 1) : 0.0f;
      sum_sq += v0[k] * v0[k] + v1[k] * v1[k];
    }
    sum_sq = warp_sum(sum_sq);
    const float r = rsqrtf(sum_sq / static_cast<float>(s.dim) + s.eps);
    if (lane == 0) rstd_out[row] = r;
    const int64_t n = row % s.tokens;
    const bool rotate = n < s.rope_tokens;
    T* o = out + row_offset(s, s.out, row);
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j >= pairs) break;
      float a = round_to(o, v0[k] * r * weight[2 * j]);
      float b = round_to(o, v1[k] * r * weight[2 * j + 1]);
      if (rotate) {
        const float c = rope[(n * pairs + j) * 2], sn = rope[(n * pairs + j) * 2 + 1];
        const float ra = a * c - b * sn;
        const float rb = b * c + a * sn;
        a = ra;
        b = rb;
      }
      store_float(o + 2 * j, a);
      store_float(o + 2 * j + 1, b);
    }
  }
}

// dx (rows, D), partials (gridDim.x, D) <- grad (rows, D), x rows, rstd (rows); block kThreads.
template <typename T>
static __global__ void __launch_bounds__(kThreads)
    rms_norm_rope_backward_kernel(T* __restrict__ dx, float* __restrict__ partials,
                                  const T* __restrict__ grad, const T* __restrict__ x,
                                  const float* __restrict__ rstd, const float* __restrict__ weight,
                                  const float* __restrict__ rope, RmsNormRopeShape s) {
  __shared__ float warp_sums[kWarps][kRmsNormRopeMaxDim];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int64_t rows = row_count(s);
  const int pairs = static_cast<int>(s.dim / 2);
  float dw0[kMaxPairsPerLane] = {}, dw1[kMaxPairsPerLane] = {};  // sum over rows of g * x̂
  for (int64_t row = static_cast<int64_t>(blockIdx.x) * kWarps + warp; row < rows;
       row += static_cast<int64_t>(gridDim.x) * kWarps) {
    const T* xr = x + x_offset(s, row);
    const T* gr = grad + row_offset(s, s.grad, row);
    const float r = rstd[row];
    const int64_t n = row % s.tokens;
    const bool rotate = n < s.rope_tokens;
    float xh0[kMaxPairsPerLane], xh1[kMaxPairsPerLane], gw0[kMaxPairsPerLane], gw1[kMaxPairsPerLane];
    float dot = 0.0f;  // sum over D of gw * x̂
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      const int j = lane + 32 * k;
      xh0[k] = xh1[k] = gw0[k] = gw1[k] = 0.0f;
      if (j >= pairs) continue;
      float g0 = load_float(gr + 2 * j), g1 = load_float(gr + 2 * j + 1);
      if (rotate) {
        const float c = rope[(n * pairs + j) * 2], sn = rope[(n * pairs + j) * 2 + 1];
        const float ga = g0 * c + g1 * sn;
        const float gb = g1 * c - g0 * sn;
        g0 = ga;
        g1 = gb;
      }
      xh0[k] = load_float(xr + 2 * j) * r;
      xh1[k] = load_float(xr + 2 * j + 1) * r;
      dw0[k] += g0 * xh0[k];
      dw1[k] += g1 * xh1[k];
      gw0[k] = g0 * weight[2 * j];
      gw1[k] = g1 * weight[2 * j + 1];
      dot += gw0[k] * xh0[k] + gw1[k] * xh1[k];
    }
    const float mean_dot = warp_sum(dot) / static_cast<float>(s.dim);
    T* d = dx + row_offset(s, s.out, row);
    for (int k = 0; k < kMaxPairsPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j >= pairs) break;
      store_float(d + 2 * j, r * (gw0[k] - xh0[k] * mean_dot));
      store_float(d + 2 * j + 1, r * (gw1[k] - xh1[k] * mean_dot));
    }
  }
  for (int k = 0; k < kMaxPairsPerLane; ++k) {
    const int j = lane + 32 * k;
    if (j < pairs) {
      warp_sums[warp][2 * j] = dw0[k];
      warp_sums[warp][2 * j + 1] = dw1[k];
    }
  }
  __syncthreads();
  for (int64_t i = threadIdx.x; i < s.dim; i += kThreads) {
    float total = 0.0f;
    for (int w = 0; w < kWarps; ++w) total += warp_sums[w][i];
    partials[blockIdx.x * s.dim + i] = total;
  }
}

// dweight (D) <- partials (blocks, D): one CUDA block per column; thread t adds the partial rows
// t, t + kThreads, ... in order, then a shared-memory tree adds the threads' sums (a fixed order:
// deterministic). One thread per column looping over up to 1,024 rows took 66 us a call on the H100.
static __global__ void __launch_bounds__(kThreads)
    rms_norm_rope_weight_kernel(float* __restrict__ dweight, const float* __restrict__ partials,
                                int64_t blocks, int64_t dim) {
  __shared__ float sums[kThreads];
  const int64_t i = blockIdx.x;
  float total = 0.0f;
  for (int64_t b = threadIdx.x; b < blocks; b += kThreads) total += partials[b * dim + i];
  sums[threadIdx.x] = total;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (threadIdx.x < half) sums[threadIdx.x] += sums[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) dweight[i] = sums[0];
}

namespace {

bool valid(const RmsNormRopeShape& s, const float* rope) {
  return s.dim > 0 && s.dim % 2 == 0 && s.dim <= kRmsNormRopeMaxDim && s.rope_tokens >= 0 &&
         s.rope_tokens <= s.tokens && (s.rope_tokens == 0 || rope != nullptr);
}

}  // namespace

cudaError_t rms_norm_rope_forward(void* out, float* rstd, const void* x, const float* weight,
                                  const float* rope, const RmsNormRopeShape& shape, cudaStream_t stream) {
  if (!valid(shape, rope)) return cudaErrorInvalidValue;
  if (row_count(shape) == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(
      ceil_div(row_count(shape), kWarps) < 65535 ? ceil_div(row_count(shape), kWarps) : 65535);
  if (shape.bf16) {
    rms_norm_rope_kernel<__nv_bfloat16><<<blocks, kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(out), rstd, static_cast<const __nv_bfloat16*>(x), weight, rope, shape);
  } else {
    rms_norm_rope_kernel<float><<<blocks, kThreads, 0, stream>>>(
        static_cast<float*>(out), rstd, static_cast<const float*>(x), weight, rope, shape);
  }
  return cudaGetLastError();
}

int64_t rms_norm_rope_scratch_size(const RmsNormRopeShape& shape) {
  return block_count(shape) * shape.dim;
}

cudaError_t rms_norm_rope_backward(void* dx, float* dweight, const void* grad, const void* x,
                                   const float* rstd, const float* weight, const float* rope, float* scratch,
                                   const RmsNormRopeShape& shape, cudaStream_t stream) {
  if (!valid(shape, rope)) return cudaErrorInvalidValue;
  const int64_t blocks = block_count(shape);
  if (blocks > 0) {
    if (shape.bf16) {
      rms_norm_rope_backward_kernel<__nv_bfloat16><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          static_cast<__nv_bfloat16*>(dx), scratch, static_cast<const __nv_bfloat16*>(grad),
          static_cast<const __nv_bfloat16*>(x), rstd, weight, rope, shape);
    } else {
      rms_norm_rope_backward_kernel<float><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          static_cast<float*>(dx), scratch, static_cast<const float*>(grad), static_cast<const float*>(x),
          rstd, weight, rope, shape);
    }
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  rms_norm_rope_weight_kernel<<<static_cast<unsigned>(shape.dim), kThreads, 0, stream>>>(dweight, scratch,
                                                                                         blocks, shape.dim);
  return cudaGetLastError();
}

}  // namespace tt::kernels
