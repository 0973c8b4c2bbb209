// Fused GroupNorm (+ SiLU) for the VAE: y = (x - mean[n,g]) * rstd[n,g] * w[c] + b[c], then
// y * sigmoid(y). x is (N, C, S) channels-first or (N, S, C) channels-last, bf16 or fp32.
//
// Three kernels, queued on the caller's stream, no host synchronisation:
// 1. Statistics. A group of one sample holds (C/G) * S values, 50M+ in the VAE, so many blocks
//    share a group. Each thread keeps a Welford triple (count, mean, M2) in fp32: it loads kVec
//    values at once (up to 16 bytes), takes their exact mean and M2 and merges them in with Chan's
//    formula (one division per vector). The block merges its threads' triples and writes one
//    partial per (n, g, block) into scratch.
//    - channels-first: a group is one contiguous span of (C/G) * S values; block b of group (n, g)
//      reads its b-th chunk (up to 64K values; less when that would leave under 1024 blocks).
//    - channels-last: a group's channels are a run of C/G values at every position, too short to
//      read alone, so a block reads whole rows of C values (coalesced) for a range of positions:
//      thread x owns channels [x * kVec, (x + 1) * kVec), inside one group, at every position;
//      the block then merges its triples group by group in shared memory.
// 2. Finalize. One block per (n, g) merges that group's partials in double (Chan again) and writes
//    {mean, rstd * w[c], b[c]} for each of its channels into an (N, C) table.
// 3. Apply. Reads x once more and writes y = (x - mean) * scale + shift (+ SiLU), kVec at a time:
//    channels-first gives a block a chunk of one (n, c) row, whose terms stay in registers;
//    channels-last gives thread x the same channel vector at every position.
// Optionally x arrives without a per-channel pre-bias (a convolution's bias left for the norm to
// add, channels-last only): the statistics add it to every value they read, and the finalize folds
// it into the table's mean, so the apply kernels read x unchanged.
// Channels-last output may be a padded buffer (the causal convolution's input): the apply kernel
// writes each value at its place inside and into every replicate pad it is the source of.
// Centring on the mean before scaling keeps inputs with a large mean exact; short fp32 Welford
// runs merged in double keep the variance of huge groups accurate.
#include "cuda/group_norm.h"

#include <cuda_bf16.h>

#include "cuda/scalar_io.cuh"
#include "cuda/vector_width.h"

#include <type_traits>

namespace tt::kernels {
namespace {

constexpr int kThreads = 256;                // per block (channels-last: about, see block_shape)
constexpr int64_t kStatsChunk = 65536;       // most values per channels-first statistics block
constexpr int64_t kStatsChunkLast = 262144;  // most values per channels-last statistics block
constexpr int64_t kMinStatsBlocks = 1024;    // smaller chunks below this many blocks (~8 per SM)
constexpr int64_t kApplyChunk = 16384;       // values per apply block

template <typename F>
struct Welford {
  F count, mean, m2;  // m2: sum of squared deviations from mean
};

struct ChannelAffine {
  float mean, scale, shift;  // y = (x - mean) * scale + shift
};

// Chan's parallel merge; either side may be empty (count 0, mean 0, m2 0).
template <typename F>
__device__ Welford<F> merge(const Welford<F>& a, const Welford<F>& b) {
  const F count = a.count + b.count;
  if (count == F(0)) return a;
  const F delta = b.mean - a.mean;
  const F share = b.count / count;
  return {count, a.mean + delta * share, a.m2 + b.m2 + delta * delta * a.count * share};
}

template <int kVec>
__device__ Welford<float> welford_of(const float (&v)[kVec]) {
  float sum = 0.0f;
  for (int k = 0; k < kVec; ++k) sum += v[k];
  const float mean = sum * (1.0f / kVec);
  float m2 = 0.0f;
  for (int k = 0; k < kVec; ++k) m2 += (v[k] - mean) * (v[k] - mean);
  return {float(kVec), mean, m2};
}

template <typename F>
__device__ Welford<F> warp_merge(Welford<F> w) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const Welford<F> other{__shfl_xor_sync(0xffffffffu, w.count, offset),
                           __shfl_xor_sync(0xffffffffu, w.mean, offset),
                           __shfl_xor_sync(0xffffffffu, w.m2, offset)};
    w = merge(w, other);
  }
  return w;
}

// The merge of every thread's triple, valid in thread 0; blockDim.x a multiple of 32.
template <typename F>
__device__ Welford<F> block_merge(Welford<F> w) {
  __shared__ Welford<F> warps[32];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  w = warp_merge(w);
  if (lane == 0) warps[warp] = w;
  __syncthreads();
  if (warp == 0) {
    w = lane < static_cast<int>(blockDim.x / 32) ? warps[lane] : Welford<F>{0, 0, 0};
    w = warp_merge(w);
  }
  __syncthreads();  // warps[] is free for the next call
  return w;
}

__device__ float normalize(float v, const ChannelAffine& a, bool silu) {
  const float y = (v - a.mean) * a.scale + a.shift;
  return silu ? y / (1.0f + __expf(-y)) : y;
}

}  // namespace

// partials (N * G, gridDim.x) <- x (N * G, group_size), `chunk` values (a multiple of 8) a block;
// grid (blocks per group, rows), block kThreads.
template <typename T, int kVec>
static __global__ void group_stats_first_kernel(Welford<float>* __restrict__ partials,
                                                const T* __restrict__ x, int64_t group_size, int64_t rows,
                                                int64_t chunk) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * chunk;
  const int64_t end = begin + chunk < group_size ? begin + chunk : group_size;
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const T* group = x + row * group_size;
    Welford<float> w{0, 0, 0};
    for (int64_t i = begin + threadIdx.x * kVec; i < end; i += kThreads * kVec) {
      float v[kVec];
      load_vec<T, kVec>(group + i, v);
      w = merge(w, welford_of<kVec>(v));
    }
    w = block_merge(w);
    if (threadIdx.x == 0) partials[row * gridDim.x + blockIdx.x] = w;
  }
}

// partials (N, G, gridDim.x) <- x (N, S, C); grid (blocks per sample, N), block (C / kVec, lanes).
template <typename T, int kVec>
static __global__ void __launch_bounds__(1024)
    group_stats_last_kernel(Welford<float>* __restrict__ partials, const T* __restrict__ x,
                            const float* __restrict__ pre_bias, int64_t batch, int64_t spatial,
                            int64_t channels, int64_t groups, int64_t positions_per_block) {
  __shared__ Welford<float> threads[1024];
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * positions_per_block;
  const int64_t end = begin + positions_per_block < spatial ? begin + positions_per_block : spatial;
  const int t = threadIdx.y * blockDim.x + threadIdx.x;
  const int vectors_per_group = static_cast<int>(channels / groups / kVec);
  float shift[kVec];  // this thread's channels' pre-bias (0 without one)
  for (int k = 0; k < kVec; ++k) shift[k] = pre_bias != nullptr ? pre_bias[threadIdx.x * kVec + k] : 0.0f;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    const T* sample = x + n * spatial * channels + threadIdx.x * kVec;
    Welford<float> w{0, 0, 0};
    for (int64_t p = begin + threadIdx.y; p < end; p += blockDim.y) {
      float v[kVec];
      load_vec<T, kVec>(sample + p * channels, v);
      for (int k = 0; k < kVec; ++k) v[k] += shift[k];
      w = merge(w, welford_of<kVec>(v));
    }
    threads[t] = w;
    __syncthreads();
    // Thread g merges group g: channel vectors [g * vectors_per_group, ...) of every position lane.
    for (int64_t g = t; g < groups; g += blockDim.x * blockDim.y) {
      Welford<float> m{0, 0, 0};
      for (unsigned lane = 0; lane < blockDim.y; ++lane)
        for (int j = 0; j < vectors_per_group; ++j)
          m = merge(m, threads[lane * blockDim.x + g * vectors_per_group + j]);
      partials[(n * groups + g) * gridDim.x + blockIdx.x] = m;
    }
    __syncthreads();  // threads[] is rewritten for the next sample
  }
}

// table (N, C) <- partials (N * G, blocks_per_group); grid (N * G), block kThreads.
static __global__ void group_finalize_kernel(ChannelAffine* __restrict__ table,
                                             const Welford<float>* __restrict__ partials,
                                             int64_t blocks_per_group, const float* __restrict__ weight,
                                             const float* __restrict__ bias,
                                             const float* __restrict__ pre_bias, int64_t channels,
                                             int64_t groups, double eps) {
  __shared__ float mean, rstd;
  const int64_t row = blockIdx.x;  // n * G + g
  Welford<double> w{0, 0, 0};
  for (int64_t b = threadIdx.x; b < blocks_per_group; b += blockDim.x) {
    const Welford<float> p = partials[row * blocks_per_group + b];
    w = merge(w, Welford<double>{p.count, p.mean, p.m2});
  }
  w = block_merge(w);
  if (threadIdx.x == 0) {
    mean = static_cast<float>(w.mean);
    rstd = static_cast<float>(1.0 / sqrt(w.m2 / w.count + eps));
  }
  __syncthreads();
  const int64_t per_group = channels / groups;
  const int64_t first = row * per_group;  // = n * C + g * per_group
  for (int64_t j = threadIdx.x; j < per_group; j += blockDim.x) {
    const int64_t c = (row % groups) * per_group + j;
    // x + pre_bias[c] - mean = x - (mean - pre_bias[c]): the apply kernels read x as it is.
    table[first + j] = {pre_bias != nullptr ? mean - pre_bias[c] : mean, rstd * weight[c], bias[c]};
  }
}

// y <- x (N * C, S); grid (chunks per row, rows), block kThreads.
template <typename T, int kVec>
static __global__ void group_apply_first_kernel(T* __restrict__ y, const T* __restrict__ x,
                                                const ChannelAffine* __restrict__ table, int64_t spatial,
                                                int64_t rows, bool silu) {
  for (int64_t row = blockIdx.y; row < rows; row += gridDim.y) {
    const ChannelAffine a = table[row];
    const int64_t offset = row * spatial;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * kThreads * kVec;
    for (int64_t i = (static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x) * kVec; i < spatial;
         i += stride) {
      float v[kVec];
      load_vec<T, kVec>(x + offset + i, v);
      for (int k = 0; k < kVec; ++k) v[k] = normalize(v[k], a, silu);
      store_vec<T, kVec>(y + offset + i, v);
    }
  }
}

// Where a channels-last y puts x's positions when it is a padded buffer (GroupNormShape::padded).
struct PadGeometry {
  int64_t in_hw = 0, in_h = 0, in_w = 0;           // x's H * W, H and W
  int64_t out_spatial = 0, out_hw = 0, out_w = 0;  // y's positions, H' * W' and W'
  int64_t front = 0, side = 0;
};

// How the apply kernel writes a channels-last y.
enum class ApplyOut { kDense, kInterior, kInteriorAndPads };

// y <- x (N, S, C); grid (position chunks, N), block (C / kVec, lanes). kInterior: y is the padded
// buffer `pad` describes (x's position p = (d, h, w) goes to (d + front, h + side, w + side)), its
// pads left to replicate_borders_last_kernel; kInteriorAndPads: the kernel writes the pads too.
template <typename T, int kVec, ApplyOut kOut>
static __global__ void __launch_bounds__(1024)
    group_apply_last_kernel(T* __restrict__ y, const T* __restrict__ x,
                            const ChannelAffine* __restrict__ table, int64_t batch, int64_t spatial,
                            int64_t channels, int64_t positions_per_block, bool silu, PadGeometry pad) {
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * positions_per_block;
  const int64_t end = begin + positions_per_block < spatial ? begin + positions_per_block : spatial;
  const int64_t c0 = threadIdx.x * kVec;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    ChannelAffine a[kVec];
    for (int k = 0; k < kVec; ++k) a[k] = table[n * channels + c0 + k];
    const int64_t sample = n * spatial * channels + c0;
    const int64_t out_sample = kOut != ApplyOut::kDense ? n * pad.out_spatial * channels + c0 : sample;
    for (int64_t p = begin + threadIdx.y; p < end; p += blockDim.y) {
      float v[kVec];
      load_vec<T, kVec>(x + sample + p * channels, v);
      for (int k = 0; k < kVec; ++k) v[k] = normalize(v[k], a[k], silu);
      if (kOut == ApplyOut::kDense) {
        store_vec<T, kVec>(y + out_sample + p * channels, v);
        continue;
      }
      const int64_t d = p / pad.in_hw, r = p - d * pad.in_hw, h = r / pad.in_w, w = r - h * pad.in_w;
      if (kOut == ApplyOut::kInterior) {
        store_vec<T, kVec>(
            y + out_sample +
                ((d + pad.front) * pad.out_hw + (h + pad.side) * pad.out_w + w + pad.side) * channels,
            v);
        continue;
      }
      // Position (d, h, w) lands at (d + front, h + side, w + side) and, on the edges, also in the
      // replicate pads it is the source of: every front frame for d = 0, the side rows above h = 0
      // and below the last row, the side columns likewise (corners by the product of the ranges).
      // (An H100 measured this 17 ms slower per frame-window encode than the interior-only write:
      // the edge loops cost the kernel its simple load-store shape.)
      const int64_t d_first = d == 0 ? 0 : d + pad.front, d_last = d + pad.front;
      const int64_t h_first = h == 0 ? 0 : h + pad.side,
                    h_last = h == pad.in_h - 1 ? h + 2 * pad.side : h + pad.side;
      const int64_t w_first = w == 0 ? 0 : w + pad.side,
                    w_last = w == pad.in_w - 1 ? w + 2 * pad.side : w + pad.side;
      for (int64_t dd = d_first; dd <= d_last; ++dd)
        for (int64_t hh = h_first; hh <= h_last; ++hh)
          for (int64_t ww = w_first; ww <= w_last; ++ww)
            store_vec<T, kVec>(y + out_sample + (dd * pad.out_hw + hh * pad.out_w + ww) * channels, v);
    }
  }
}

// The replicate pads of a channels-last padded buffer y (N, T + front, H + 2 side, W + 2 side, C)
// from its interior: each pad position copies the interior position its coordinates clamp to (the
// first frame for the front frames, the edge rows and columns for the sides, corners both). Only
// interior positions are read, so the order threads run in does not matter. Pad positions of one
// sample, in order: the front frames whole; then per interior frame its 2 side rows above and below
// (full width); then per interior frame and row its 2 side columns. grid (position chunks, N),
// block (C / kVec, lanes).
template <typename T, int kVec>
static __global__ void __launch_bounds__(1024)
    replicate_borders_last_kernel(T* __restrict__ y, int64_t batch, int64_t channels, int64_t frames,
                                  int64_t height, int64_t width, int64_t front, int64_t side) {
  const int64_t out_w = width + 2 * side, out_hw = (height + 2 * side) * out_w;
  const int64_t front_count = front * out_hw;
  const int64_t row_count = frames * 2 * side * out_w;
  const int64_t total = front_count + row_count + frames * height * 2 * side;
  const int64_t c0 = threadIdx.x * kVec;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    T* sample = y + n * (frames + front) * out_hw * channels + c0;
    for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; p < total; p += stride) {
      int64_t dd, hh, ww;
      if (p < front_count) {
        dd = p / out_hw;
        const int64_t r = p - dd * out_hw;
        hh = r / out_w;
        ww = r - hh * out_w;
      } else if (p < front_count + row_count) {
        const int64_t q = p - front_count, per_frame = 2 * side * out_w;
        dd = front + q / per_frame;
        const int64_t r = q % per_frame, row = r / out_w;
        hh = row < side ? row : height + row;
        ww = r - row * out_w;
      } else {
        const int64_t q = p - front_count - row_count, per_frame = height * 2 * side;
        dd = front + q / per_frame;
        const int64_t r = q % per_frame, column = r % (2 * side);
        hh = side + r / (2 * side);
        ww = column < side ? column : width + column;
      }
      const int64_t sd = dd > front ? dd : front;
      const int64_t sh = hh < side ? side : (hh >= side + height ? side + height - 1 : hh);
      const int64_t sw = ww < side ? side : (ww >= side + width ? side + width - 1 : ww);
      float v[kVec];
      load_vec<T, kVec>(sample + (sd * out_hw + sh * out_w + sw) * channels, v);
      store_vec<T, kVec>(sample + (dd * out_hw + hh * out_w + ww) * channels, v);
    }
  }
}

namespace {

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}
unsigned grid_rows(int64_t rows) {
  return static_cast<unsigned>(rows < 65535 ? rows : 65535);
}

// Channels-last blocks cover this many positions (all C channels of each).
int64_t positions_per_block(int64_t chunk, int64_t channels) {
  return chunk / channels > 1 ? chunk / channels : 1;
}

// Values (channels-first; a multiple of 8, so vectors never straddle blocks) or positions
// (channels-last) per statistics block: the most the constants allow, fewer where that would leave
// under kMinStatsBlocks blocks.
int64_t stats_chunk(const GroupNormShape& s) {
  const int64_t fill = ceil_div(s.batch * s.channels * s.spatial, kMinStatsBlocks);
  if (s.channels_last)
    return positions_per_block(fill < kStatsChunkLast ? fill : kStatsChunkLast, s.channels);
  const int64_t values = fill < kStatsChunk ? fill : kStatsChunk;
  return values < 2048 ? 2048 : ceil_div(values, 8) * 8;
}

int64_t blocks_per_group(const GroupNormShape& s) {
  if (s.channels_last) return ceil_div(s.spatial, stats_chunk(s));
  return ceil_div(s.channels / s.groups * s.spatial, stats_chunk(s));
}

// Channels-last block: thread x per channel vector, enough position lanes for about kThreads threads.
dim3 block_shape(int64_t channel_vectors) {
  const int64_t lanes = kThreads / channel_vectors > 1 ? kThreads / channel_vectors : 1;
  return dim3(static_cast<unsigned>(channel_vectors), static_cast<unsigned>(lanes));
}

template <typename T>
void launch_stats(Welford<float>* partials, const T* x, const float* pre_bias, const GroupNormShape& s,
                  cudaStream_t stream) {
  const auto per_group = static_cast<unsigned>(blocks_per_group(s));
  if (!s.channels_last) {
    const int64_t group_size = s.channels / s.groups * s.spatial;
    const int64_t rows = s.batch * s.groups;
    const int64_t chunk = stats_chunk(s);
    const int vec = vector_width(group_size, sizeof(T), x, x);
    const dim3 g(per_group, grid_rows(rows));
    if (vec == 8)
      group_stats_first_kernel<T, 8><<<g, kThreads, 0, stream>>>(partials, x, group_size, rows, chunk);
    if (vec == 4)
      group_stats_first_kernel<T, 4><<<g, kThreads, 0, stream>>>(partials, x, group_size, rows, chunk);
    if (vec == 2)
      group_stats_first_kernel<T, 2><<<g, kThreads, 0, stream>>>(partials, x, group_size, rows, chunk);
    if (vec == 1)
      group_stats_first_kernel<T, 1><<<g, kThreads, 0, stream>>>(partials, x, group_size, rows, chunk);
    return;
  }
  const int vec = vector_width(s.channels / s.groups, sizeof(T), x, x);
  const dim3 g(per_group, grid_rows(s.batch));
  const dim3 block = block_shape(s.channels / vec);
  const int64_t ppb = stats_chunk(s);
  const int64_t n = s.batch, sp = s.spatial, c = s.channels, gr = s.groups;
  if (vec == 8)
    group_stats_last_kernel<T, 8><<<g, block, 0, stream>>>(partials, x, pre_bias, n, sp, c, gr, ppb);
  if (vec == 4)
    group_stats_last_kernel<T, 4><<<g, block, 0, stream>>>(partials, x, pre_bias, n, sp, c, gr, ppb);
  if (vec == 2)
    group_stats_last_kernel<T, 2><<<g, block, 0, stream>>>(partials, x, pre_bias, n, sp, c, gr, ppb);
  if (vec == 1)
    group_stats_last_kernel<T, 1><<<g, block, 0, stream>>>(partials, x, pre_bias, n, sp, c, gr, ppb);
}

template <typename T>
cudaError_t launch_borders(T* y, int64_t batch, int64_t channels, int64_t frames, int64_t height,
                           int64_t width, int64_t front, int64_t side, cudaStream_t stream) {
  const int64_t total = front * (height + 2 * side) * (width + 2 * side) +
                        frames * 2 * side * (width + 2 * side) + frames * height * 2 * side;
  if (total == 0 || batch == 0 || channels == 0) return cudaSuccess;
  const int vec = vector_width(channels, sizeof(T), y, y);
  if (channels / vec > 1024) return cudaErrorInvalidValue;
  const dim3 block = block_shape(channels / vec);
  const int64_t blocks = ceil_div(total, block.y);
  const dim3 g(static_cast<unsigned>(blocks < 65535 ? blocks : 65535), grid_rows(batch));
  if (vec == 8)
    replicate_borders_last_kernel<T, 8>
        <<<g, block, 0, stream>>>(y, batch, channels, frames, height, width, front, side);
  if (vec == 4)
    replicate_borders_last_kernel<T, 4>
        <<<g, block, 0, stream>>>(y, batch, channels, frames, height, width, front, side);
  if (vec == 2)
    replicate_borders_last_kernel<T, 2>
        <<<g, block, 0, stream>>>(y, batch, channels, frames, height, width, front, side);
  if (vec == 1)
    replicate_borders_last_kernel<T, 1>
        <<<g, block, 0, stream>>>(y, batch, channels, frames, height, width, front, side);
  return cudaGetLastError();
}

template <typename T>
void launch_apply(T* y, const T* x, const ChannelAffine* table, const GroupNormShape& s,
                  cudaStream_t stream) {
  if (!s.channels_last) {
    const int vec = vector_width(s.spatial, sizeof(T), x, y);
    const int64_t rows = s.batch * s.channels;
    const dim3 g(static_cast<unsigned>(ceil_div(s.spatial, kApplyChunk)), grid_rows(rows));
    const int64_t sp = s.spatial;
    if (vec == 8) group_apply_first_kernel<T, 8><<<g, kThreads, 0, stream>>>(y, x, table, sp, rows, s.silu);
    if (vec == 4) group_apply_first_kernel<T, 4><<<g, kThreads, 0, stream>>>(y, x, table, sp, rows, s.silu);
    if (vec == 2) group_apply_first_kernel<T, 2><<<g, kThreads, 0, stream>>>(y, x, table, sp, rows, s.silu);
    if (vec == 1) group_apply_first_kernel<T, 1><<<g, kThreads, 0, stream>>>(y, x, table, sp, rows, s.silu);
    return;
  }
  const int vec = vector_width(s.channels, sizeof(T), x, y);
  const int64_t ppb = positions_per_block(kApplyChunk, s.channels);
  const dim3 g(static_cast<unsigned>(ceil_div(s.spatial, ppb)), grid_rows(s.batch));
  const dim3 block = block_shape(s.channels / vec);
  const int64_t n = s.batch, sp = s.spatial, c = s.channels;
  PadGeometry pad;
  if (s.padded()) {
    pad.in_hw = s.height * s.width;
    pad.in_h = s.height;
    pad.in_w = s.width;
    pad.out_w = s.width + 2 * s.pad_side;
    pad.out_hw = (s.height + 2 * s.pad_side) * pad.out_w;
    pad.out_spatial = (s.frames + s.pad_front) * pad.out_hw;
    pad.front = s.pad_front;
    pad.side = s.pad_side;
  }
  auto launch = [&](auto mode) {
    constexpr ApplyOut kOut = decltype(mode)::value;
    if (vec == 8)
      group_apply_last_kernel<T, 8, kOut><<<g, block, 0, stream>>>(y, x, table, n, sp, c, ppb, s.silu, pad);
    if (vec == 4)
      group_apply_last_kernel<T, 4, kOut><<<g, block, 0, stream>>>(y, x, table, n, sp, c, ppb, s.silu, pad);
    if (vec == 2)
      group_apply_last_kernel<T, 2, kOut><<<g, block, 0, stream>>>(y, x, table, n, sp, c, ppb, s.silu, pad);
    if (vec == 1)
      group_apply_last_kernel<T, 1, kOut><<<g, block, 0, stream>>>(y, x, table, n, sp, c, ppb, s.silu, pad);
  };
  if (!s.padded()) {
    launch(std::integral_constant<ApplyOut, ApplyOut::kDense>{});
  } else if (s.pads_in_apply) {
    launch(std::integral_constant<ApplyOut, ApplyOut::kInteriorAndPads>{});
  } else {
    launch(std::integral_constant<ApplyOut, ApplyOut::kInterior>{});
    if (cudaPeekAtLastError() != cudaSuccess) return;  // launch_all reports it
    (void)launch_borders(y, s.batch, s.channels, s.frames, s.height, s.width, s.pad_front, s.pad_side,
                         stream);
  }
}

template <typename T>
cudaError_t launch_all(T* y, const T* x, const float* weight, const float* bias, const float* pre_bias,
                       float* scratch, const GroupNormShape& s, cudaStream_t stream) {
  auto* partials = reinterpret_cast<Welford<float>*>(scratch);  // (N, G, blocks per group)
  const int64_t per_group = blocks_per_group(s);
  auto* table = reinterpret_cast<ChannelAffine*>(partials + s.batch * s.groups * per_group);  // (N, C)
  launch_stats<T>(partials, x, pre_bias, s, stream);
  cudaError_t status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  group_finalize_kernel<<<static_cast<unsigned>(s.batch * s.groups), kThreads, 0, stream>>>(
      table, partials, per_group, weight, bias, pre_bias, s.channels, s.groups, s.eps);
  status = cudaGetLastError();
  if (status != cudaSuccess) return status;
  launch_apply<T>(y, x, table, s, stream);
  return cudaGetLastError();
}

}  // namespace

cudaError_t replicate_borders_last(void* y, bool bf16, int64_t batch, int64_t channels, int64_t frames,
                                   int64_t height, int64_t width, int64_t front, int64_t side,
                                   cudaStream_t stream) {
  if (front < 0 || side < 0 || frames <= 0 || height <= 0 || width <= 0) return cudaErrorInvalidValue;
  if (bf16)
    return launch_borders(static_cast<__nv_bfloat16*>(y), batch, channels, frames, height, width, front, side,
                          stream);
  return launch_borders(static_cast<float*>(y), batch, channels, frames, height, width, front, side, stream);
}

int64_t group_norm_scratch_size(const GroupNormShape& shape) {
  const int64_t partials = shape.batch * shape.groups * blocks_per_group(shape);
  return (partials * sizeof(Welford<float>) + shape.batch * shape.channels * sizeof(ChannelAffine)) /
         sizeof(float);
}

cudaError_t group_norm_silu(void* y, const void* x, const float* weight, const float* bias,
                            const float* pre_bias, float* scratch, const GroupNormShape& shape,
                            cudaStream_t stream) {
  const GroupNormShape& s = shape;
  if (s.batch * s.channels * s.spatial == 0) return cudaSuccess;
  if (s.groups <= 0 || s.channels % s.groups != 0) return cudaErrorInvalidValue;
  if (s.channels_last && s.channels > kGroupNormMaxChannelsLast) return cudaErrorInvalidValue;
  if (s.padded() && (!s.channels_last || s.pad_front < 0 || s.pad_side < 0 || s.frames * s.height * s.width != s.spatial))
    return cudaErrorInvalidValue;
  if (pre_bias != nullptr && !s.channels_last) return cudaErrorInvalidValue;
  if (s.bf16)
    return launch_all(static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(x), weight, bias,
                      pre_bias, scratch, s, stream);
  return launch_all(static_cast<float*>(y), static_cast<const float*>(x), weight, bias, pre_bias, scratch, s,
                    stream);
}

}  // namespace tt::kernels
