// Validation videos during training (`validation: {every, text_embeddings, ...}`): every N optimizer
// steps the trainer hands its model here; a video is sampled from the current weights with the
// flow-matching sampler (model/flow_sampler.h), decoded by the config's VAE and written to
// <run>/samples/step_<step>.mp4, and with TensorBoard on also as an animated GIF image summary.
//
// Called between steps only (after the optimizer step, outside any CUDA graph capture), with the
// model switched to eval mode (LoRA dropout off) and back. It draws no random numbers from the
// training streams: the noise is keyed by validation.seed (cuda/keyed_random.h), the forward takes
// no generator, so a run with validation trains exactly as one without it, and resumes alike.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <filesystem>
#include <string>

#include "app/config.h"
#include "model/flow_sampler.h"
#include "model/hunyuan_config.h"
#include "model/vae_decoder.h"

namespace tt {

class HunyuanVideoTransformerImpl;
class TensorBoardWriter;

/// validation.prompt's embeddings file in data.text_cache (as encode-text named it); TT_ERR_DATA
/// saying to run encode-text when the cache or the file is missing.
std::string validation_prompt_file(const Config& config);

class Validation {
 public:
  /// Checks the validation section against the model (kConfig naming the key) and loads the prompt
  /// and the VAE decoder onto `device`: errors surface before step 0.
  Validation(const Config& config, const HunyuanVideoConfig& model, torch::Device device,
             const std::filesystem::path& run_dir);

  /// Whether optimizer step `step` (1-based, just finished) gets a video.
  bool due(int64_t step) const { return every_ > 0 && step % every_ == 0; }

  /// Samples a video with `model` (its mode restored afterwards) under `autocast` (the training
  /// forward's setting), writes the MP4 and, when `tensorboard` is given, the GIF. Returns the MP4's
  /// path. Logs the time it took.
  std::string run(HunyuanVideoTransformerImpl& model, int64_t step, bool autocast, at::ScalarType autocast_dtype,
                  TensorBoardWriter* tensorboard);

 private:
  int64_t every_ = 0;
  double fps_ = 24.0;
  std::vector<int64_t> shape_;  // (1, C, T', H', W')
  uint64_t seed_ = 0;
  FlowSamplerOptions sampler_;
  FlowSamplerText text_;
  HunyuanVaeDecoder vae_{nullptr};
  VaeDecodeTiling tiling_;
  std::filesystem::path folder_;  // <run>/samples
  torch::Device device_{torch::kCPU};
};

}  // namespace tt
