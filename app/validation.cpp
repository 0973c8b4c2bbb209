// Validation videos during training (see validation.h).
#include "app/validation.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <chrono>
#include <cstdio>

#include "app/sample.h"
#include "core/autocast.h"
#include "core/errors.h"
#include "core/tensorboard.h"
#include "model/transformer.h"
#include "pipeline/text_cache.h"
#include "pipeline/video_writer.h"

namespace tt {
namespace {

// Puts the model back into the mode it had, also when sampling throws.
class EvalModeScope {
 public:
  explicit EvalModeScope(HunyuanVideoTransformerImpl& model) : model_(model), was_training_(model.is_training()) {
    model_.eval();
  }
  ~EvalModeScope() { model_.train(was_training_); }
  EvalModeScope(const EvalModeScope&) = delete;
  EvalModeScope& operator=(const EvalModeScope&) = delete;

 private:
  HunyuanVideoTransformerImpl& model_;
  bool was_training_;
};

}  // namespace

std::string validation_prompt_file(const Config& config) {
  TT_ASSERT(config.validation.prompt.has_value(), "validation_prompt_file without validation.prompt");
  const std::string folder = text_cache_folder(config.data.text_cache.value_or(""), config.data.manifest);
  const TextCache cache = open_text_cache(folder);
  const std::string hint = "run `teletron encode-text CONFIG` (it encodes validation.prompt with the captions)";
  TT_CHECK_HINT(!cache.identity.empty(), ErrorCode::kData, hint, "tele_tron.validation.prompt: the text cache ",
                folder, " holds no encoder.json (teletron encode-text writes it)");
  const std::string file = cache.file_of(*config.validation.prompt);
  std::error_code ignored;
  TT_CHECK_HINT(std::filesystem::is_regular_file(file, ignored), ErrorCode::kData, hint,
                "tele_tron.validation.prompt is not in the text cache ", folder, " (looked for ", file, ")");
  return file;
}

Validation::Validation(const Config& config, const HunyuanVideoConfig& model, torch::Device device,
                       const std::filesystem::path& run_dir)
    : device_(device) {
  const ValidationSection& v = config.validation;
  every_ = v.every;
  TT_CHECK_HINT(v.text_embeddings.has_value() || v.prompt.has_value(), ErrorCode::kConfig,
                "set tele_tron.validation.prompt (encoded by `teletron encode-text CONFIG`), or "
                "validation.text_embeddings to a prompt's embeddings file, or validation.every: 0",
                "tele_tron.validation.every is ", v.every, " but neither validation.prompt nor "
                "validation.text_embeddings is set");
  TT_CHECK_HINT(!(v.text_embeddings.has_value() && v.prompt.has_value()), ErrorCode::kConfig,
                "keep one of the two", "tele_tron.validation: both prompt and text_embeddings are set");
  const std::string embeddings = v.text_embeddings ? *v.text_embeddings : validation_prompt_file(config);
  TT_CHECK_HINT(model.in_channels == model.out_channels, ErrorCode::kConfig, "set validation.every: 0",
                "tele_tron.validation: the sampler makes text-to-video only; this model takes ", model.in_channels,
                " input channels for ", model.out_channels, " latent channels (image conditioning)");
  shape_ = flow_latent_shape(1, model.out_channels, v.frames, v.height, v.width,
                             "tele_tron.validation.frames/height/width");
  text_ = load_sampler_text(embeddings, model, device,
                            v.prompt ? "tele_tron.validation.prompt's embedding" : "tele_tron.validation.text_embeddings");
  vae_ = load_config_vae_decoder(config.vae, model.out_channels, device);
  tiling_ = vae_decode_tiling(config.vae);
  seed_ = static_cast<uint64_t>(v.seed);
  sampler_.steps = v.steps;
  sampler_.shift = v.flow_shift;
  sampler_.guidance = v.guidance;
  folder_ = run_dir / "samples";
  spdlog::info("validation: every {} steps, a {}x{}x{} video ({} sampler steps, flow_shift {}, guidance {}, seed {}) "
               "into {}",
               every_, v.frames, v.height, v.width, v.steps, v.flow_shift, v.guidance, v.seed, folder_.string());
}

std::string Validation::run(HunyuanVideoTransformerImpl& model, int64_t step, bool autocast,
                            at::ScalarType autocast_dtype, TensorBoardWriter* tensorboard) {
  const auto started = std::chrono::steady_clock::now();
  torch::Tensor latents;
  {
    EvalModeScope eval(model);
    AutocastScope scope(autocast, autocast_dtype, device_.type());
    FlowSamplerOptions options = sampler_;
    // The latents rounded as diffusers rounds them with a transformer in the autocast dtype.
    options.round_to = autocast && autocast_dtype == at::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
    const torch::Tensor noise = flow_initial_noise(shape_, seed_, device_);
    latents = sample_flow(model, noise, text_, options);
  }
  torch::Tensor frames;
  {
    torch::NoGradGuard no_grad;
    frames = video_to_frames(vae_->decode_latents(latents, tiling_));  // (T, H, W, 3) uint8
  }
  std::filesystem::create_directories(folder_);
  char name[64];
  std::snprintf(name, sizeof(name), "step_%06lld.mp4", static_cast<long long>(step));
  const std::string path = (folder_ / name).string();
  write_mp4(path, frames, fps_);
  if (tensorboard) {
    try {
      add_gif(*tensorboard, "validation/video", step, frames, fps_, TensorBoardWriter::now());
      tensorboard->flush();
    } catch (const Error& error) {
      // As for the scalars: TensorBoard output never stops training.
      spdlog::error("validation: the GIF for TensorBoard failed: {}", error.what());
    }
  }
  spdlog::info("validation: step {}: {} ({:.1f} s)", step, path,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count());
  return path;
}

}  // namespace tt
