// `teletron sample` and the pieces validation videos share with it (see sample.h).
#include "app/sample.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <map>

#include "app/model_setup.h"
#include "core/autocast.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "model/lora_io.h"
#include "model/transformer.h"
#include "model/weight_io.h"
#include "pipeline/latent_dataset.h"
#include "pipeline/video_manifest.h"
#include "pipeline/video_writer.h"

namespace tt {
namespace fs = std::filesystem;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

// W += scale B A for every module of the LoRA file, in fp32, rounded once into W's dtype (what
// diffusers' fuse_lora does). views: the model's diffusers_parameters().
void merge_lora_file(const std::string& path, int64_t hidden_size, std::map<std::string, torch::Tensor>& views) {
  const LoraFile file = read_lora_file(path, hidden_size);
  torch::NoGradGuard no_grad;
  for (const auto& [module, pair] : file.modules) {
    auto weight = views.find(module + ".weight");
    TT_CHECK_HINT(weight != views.end(), ErrorCode::kCheckpoint, "use a LoRA trained for this architecture",
                  "--lora ", path, ": ", module, " is no module of the model");
    torch::Tensor& w = weight->second;  // (out, in)
    const torch::Tensor delta = pair.b.to(w.device(), torch::kFloat32).matmul(pair.a.to(w.device(), torch::kFloat32));
    TT_CHECK(delta.sizes() == w.sizes(), ErrorCode::kCheckpoint, "--lora ", path, ": ", module, " has B A of ",
             delta.sizes(), " for a weight of ", w.sizes());
    w.copy_((w.to(torch::kFloat32) + delta * pair.scale).to(w.scalar_type()));
  }
  spdlog::info("sample: merged {} LoRA modules of {} ({} layout)", file.modules.size(), path, file.format);
}

}  // namespace

FlowSamplerText load_sampler_text(const std::string& path, const HunyuanVideoConfig& model, torch::Device device,
                                  const std::string& what) {
  std::error_code ignored;
  TT_CHECK_HINT(fs::is_regular_file(path, ignored), ErrorCode::kData,
                "give a safetensors file with text_states (L, D), text_mask (L) and pooled (P), e.g. one that "
                "`teletron encode-text` wrote",
                what, ": ", path, " is not a file");
  const std::string problem = check_text_embeddings(path, model.text_embed_dim, model.pooled_projection_dim);
  TT_CHECK_HINT(problem.empty(), ErrorCode::kData, "encode the prompt with the text encoders the model was built for",
                what, ": ", problem);
  auto tensors = safetensors::load(path, {"text_states", "text_mask", "pooled"});
  LatentSample text;
  text.text_states = tensors.at("text_states").to(torch::kFloat32);  // (L, D)
  text.text_mask = tensors.at("text_mask").to(torch::kBool);         // (L)
  text.pooled = tensors.at("pooled").to(torch::kFloat32);            // (P)
  const std::string values = check_sample_values(text);
  TT_CHECK_HINT(values.empty(), ErrorCode::kData, "encode the prompt again", what, ": ", path, ": ", values);
  FlowSamplerText out;
  out.states = text.text_states.unsqueeze(0).to(device);
  out.mask = text.text_mask.unsqueeze(0).to(device);
  out.pooled = text.pooled.unsqueeze(0).to(device);
  return out;
}

HunyuanVaeDecoder load_config_vae_decoder(const VaeSection& vae, int64_t latent_channels, torch::Device device) {
  const HunyuanVaeConfig preset = hunyuan_vae_preset(vae.preset);
  const bool random = vae.weights && *vae.weights == "random";
  HunyuanVaeDecoder decoder{nullptr};
  if (vae.weights && !random) {
    decoder = load_hunyuan_vae_decoder(*vae.weights, preset, device, torch::kFloat32);
  } else {
    TT_CHECK_HINT(vae.preset == "tiny" || random, ErrorCode::kConfig,
                  "point tele_tron.vae.weights at the HunyuanVideo VAE (a diffusers folder's vae/); `random` gives "
                  "fixed random weights for benchmarks",
                  "tele_tron.vae.weights: the ", vae.preset, " VAE needs its weights to decode videos");
    if (random) spdlog::warn("tele_tron.vae.weights: random: the decoded videos mean nothing (benchmarks only)");
    decoder = HunyuanVaeDecoder(preset);
    decoder->randomize_weights(20241203);  // the encoder's fixed random weights use the same seed
    decoder->to(device, torch::kFloat32);
    decoder->eval();
    for (auto& p : decoder->parameters()) p.set_requires_grad(false);
  }
  TT_CHECK_HINT(decoder->config().latent_channels == latent_channels, ErrorCode::kConfig,
                "use a VAE and a model that agree on latent channels", "the VAE decodes ",
                decoder->config().latent_channels, " latent channels, the model makes ", latent_channels);
  return decoder;
}

VaeDecodeTiling vae_decode_tiling(const VaeSection& vae) {
  VaeDecodeTiling tiling;  // auto: diffusers' default decode (frame windows, no spatial tiles)
  if (vae.tiling == "on") {
    tiling.temporal = true;
    tiling.spatial = true;
  } else if (vae.tiling == "off") {
    tiling.temporal = false;
    tiling.spatial = false;
  }
  return tiling;
}

torch::Tensor video_to_frames(const torch::Tensor& video) {
  TT_ASSERT(video.dim() == 5 && video.size(1) == 3, "video_to_frames: expected (B, 3, T, H, W), got ", video.sizes());
  const torch::Tensor unit = (video[0].to(torch::kCPU, torch::kFloat32) / 2.0 + 0.5).clamp(0.0, 1.0);  // (3, T, H, W)
  return (unit * 255.0).round().to(torch::kUInt8).permute({1, 2, 3, 0}).contiguous();                // (T, H, W, 3)
}

void run_sample(const SampleOptions& o) {
  const auto started = Clock::now();
  const torch::Device device = resolve_device(o.device.empty() ? o.config.train.device : o.device, "--device");
  TT_CHECK(o.dtype == "auto" || o.dtype == "fp32" || o.dtype == "bf16", ErrorCode::kConfig,
           "--dtype: expected auto, fp32 or bf16, got ", o.dtype);
  const bool bf16 = o.dtype == "bf16" || (o.dtype == "auto" && device.is_cuda());
  TT_CHECK_HINT(o.fps > 0, ErrorCode::kConfig, "e.g. --fps 24", "--fps must be > 0, got ", o.fps);

  // Everything a typo could break is checked before the model is built.
  // --weights random: the config's architecture with the model's own initialisation, for timing the
  // sampler at real shapes without weights (the video means nothing).
  const bool random_weights = o.weights == "random";
  ModelChoice choice =
      choose_model(o.config.model, random_weights ? std::optional<std::string>() : std::optional<std::string>(o.weights));
  if (random_weights)
    spdlog::warn("sample --weights random: {} with freshly initialised weights; the video means nothing (timing only)",
                 choice.origin);
  const std::vector<int64_t> shape =
      flow_latent_shape(1, choice.config.out_channels, o.frames, o.height, o.width, "sample --frames/--height/--width");
  FlowSamplerText text = load_sampler_text(o.text_embeddings, choice.config, device, "--text-embeddings");
  HunyuanVaeDecoder vae = load_config_vae_decoder(o.config.vae, choice.config.out_channels, device);
  const VaeDecodeTiling tiling = vae_decode_tiling(o.config.vae);
  if (!o.output.empty() && fs::path(o.output).has_parent_path()) fs::create_directories(fs::path(o.output).parent_path());

  // bf16 as HunyuanVideoPipeline runs the released model (torch_dtype=bfloat16): weights converted
  // once as each block is built onto the device, the forward under bf16 autocast, latents rounded to
  // bf16 after each step.
  HunyuanVideoTransformer model(choice.config, device, bf16 ? torch::kBFloat16 : torch::kFloat32);
  model->eval();
  std::map<std::string, torch::Tensor> views = model->diffusers_parameters();
  if (choice.weights) load_weights(*choice.weights, views);
  if (!o.lora.empty()) merge_lora_file(o.lora, choice.config.hidden_size(), views);
  for (auto& p : model->parameters()) p.set_requires_grad(false);
  spdlog::info("sample: {} ({}), {:.1f} M parameters, weights {}, {} on {}; {} steps, flow_shift {}, guidance {}, "
               "seed {}, {}x{}x{} (latents {})",
               describe_hunyuan_config(choice.config), choice.origin, model->parameter_count() / 1e6,
               choice.weights ? choice.weights->description : std::string("random (timing only)"), bf16 ? "bf16" : "fp32", describe_device(device), o.steps, o.flow_shift,
               o.guidance, o.seed, o.frames, o.height, o.width, str_cat(at::IntArrayRef(shape)));

  FlowSamplerOptions sampler;
  sampler.steps = o.steps;
  sampler.shift = o.flow_shift;
  sampler.guidance = o.guidance;
  sampler.round_to = bf16 ? torch::kBFloat16 : torch::kFloat32;
  const torch::Tensor noise = flow_initial_noise(shape, static_cast<uint64_t>(o.seed), device);
  const auto sampling = Clock::now();
  torch::Tensor latents;
  {
    AutocastScope autocast(bf16, at::kBFloat16, device.type());
    latents = sample_flow(*model, noise, text, sampler, [](int64_t done, int64_t steps, double seconds) {
      spdlog::info("sample: step {}/{}  {:.3f} s", done, steps, seconds);
    });
  }
  const double sample_s = seconds_since(sampling);
  if (!o.latents_out.empty()) {
    safetensors::save(o.latents_out, {{"latents", latents.cpu().contiguous()}},
                      {{"weights", o.weights}, {"text_embeddings", o.text_embeddings}, {"steps", std::to_string(o.steps)},
                       {"seed", std::to_string(o.seed)}});
    spdlog::info("sample: latents {} written to {}", str_cat(latents.sizes()), o.latents_out);
  }
  model = nullptr;  // the Transformer's memory goes before the VAE decodes
  views.clear();
  release_cached_memory(device);

  const auto decoding = Clock::now();
  torch::Tensor video;
  {
    torch::NoGradGuard no_grad;
    video = vae->decode_latents(latents, tiling);  // (1, 3, T, H, W)
  }
  const torch::Tensor frames = video_to_frames(video);
  const double decode_s = seconds_since(decoding);
  const std::string encoder = write_mp4(o.output, frames, o.fps);
  spdlog::info("sample: {} ({} frames, {}x{} (width x height), {} at {} fps); sampling {:.2f} s ({:.3f} s/step), VAE decode {:.2f} s, "
               "{:.2f} s per video in all",
               o.output, frames.size(0), frames.size(2), frames.size(1), encoder, o.fps, sample_s,
               sample_s / static_cast<double>(o.steps), decode_s, seconds_since(started));
}

}  // namespace tt
