// The flow-matching Euler sampler of HunyuanVideoPipeline (see flow_sampler.h).
#include "model/flow_sampler.h"

#include <torch/torch.h>

#include <chrono>

#include "core/errors.h"
#include "cuda/keyed_random.h"
#include "cuda/ops.h"
#include "model/flow_matching.h"
#include "model/transformer.h"

namespace tt {
namespace {

// A prefix of valid tokens then padding in every row (what trim_text_padding promises the model).
bool right_padded(const torch::Tensor& mask) {  // (B, L) bool
  const torch::Tensor m = mask.to(torch::kCPU, torch::kInt64);
  const torch::Tensor valid = m.sum(1, /*keepdim=*/true);                      // (B, 1)
  const torch::Tensor position = torch::arange(m.size(1), m.options()).unsqueeze(0);  // (1, L)
  return torch::equal(m, (position < valid).to(torch::kInt64));
}

}  // namespace

FlowSchedule flow_schedule(int64_t steps, double shift) {
  TT_CHECK(steps >= 1, ErrorCode::kConfig, "sampler: steps must be >= 1, got ", steps);
  TT_CHECK(shift > 0.0, ErrorCode::kConfig, "sampler: flow shift must be > 0, got ", shift);
  // np.linspace(1.0, 0.0, steps + 1)[:-1] in float64, then np.array(sigmas).astype(np.float32) in
  // the scheduler, whose shift runs on the fp32 array.
  const torch::Tensor base = torch::linspace(1.0, 0.0, steps + 1, torch::kFloat64).slice(0, 0, steps);
  const torch::Tensor shifted = shift_sigmas(base.to(torch::kFloat32), shift);  // (steps) fp32
  FlowSchedule schedule;
  schedule.timesteps = shifted * 1000.0;
  schedule.sigmas = torch::cat({shifted, torch::zeros({1}, torch::kFloat32)});
  return schedule;
}

std::vector<int64_t> flow_latent_shape(int64_t batch, int64_t channels, int64_t frames, int64_t height,
                                       int64_t width, const std::string& what) {
  TT_CHECK_HINT(frames >= 1 && (frames - 1) % 4 == 0, ErrorCode::kConfig, "e.g. 33, 65 or 129 frames",
                what, ": frames must be 4n + 1 (the VAE's temporal compression), got ", frames);
  TT_CHECK_HINT(height >= 16 && height % 16 == 0 && width >= 16 && width % 16 == 0, ErrorCode::kConfig,
                "e.g. 480x832 or 720x1280", what, ": height and width must be multiples of 16 (the VAE's 8 x "
                "the patch size 2), got ", height, "x", width);
  return {batch, channels, (frames - 1) / 4 + 1, height / 8, width / 8};
}

torch::Tensor flow_initial_noise(at::IntArrayRef shape, uint64_t seed, torch::Device device) {
  TT_ASSERT(shape.size() >= 1, "flow_initial_noise: empty shape");
  const torch::Tensor keys = torch::arange(shape[0], torch::TensorOptions().dtype(torch::kInt64).device(device));
  return keyed_normal(keys, shape.slice(1), seed, keyed::kSampleNoise);
}

torch::Tensor sample_flow(HunyuanVideoTransformerImpl& model, const torch::Tensor& latents,
                          const FlowSamplerText& text, const FlowSamplerOptions& options,
                          const FlowSamplerProgress& progress) {
  torch::NoGradGuard no_grad;
  const HunyuanVideoConfig& config = model.config();
  TT_ASSERT(latents.dim() == 5 && latents.size(1) == config.out_channels &&
                config.in_channels == config.out_channels,
            "sample_flow: latents ", latents.sizes(), " for a model with ", config.in_channels, " -> ",
            config.out_channels, " channels (text-to-video only)");
  const int64_t batch = latents.size(0);
  TT_ASSERT(text.states.dim() == 3 && text.states.size(0) == batch && text.mask.sizes() == text.states.sizes().slice(0, 2) &&
                text.pooled.dim() == 2 && text.pooled.size(0) == batch,
            "sample_flow: text states ", text.states.sizes(), ", mask ", text.mask.sizes(), ", pooled ",
            text.pooled.sizes(), " for ", batch, " samples");
  const torch::Device device = latents.device();
  const FlowSchedule schedule = flow_schedule(options.steps, options.shift);
  const std::vector<double> sigmas(schedule.sigmas.data_ptr<float>(),
                                   schedule.sigmas.data_ptr<float>() + schedule.sigmas.numel());
  const torch::Tensor sigmas_device = schedule.sigmas.to(device);        // (steps + 1) fp32
  const torch::Tensor timesteps_device = schedule.timesteps.to(device);  // (steps) fp32

  TransformerInputs in;
  in.encoder_hidden_states = text.states;
  in.encoder_attention_mask = text.mask.to(torch::kBool);
  in.pooled_projections = text.pooled;
  in.text_all_valid = in.encoder_attention_mask.all().item<bool>();
  in.text_right_padded = right_padded(in.encoder_attention_mask);
  if (config.guidance_embeds) {
    // The pipeline: torch.tensor([guidance_scale] * B, dtype=transformer_dtype) * 1000.0.
    in.guidance = (torch::full({batch}, options.guidance, torch::TensorOptions().dtype(options.round_to).device(device)) *
                   1000.0)
                      .to(torch::kFloat32);
  }

  torch::Tensor x = latents.to(torch::kFloat32);  // (B, C, T, H, W) fp32
  for (int64_t i = 0; i < options.steps; ++i) {
    const auto started = std::chrono::steady_clock::now();
    in.hidden_states = x.to(options.round_to).to(torch::kFloat32);  // latents.to(transformer_dtype)
    in.timestep = timesteps_device.slice(0, i, i + 1).expand({batch});
    const torch::Tensor velocity = model.forward(in).to(torch::kFloat32);  // (B, C, T, H, W)
    // The scheduler's step: dt = sigma_next - sigma in fp32, prev = sample + dt * model_output.
    const torch::Tensor dt = sigmas_device.slice(0, i + 1, i + 2) - sigmas_device.slice(0, i, i + 1);
    x = (x + dt * velocity).to(options.round_to).to(torch::kFloat32);
    // One host read per step: it times the step and stops a run that diverged.
    const bool finite = torch::isfinite(x).all().item<bool>();
    TT_CHECK_HINT(finite, ErrorCode::kNan, "check the weights (model.weights, --lora) and the text embeddings",
                  "sampler: the latents became non-finite at step ", i + 1, " of ", options.steps, " (sigma ",
                  sigmas[i], ")");
    if (progress)
      progress(i + 1, options.steps, std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  }
  return x;
}

}  // namespace tt
