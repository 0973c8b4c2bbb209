// Sampling from the HunyuanVideo Transformer: the flow-matching Euler sampler of diffusers'
// HunyuanVideoPipeline (0.42.1) with its FlowMatchEulerDiscreteScheduler(shift = flow_shift).
//
// The schedule, as the pipeline and the scheduler build it: sigmas linspace(1, 0, steps + 1)
// without the last (float64, then fp32), shifted k s / (1 + (k - 1) s) in fp32, a final sigma 0
// appended; timesteps = sigma * 1000 (fp32) is what the model sees. Each step runs the model once
// on (latents, timestep) and moves the latents by x += (sigma_next - sigma) * v, v the predicted
// velocity eps - x0; after the last step (sigma 0) the latents are the sample, as the VAE decodes
// them (scaled by the VAE's scaling factor). Guidance-distilled models (guidance_embeds) get the
// embedded guidance scale times 1000 (the pipeline's guidance_scale, default 6.0; training feeds
// flow_matching.guidance, 1.0 by default). No classifier-free guidance: one forward per step.
//
// dtype: the latents are fp32. diffusers runs the transformer in its own dtype and rounds the
// scheduler's result to it after each step (prev_sample.to(model_output.dtype)), and makes the
// guidance in that dtype before the x1000: with `round_to` bf16 both are reproduced (the forward
// itself runs under whatever autocast the caller opened); fp32 keeps full precision (the parity
// test, the CPU).
//
// Noise: flow_initial_noise draws N(0, 1) from (seed, sample index) with the counter-based
// generator of cuda/keyed_random.h (Philox + Box-Muller), the same numbers on the CPU and on CUDA
// (up to libm's last bits) and independent of every training stream. It is NOT torch.randn's
// stream: the same seed gives different noise here and in diffusers. For parity, give the initial
// latents explicitly (sample_flow's `latents`).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace tt {

class HunyuanVideoTransformerImpl;

struct FlowSamplerOptions {
  /// Denoising steps (the pipeline's num_inference_steps).
  int64_t steps = 30;
  /// The scheduler's shift k (the pipeline's flow_shift; 7.0 for HunyuanVideo's 720p/540p).
  double shift = 7.0;
  /// Embedded guidance scale (guidance_embeds models; fed times 1000). The pipeline's default.
  double guidance = 6.0;
  /// The transformer's dtype in diffusers' terms: kBFloat16 rounds the latents to bf16 after each
  /// step and the guidance before the x1000, as HunyuanVideoPipeline with a bf16 transformer.
  torch::Dtype round_to = torch::kFloat32;
};

/// The scheduler's state for `steps` and `shift`, on the CPU.
struct FlowSchedule {
  torch::Tensor sigmas;     // (steps + 1) fp32, from 1 down, the last 0
  torch::Tensor timesteps;  // (steps) fp32, sigmas[:steps] * 1000
};
FlowSchedule flow_schedule(int64_t steps, double shift);

/// The prompt, as the Transformer takes it (one row per sample).
struct FlowSamplerText {
  torch::Tensor states;  // (B, L, text_embed_dim) float
  torch::Tensor mask;    // (B, L) bool, right-padded
  torch::Tensor pooled;  // (B, pooled_projection_dim) float
};

/// Called after each step: (steps done, of how many, seconds of this step). The step's work has
/// finished on the device when it is called (the host waited for it), so the times are real.
using FlowSamplerProgress = std::function<void(int64_t done, int64_t steps, double seconds)>;

/// The latent shape (B, channels, (frames - 1) / 4 + 1, height / 8, width / 8) of a clip; throws
/// kConfig naming `what` unless frames = 4n + 1 and height, width are multiples of 16 (the VAE's 8
/// times the patch size 2).
std::vector<int64_t> flow_latent_shape(int64_t batch, int64_t channels, int64_t frames, int64_t height,
                                       int64_t width, const std::string& what);

/// (shape) fp32 N(0, 1) on `device` from `seed`: sample b's values are keyed by (seed, b), so a
/// batch's first sample equals the sample drawn alone.
torch::Tensor flow_initial_noise(at::IntArrayRef shape, uint64_t seed, torch::Device device);

/// Runs the sampler from `latents` (B, C, T, H, W) (noise at sigma 1, on the model's device) and
/// returns the final latents (B, C, T, H, W) fp32. Under no-grad; the model should be in eval mode
/// (LoRA dropout off). `text` on the same device. Throws kConfig for steps < 1 or shift <= 0.
torch::Tensor sample_flow(HunyuanVideoTransformerImpl& model, const torch::Tensor& latents,
                          const FlowSamplerText& text, const FlowSamplerOptions& options,
                          const FlowSamplerProgress& progress = {});

}  // namespace tt
