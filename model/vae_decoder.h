// The decoder half of HunyuanVideo's causal 3D VAE (diffusers AutoencoderKLHunyuanVideo.decode):
// latents (B, 16, T', H', W') -> video (B, 3, 4 (T' - 1) + 1, 8 H', 8 W'), with diffusers' frame
// windows and spatial tiles reproduced exactly, so that sampled latents become the same video as in
// diffusers' HunyuanVideoPipeline. Parameters carry diffusers' key names (`decoder.*`,
// `post_quant_conv.*`): a diffusers VAE folder or safetensors file loads as it is (its encoder keys
// are ignored). Frozen: decoding runs under no-grad.
//
// Layout, as diffusers builds it: post_quant_conv (1x1x1); conv_in (latent -> last block's
// channels); a mid block (resnet, single-head frame-causal attention, resnet); one up block per
// block_out_channels entry, in reverse (layers_per_block + 1 resnets, then a nearest upsample and a
// causal conv: 2x in H and W in the first log2(spatial) blocks, 2x in time in the log2(temporal)
// blocks before the last; time doubles all frames but the first, so T -> 2 T - 1); GroupNorm, SiLU,
// conv_out to out_channels. The output is not clamped (diffusers' decode does not clamp either; its
// video processor maps [-1, 1] to [0, 1] and clamps).
#pragma once

#include <torch/nn.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>

#include "model/vae.h"

namespace tt {

class VaeDecoder3DImpl;

/// How decode() splits its work, with diffusers' settings and defaults. VaeTiling's fields are in
/// video pixels and frames, as diffusers' tile_sample_* attributes:
///   temporal (use_framewise_decoding, on by default): latents longer than min_frames / 4 frames
///     are decoded in windows of min_frames / 4 + 1 latent frames every stride_frames / 4; each
///     window after the first loses its first decoded frame and its first min_frames -
///     stride_frames frames fade in linearly from the window before.
///   spatial (enable_tiling(), off by default): latents wider than min_width / 8 or taller than
///     min_height / 8 are decoded in tiles of that size every stride / 8 latents, blended over
///     min - stride pixels with the tile above and the one to the left, then cropped to stride.
/// Both: each frame window is decoded in spatial tiles. VaeTiling{} is diffusers' plain `decode`;
/// with spatial = true it is `decode` after `enable_tiling()`; temporal = spatial = false decodes
/// the latents whole. One tile (or window) is decoded at a time: its activations are freed before
/// the next, and the output is written into the video as tiles finish (only the previous row of
/// tiles and the previous window are kept for blending).
using VaeDecodeTiling = VaeTiling;

class HunyuanVaeDecoderImpl : public torch::nn::Module {
 public:
  explicit HunyuanVaeDecoderImpl(const HunyuanVaeConfig& config);

  /// z (B, latent_channels, T', H', W'), unscaled (diffusers' `vae.decode` input), any float dtype
  /// matching the parameters -> video (B, out_channels, 4 (T' - 1) + 1, 8 H', 8 W'), nominally in
  /// [-1, 1], in z's dtype, contiguous. The whole latent in one pass (the most memory).
  torch::Tensor decode(const torch::Tensor& z);

  /// decode() through diffusers' frame windows and spatial tiles (see VaeDecodeTiling); equal to
  /// decode(z) when nothing splits. Throws kConfig for tile sizes that are not multiples of the
  /// compression ratios or strides larger than tiles.
  torch::Tensor decode(const torch::Tensor& z, const VaeDecodeTiling& tiling);

  /// What HunyuanVideoPipeline does with sampled latents: latents / scaling_factor, then
  /// decode(tiling). latents (B, latent_channels, T', H', W') as the Transformer sees them.
  torch::Tensor decode_latents(const torch::Tensor& latents, const VaeDecodeTiling& tiling = {});

  const HunyuanVaeConfig& config() const { return config_; }
  /// Channels-last and the fused GroupNorm+SiLU on CUDA (VaeRuntime; tile_batch is not used: tiles
  /// are decoded one at a time).
  void set_runtime(const VaeRuntime& runtime) { runtime_ = runtime; }
  const VaeRuntime& runtime() const { return runtime_; }

  /// Fixed random weights from `seed` (tests and benchmarks without the released weights): norm
  /// gains 1, biases 0, every other weight N(0, 1 / fan_in).
  void randomize_weights(uint64_t seed);

  /// Parameters by diffusers key (decoder.*, post_quant_conv.*).
  std::map<std::string, torch::Tensor> diffusers_parameters();

 private:
  torch::Tensor decode_spatial_tiles(const torch::Tensor& z, const VaeDecodeTiling& tiling);
  HunyuanVaeConfig config_;
  VaeRuntime runtime_;
  std::shared_ptr<VaeDecoder3DImpl> decoder_;
  torch::nn::Conv3d post_quant_conv_{nullptr};
};
TORCH_MODULE(HunyuanVaeDecoder);

/// Builds the decoder from a diffusers VAE and loads its weights (decoder.*, post_quant_conv.*; the
/// encoder's keys are skipped): `path` as for load_hunyuan_vae (a save_pretrained folder, a pipeline
/// folder's `vae/`, or a safetensors file whose architecture comes from `config_if_no_json`).
/// Strict on the decoder's keys: missing, unexpected and mis-shaped ones are one kCheckpoint error
/// naming each key. Returns the module in eval mode on `device` in `dtype`, frozen.
HunyuanVaeDecoder load_hunyuan_vae_decoder(const std::string& path, const HunyuanVaeConfig& config_if_no_json,
                                           torch::Device device = torch::kCPU,
                                           torch::Dtype dtype = torch::kFloat32);

}  // namespace tt
