// TrainingData sources (see training_data.h).
#include "app/training_data.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <filesystem>

#include "app/video_data.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "model/vae.h"
#include "pipeline/clip_loader.h"
#include "pipeline/video_manifest.h"
#include "pipeline/video_reader.h"

namespace tt {
namespace {

class LatentTrainingData : public TrainingData {
 public:
  LatentTrainingData(const Config& config, const HunyuanVideoConfig& model) : manifest_(config.data.manifest) {
    LatentDatasetOptions options;
    options.manifest = config.data.manifest;
    options.latent_channels = model.out_channels;  // what the VAE wrote (16)
    options.text_dim = model.text_embed_dim;
    options.pooled_dim = model.pooled_projection_dim;
    dataset_ = std::make_unique<LatentDataset>(options);
  }
  int64_t size() const override { return dataset_->size(); }
  std::vector<int64_t> latent_shape() const override { return dataset_->latent_shape(); }
  int64_t text_length() const override { return dataset_->text_length(); }
  std::string describe() const override { return str_cat(manifest_, " (cached latents)"); }
  LatentBatch get_batch(const std::vector<int64_t>& indices, const std::vector<int64_t>&) override {
    return dataset_->get_batch(indices);
  }
  LatentSample load_one(int64_t index, int64_t) override { return dataset_->get(index); }
  std::pair<int64_t, std::string> row_origin(int64_t index) const override { return {index + 1, dataset_->file(index)}; }

 private:
  std::string manifest_;
  std::unique_ptr<LatentDataset> dataset_;
};

// Random but fixed weights for the tiny VAE preset (tests and dry runs): the same on every machine.
void randomise_vae(HunyuanVae& vae) {
  torch::NoGradGuard no_grad;
  auto generator = at::detail::createCPUGenerator(20241203);
  for (auto& item : vae->named_parameters()) {
    torch::Tensor& p = item.value();
    const bool gain = item.key().find("norm") != std::string::npos && item.key().rfind(".weight") == item.key().size() - 7;
    if (p.dim() == 1) {
      p.copy_(gain ? torch::ones_like(p) : torch::zeros_like(p));
    } else {
      const double fan_in = static_cast<double>(p[0].numel());
      p.copy_(at::normal(0.0, 1.0 / std::sqrt(fan_in), p.sizes(), generator));
    }
  }
}

class VideoTrainingData : public TrainingData {
 public:
  VideoTrainingData(const Config& config, const HunyuanVideoConfig& model, torch::Device device)
      : config_(config), device_(device) {
    TT_CHECK_HINT(config.data.buckets.size() == 1, ErrorCode::kConfig,
                  "list one bucket (bucketing several sizes arrives with the prefetch pipeline)",
                  "tele_tron.data.buckets: data.source video takes one bucket for now, got ",
                  config.data.buckets.size());
    bucket_ = config.data.buckets.front();
    sampler_ = frame_sampler_options(config, 0);
    TT_CHECK_HINT(sampler_.samples == bucket_.frames, ErrorCode::kConfig,
                  "leave samples_per_clip null (the bucket's frame count) or set it to the bucket's frames",
                  "tele_tron.data_pipeline.frame_sampler.samples_per_clip (", sampler_.samples,
                  ") differs from tele_tron.data.buckets[0].frames (", bucket_.frames, ")");
    reader_options_ = video_reader_options(config);
    reader_options_.device = device;
    vae_dtype_ = device.is_cuda() ? torch::kBFloat16 : torch::kFloat32;
    augment_ = augment_options(config, vae_dtype_);
    load_vae(config, model);
    check_rows(config, model);
    allowed_failures_ = static_cast<int64_t>(config.data.max_failed_share * static_cast<double>(rows_.size()));
  }

  int64_t size() const override { return static_cast<int64_t>(rows_.size()); }
  std::vector<int64_t> latent_shape() const override { return latent_shape_; }
  int64_t text_length() const override { return text_length_; }
  std::string describe() const override {
    return str_cat(config_.data.manifest, " (videos -> ", bucket_.frames, "x", bucket_.height, "x", bucket_.width,
                   ", ", frame_sample_mode_name(sampler_.mode), " sampling, VAE ", config_.vae.preset,
                   config_.vae.weights ? " from " + *config_.vae.weights : std::string(" (random weights)"), ")");
  }

  LatentBatch get_batch(const std::vector<int64_t>& indices, const std::vector<int64_t>& epochs) override {
    std::vector<torch::Tensor> latents, states, masks, pooled;
    for (size_t i = 0; i < indices.size(); ++i) {
      Sample sample = load_with_replacement(indices[i], epochs[i]);
      latents.push_back(sample.latents);
      states.push_back(sample.text_states);
      masks.push_back(sample.text_mask);
      pooled.push_back(sample.pooled);
    }
    return {torch::stack(latents), torch::stack(states), torch::stack(masks), torch::stack(pooled)};
  }

 private:
  using Sample = LatentSample;

 public:
  LatentSample load_one(int64_t index, int64_t epoch) override { return load(index, epoch); }
  std::pair<int64_t, std::string> row_origin(int64_t index) const override {
    const VideoManifestRow& row = rows_[static_cast<size_t>(index)];
    return {row.line, row.video};
  }

 private:

  void load_vae(const Config& config, const HunyuanVideoConfig& model) {
    const HunyuanVaeConfig preset = hunyuan_vae_preset(config.vae.preset);
    if (config.vae.weights) {
      vae_ = load_hunyuan_vae(*config.vae.weights, preset, device_, vae_dtype_);
    } else {
      TT_CHECK_HINT(config.vae.preset == "tiny", ErrorCode::kConfig,
                    "point tele_tron.vae.weights at the HunyuanVideo VAE (a diffusers folder's vae/)",
                    "tele_tron.vae.weights: the ", config.vae.preset, " VAE needs its weights");
      vae_ = HunyuanVae(preset);
      randomise_vae(vae_);
      vae_->to(device_, vae_dtype_);
      vae_->eval();
      for (auto& p : vae_->parameters()) p.set_requires_grad(false);
    }
    TT_CHECK_HINT(vae_->config().latent_channels == model.out_channels, ErrorCode::kConfig,
                  "use a VAE and a model that agree on latent channels", "the VAE gives ",
                  vae_->config().latent_channels, " latent channels, the model takes ", model.out_channels);
    latent_shape_ = vae_latent_shape(vae_->config(), bucket_.frames, bucket_.height, bucket_.width);
    if (config.vae.tiling == "on") {
      tiling_.temporal = true;
      tiling_.spatial = true;
    } else if (config.vae.tiling == "off") {
      tiling_.temporal = false;
      tiling_.spatial = false;
    }  // auto: diffusers' default (windows of 16 + 1 frames, no spatial tiles)
  }

  // Every row up front: a usable line, a video file that exists, embeddings of the right shapes and
  // one text length. Decoding problems are found while training (or before, by validate-data).
  void check_rows(const Config& config, const HunyuanVideoConfig& model) {
    rows_ = read_video_manifest(config.data.manifest);
    for (const VideoManifestRow& row : rows_) {
      const std::string where = str_cat(config.data.manifest, ":", row.line);
      TT_CHECK_HINT(row.error.empty(), ErrorCode::kData, "fix the row (teletron validate-data checks them all)", where,
                    ": ", row.error);
      std::error_code ignored;
      TT_CHECK_HINT(std::filesystem::is_regular_file(row.video, ignored), ErrorCode::kData,
                    "paths in the manifest are relative to the manifest's folder", where, ": video not found (",
                    row.video, ")");
      TT_CHECK_HINT(!row.text_embeddings.empty(), ErrorCode::kData,
                    "each row needs {\"video\": ..., \"text_embeddings\": \"x.safetensors\"} for training", where,
                    ": no \"text_embeddings\"");
      const std::string problem = check_text_embeddings(row.text_embeddings, model.text_embed_dim,
                                                        model.pooled_projection_dim);
      TT_CHECK_HINT(problem.empty(), ErrorCode::kData, "re-create the embeddings file", where, ": ", problem);
      const int64_t length = safetensors::read_header(row.text_embeddings).tensors.at("text_states").shape[0];
      TT_CHECK_HINT(text_length_ == 0 || length == text_length_, ErrorCode::kData,
                    "pad every row's text to one length", where, ": text length ", length, " differs from ",
                    text_length_, " in earlier rows");
      text_length_ = length;
    }
  }

  Sample load(int64_t index, int64_t epoch) {
    const VideoManifestRow& row = rows_[static_cast<size_t>(index)];
    VideoReader reader(row.video, reader_options_);
    ClipRequest request;
    request.sampler = sampler_;
    request.augment = augment_;
    request.height = bucket_.height;
    request.width = bucket_.width;
    request.seed = static_cast<uint64_t>(config_.train.seed);
    request.epoch = epoch;
    request.sample_index = index;
    const LoadedClip clip = load_clip(reader, request);
    Sample sample;
    {
      torch::NoGradGuard no_grad;
      const torch::Tensor pixels = clip.pixels.unsqueeze(0).to(device_, vae_dtype_);  // (1, 3, T, H, W)
      sample.latents = vae_->encode_mean(pixels, tiling_).squeeze(0).to(torch::kFloat32);
    }
    auto text = safetensors::load(row.text_embeddings, {"text_states", "text_mask", "pooled"});
    sample.text_states = text.at("text_states").to(torch::kFloat32);
    sample.text_mask = text.at("text_mask").to(torch::kBool);
    sample.pooled = text.at("pooled").to(torch::kFloat32);
    return sample;
  }

  Sample load_with_replacement(int64_t index, int64_t epoch) {
    const int64_t rows = size();
    for (int64_t attempt = 0; attempt < rows; ++attempt) {
      const int64_t candidate = (index + attempt) % rows;
      try {
        return load(candidate, epoch);
      } catch (const Error& error) {
        if (error.code() != ErrorCode::kDecode && error.code() != ErrorCode::kData && error.code() != ErrorCode::kIo)
          throw;
        ++failed_;
        const VideoManifestRow& row = rows_[static_cast<size_t>(candidate)];
        spdlog::warn("skipping sample (line {} of {}, {}): {}; {} failed so far", row.line, config_.data.manifest,
                     row.video, error.what(), failed_);
        TT_CHECK_HINT(failed_ <= allowed_failures_, ErrorCode::kData,
                      "run `teletron validate-data` on the config and fix or drop the files it lists, or raise "
                      "tele_tron.data.max_failed_share",
                      failed_, " samples failed to load, more than data.max_failed_share (",
                      config_.data.max_failed_share, ") of ", rows, " rows; the last: ", row.video);
      }
    }
    throw Error(ErrorCode::kData, "no sample of the manifest could be loaded");
  }

  Config config_;
  torch::Device device_;
  Bucket bucket_;
  FrameSamplerOptions sampler_;
  AugmentOptions augment_;
  VideoReaderOptions reader_options_;
  torch::Dtype vae_dtype_ = torch::kFloat32;
  HunyuanVae vae_{nullptr};
  VaeTiling tiling_;
  std::vector<VideoManifestRow> rows_;
  std::vector<int64_t> latent_shape_;
  int64_t text_length_ = 0;
  int64_t failed_ = 0;
  int64_t allowed_failures_ = 0;
};

}  // namespace

std::unique_ptr<TrainingData> make_training_data(const Config& config, const HunyuanVideoConfig& model,
                                                 torch::Device device) {
  if (config.data.source == "video") return std::make_unique<VideoTrainingData>(config, model, device);
  return std::make_unique<LatentTrainingData>(config, model);
}

}  // namespace tt
