// Config -> pipeline options (see video_data.h).
#include "app/video_data.h"

#include "core/device.h"
#include "core/errors.h"

namespace tt {

FrameSamplerOptions frame_sampler_options(const Config& config, size_t bucket_index) {
  TT_ASSERT(bucket_index < config.data.buckets.size(), "bucket ", bucket_index, " of ", config.data.buckets.size());
  const FrameSamplerSection& section = config.data_pipeline.frame_sampler;
  const Bucket& bucket = config.data.buckets[bucket_index];
  FrameSamplerOptions options;
  const bool known = parse_frame_sample_mode(section.mode, &options.mode);
  TT_CHECK_HINT(known, ErrorCode::kConfig, "use uniform, stratified, random, fps or motion",
                "tele_tron.data_pipeline.frame_sampler.mode: unknown mode '", section.mode, "'");
  const std::string frames_key = str_cat("tele_tron.data.buckets[", bucket_index, "].frames");
  // null = the bucket's frame count. Frames from videos go through the VAE (data.source: video),
  // whose 4x temporal compression with a causal first frame takes 4n+1 frames.
  options.samples = section.samples_per_clip.value_or(bucket.frames);
  if (config.data.source == "video")
    validate_vae_frame_count(options.samples, "tele_tron.data_pipeline.frame_sampler.samples_per_clip", frames_key);
  options.stride = section.stride;
  if (options.mode == FrameSampleMode::kFps || options.mode == FrameSampleMode::kMotion) {
    TT_CHECK_HINT(section.target_fps.has_value(), ErrorCode::kConfig, "e.g. target_fps: 24",
                  "tele_tron.data_pipeline.frame_sampler.target_fps: mode ", section.mode, " needs a target_fps");
    options.target_fps = *section.target_fps;
  }
  validate_frame_sampler_options(options);
  return options;
}

AugmentOptions augment_options(const Config& config, torch::Dtype dtype) {
  const AugmentSection& section = config.data_pipeline.augment;
  AugmentOptions options;
  options.flip = section.flip;
  options.crop = section.crop == "center" ? CropMode::kCenter : CropMode::kRandom;
  options.brightness = section.brightness;
  options.contrast = section.contrast;
  options.saturation = section.saturation;
  options.hue = section.hue;
  options.dtype = dtype;
  validate_augment_options(options);
  return options;
}

MotionOptions motion_options(const Config& config) {
  const OpticalFlowSection& section = config.data_pipeline.optical_flow;
  MotionOptions options;
  options.pairs = section.pairs;
  FlowOptions& flow = options.flow;
  flow.algorithm = section.algorithm;
  flow.fallback = section.fallback;
  flow.warp_mode = section.warp_mode;
  TT_CHECK_HINT(section.grid == 1 || section.grid == 2 || section.grid == 4, ErrorCode::kConfig, "use 1, 2 or 4",
                "tele_tron.data_pipeline.optical_flow.grid: NVOFA's output grids are 1, 2 and 4 pixels, got ",
                section.grid);
  flow.nvofa.grid = section.grid;
  flow.nvofa.preset = section.preset == "slow" ? NvofaPreset::kSlow
                      : section.preset == "fast" ? NvofaPreset::kFast
                                                 : NvofaPreset::kMedium;
  flow.raft_weights = section.weights;
  return options;
}

VideoReaderOptions video_reader_options(const Config& config, const std::string& device_override) {
  VideoReaderOptions options;
  const bool overridden = !device_override.empty();
  options.device = resolve_device(overridden ? device_override : config.train.device,
                                  overridden ? "--device" : "tele_tron.train.device");
  options.allow_nvdec = config.data_pipeline.video_decoding == "nvdec";
  return options;
}

}  // namespace tt
