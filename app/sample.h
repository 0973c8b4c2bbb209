// `teletron sample`: a video from the Transformer with the flow-matching sampler of diffusers'
// HunyuanVideoPipeline (model/flow_sampler.h), decoded by the VAE of the config's vae.* section
// (model/vae_decoder.h, tiled as vae.tiling says) and written as MP4 (pipeline/video_writer.h).
// The pieces the training's validation videos share (app/validation.h) are declared here too.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

#include "app/config.h"
#include "model/flow_sampler.h"
#include "model/hunyuan_config.h"
#include "model/vae_decoder.h"

namespace tt {

struct SampleOptions {
  /// model.* (architecture when the weights carry no config.json), vae.*, train.device.
  Config config;
  /// The Transformer: a diffusers folder, a (sharded) safetensors file or index, or the official layout.
  std::string weights;
  /// A LoRA file (diffusers/PEFT, ComfyUI or musubi-tuner layout) merged into the weights; "" = none.
  std::string lora;
  /// The prompt: text_states (L, D), text_mask (L), pooled (P).
  std::string text_embeddings;
  int64_t frames = 33, height = 480, width = 832;
  int64_t steps = 30;
  double guidance = 6.0;
  double flow_shift = 7.0;
  int64_t seed = 0;
  double fps = 24.0;
  std::string output;       // the MP4
  std::string latents_out;  // "" = none; else the final latents (1, C, T', H', W') fp32 as `latents`
  std::string device;       // "" = train.device
  std::string dtype = "auto";  // auto (bf16 on CUDA, fp32 on the CPU) | bf16 | fp32
};

void run_sample(const SampleOptions& options);

/// A text-embeddings file as the sampler's prompt for one sample: states (1, L, D) fp32, mask
/// (1, L) bool, pooled (1, P) fp32 on `device`. Throws kData naming `what` and the file when a
/// tensor is missing, mis-shaped for `model` or non-finite.
FlowSamplerText load_sampler_text(const std::string& path, const HunyuanVideoConfig& model, torch::Device device,
                                  const std::string& what);

/// The decoder of the config's VAE: vae.weights (a diffusers VAE folder or file), or for vae.preset
/// tiny without weights (and vae.weights: random) the fixed random weights the encoder also uses.
/// Frozen, eval mode, fp32 on `device`. Checks its latent channels against `latent_channels`.
HunyuanVaeDecoder load_config_vae_decoder(const VaeSection& vae, int64_t latent_channels, torch::Device device);

/// vae.tiling as decode tiling: auto = diffusers' frame windows, on = + spatial tiles, off = whole.
VaeDecodeTiling vae_decode_tiling(const VaeSection& vae);

/// Sample 0 of decoded video (B, 3, T, H, W), nominally in [-1, 1], as diffusers' video processor
/// makes it ((x / 2 + 0.5) clamped to [0, 1]) in (T, H, W, 3) uint8 RGB on the CPU.
torch::Tensor video_to_frames(const torch::Tensor& video);

}  // namespace tt
