// Exact FLOP count of the VAE encoder's forward (issue 15's "count first"), for MFU as the
// Transformer's count defines it (model/flops.h): every convolution (2 · C_in · C_out · k³ per output
// voxel, as PyTorch's FlopCounterMode counts conv), the mid block's q/k/v/out projections
// (2 · N · C · C each) and its attention (4 · N² · C: QKᵀ and the product with V). These are the
// matmul FLOPs an MFU divides by. Beside them, the elementwise work in a stated convention (not
// matmul, not in the MFU): GroupNorm 8 operations per element (mean, variance, normalise, affine),
// SiLU 4, a residual add 1. Through diffusers' tiling every window and tile is a pass of its own
// (vae_tile_plan), so the overlaps are counted as often as they are encoded; the blends of the
// overlaps are left out (a few operations per latent element).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "model/vae.h"

namespace tt {

struct VaeFlops {
  double conv = 0;              // every convolution, quant_conv included
  double attention_linear = 0;  // the mid block's q, k, v and out projections
  double attention_scores = 0;  // QKᵀ and the product with V: 4 · N² · C
  double norm = 0;              // GroupNorm, 8 operations per element
  double elementwise = 0;       // SiLU (4 per element) and residual adds (1)
  int64_t passes = 0;           // encoder passes (windows x tiles; 1 for the whole clip)

  /// What an MFU divides by: the convolutions and the attention's matmuls.
  double matmul() const { return conv + attention_linear + attention_scores; }
  VaeFlops& operator+=(const VaeFlops& other);
};

/// One encoder pass (conv_in .. quant_conv) over `batch` clips of frames x height x width.
VaeFlops vae_encoder_flops(const HunyuanVaeConfig& config, int64_t batch, int64_t frames, int64_t height,
                           int64_t width);

/// The same clip through `tiling` (moments_tiled's windows and tiles; kConfig for a bad tiling).
VaeFlops vae_encoder_flops(const HunyuanVaeConfig& config, int64_t batch, int64_t frames, int64_t height,
                           int64_t width, const VaeTiling& tiling);

/// The count split by encoder stage, in vae_stage_names' order and names (conv_in, down0 .., mid,
/// out, quant), each summed over the passes `tiling` makes; the stages add up to vae_encoder_flops.
/// `passes` is the pass count in every stage.
std::vector<std::pair<std::string, VaeFlops>> vae_encoder_stage_flops(const HunyuanVaeConfig& config, int64_t batch,
                                                                      int64_t frames, int64_t height, int64_t width,
                                                                      const VaeTiling& tiling);

}  // namespace tt
