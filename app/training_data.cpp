// TrainingData from the config (see training_data.h).
#include "app/training_data.h"

#include "app/video_data.h"
#include "core/errors.h"
#include "pipeline/video_training_data.h"

namespace tt {

std::unique_ptr<TrainingData> make_training_data(const Config& config, const HunyuanVideoConfig& model,
                                                 torch::Device device, const StoredDataState* stored) {
  if (config.data.source != "video") {
    LatentDatasetOptions options;
    options.manifest = config.data.manifest;
    options.latent_channels = model.out_channels;  // what the VAE wrote (16)
    options.text_dim = model.text_embed_dim;
    options.pooled_dim = model.pooled_projection_dim;
    return make_latent_training_data(options);
  }
  VideoTrainingOptions options;
  options.manifest = config.data.manifest;
  options.text_cache = config.data.text_cache.value_or("");
  options.buckets = config.data.buckets;
  for (size_t b = 0; b < options.buckets.size(); ++b) {
    options.samplers.push_back(frame_sampler_options(config, b));
    TT_CHECK_HINT(options.samplers.back().samples == options.buckets[b].frames, ErrorCode::kConfig,
                  "leave samples_per_clip null (each bucket's frame count)",
                  "tele_tron.data_pipeline.frame_sampler.samples_per_clip (", options.samplers.back().samples,
                  ") differs from tele_tron.data.buckets[", b, "].frames (", options.buckets[b].frames, ")");
  }
  options.reader = video_reader_options(config);
  // video_decoding: cpu is the CPU path end to end (decode, colour, augment); the clip goes to the
  // GPU for the VAE from pinned memory. nvdec keeps every stage after demuxing on the GPU.
  options.reader.device = config.data_pipeline.video_decoding == "cpu" ? torch::Device(torch::kCPU) : device;
  options.augment = augment_options(config, device.is_cuda() ? torch::kBFloat16 : torch::kFloat32);
  options.vae.preset = config.vae.preset;
  options.vae.weights = config.vae.weights;
  options.vae.tiling = config.vae.tiling;
  options.vae.tile_batch = config.vae.tile_batch;
  options.vae.memory_share = config.vae.memory_share;
  options.vae.fused_padding = config.vae.fused_padding;
  options.vae.gemm_kernels = config.vae.gemm_kernels;
  options.vae.cuda_graphs = config.vae.cuda_graphs;
  options.latent_channels = model.out_channels;
  options.text_dim = model.text_embed_dim;
  options.pooled_dim = model.pooled_projection_dim;
  options.workers = config.data_pipeline.workers;
  options.max_failed_share = config.data.max_failed_share;
  options.min_motion = config.data.min_motion;
  options.max_motion = config.data.max_motion;
  options.motion = motion_options(config);
  options.seed = static_cast<uint64_t>(config.train.seed);
  return make_video_training_data(options, device, stored);
}

}  // namespace tt
