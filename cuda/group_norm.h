// Launcher of the fused GroupNorm(+SiLU) kernels (no torch here; see cuda/ops.h for the entry and
// cuda/group_norm.cu for the algorithm).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// Shape and options of one group_norm_silu call. x is (N, C, S...) with S the product of the
/// dims after C, stored either channels-first (N, C, S) or channels-last (N, S, C), densely.
struct GroupNormShape {
  int64_t batch = 0;           /// N
  int64_t channels = 0;        /// C; channels-last needs C <= kGroupNormMaxChannelsLast
  int64_t spatial = 0;         /// S = D * H * W
  int64_t groups = 0;          /// G, divides C
  bool channels_last = false;  /// memory order (N, S, C) instead of (N, C, S)
  bool bf16 = false;           /// x and y are bf16, else fp32
  bool silu = false;           /// y = y * sigmoid(y) after the affine
  double eps = 1e-6;           /// added to the biased variance
  /// Channels-last only: y is a padded buffer, x's position (d, h, w) of its frames x height x width
  /// grid (their product is `spatial`) written at (d + pad_front, h + pad_side, w + pad_side) of y's
  /// (frames + pad_front, height + 2 pad_side, width + 2 pad_side) grid, and into the pads by
  /// replication (the first frame into the front frames, edge rows and columns into the side ones).
  /// Both pads 0: y is dense like x.
  int64_t frames = 0, height = 0, width = 0;
  int64_t pad_front = 0, pad_side = 0;
  /// Padded y: the apply kernel writes the pads itself (true) or writes the interior only and
  /// replicate_borders_last fills the pads after it (false).
  bool pads_in_apply = true;
  bool padded() const { return pad_front > 0 || pad_side > 0; }
};

/// The channels-last kernels give each thread one fixed run of channels; past this the entry uses
/// the channels-first kernels on a contiguous copy.
inline constexpr int64_t kGroupNormMaxChannelsLast = 1024;

/// fp32 scratch elements group_norm_silu needs for `shape`: the per-block partial statistics and a
/// (N, C) table of per-channel affine terms.
int64_t group_norm_scratch_size(const GroupNormShape& shape);

/// y = GroupNorm(x + pre_bias[c]) * weight[c] + bias[c] (then SiLU when shape.silu), statistics in
/// fp32/fp64. x, y: (N, C, S) or (N, S, C) bf16 or fp32 as shape says, dense; weight, bias: (C) fp32;
/// pre_bias: (C) fp32 or null (channels-last only; x is read as it is, the sum is never stored);
/// scratch: group_norm_scratch_size(shape) fp32. A padded y (shape.padded()) gets its replicate pads
/// too. Everything is queued on `stream` (no host synchronisation). Returns the first launch error.
cudaError_t group_norm_silu(void* y, const void* x, const float* weight, const float* bias,
                            const float* pre_bias, float* scratch, const GroupNormShape& shape,
                            cudaStream_t stream);

/// The replicate pads of y (N, frames + front, height + 2 side, width + 2 side, C), channels-last,
/// dense, bf16 (`bf16`) or fp32, copied from its interior: the front frames from the first interior
/// frame, the side rows and columns from the edge ones (corners both). C / (its widest 16-byte
/// vector) <= 1024. Queued on `stream`; returns the launch error.
cudaError_t replicate_borders_last(void* y, bool bf16, int64_t batch, int64_t channels, int64_t frames,
                                   int64_t height, int64_t width, int64_t front, int64_t side,
                                   cudaStream_t stream);

}  // namespace tt::kernels
