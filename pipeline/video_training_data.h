// The raw-video TrainingData source (data.source: video). Every manifest row is checked up front
// (a usable line, a video file that exists, text embeddings of the right shapes and one text
// length) and given a bucket; each sample's clip is sampled, decoded (NVDEC on a GPU where it takes
// the stream), augmented (pipeline/clip_loader, on `workers` threads ahead of the batch through
// prepare()) and encoded by the frozen VAE (model/vae) on the calling thread's stream; its text
// embeddings come from the row's file.
//
// Failures: a sample whose clip cannot be loaded (damaged file, too short, unreadable) is logged
// with its manifest line, path and reason, counted, and replaced by the next row of its bucket in
// manifest order (deterministic); more failures than max_failed_share of the rows stop the run
// with TT_ERR_DATA (pipeline/failure_budget).
//
// Resume: a checkpoint keeps content_hash() and row_buckets(); given them back (StoredDataState)
// with a matching hash, the source reuses the stored bucket assignment instead of probing every
// file again, so a file that became unreadable since fails when it is loaded and is replaced like
// any failing sample, and the epochs are dealt as before.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "pipeline/augment.h"
#include "pipeline/buckets.h"
#include "pipeline/frame_sampler.h"
#include "pipeline/motion.h"
#include "pipeline/training_data.h"
#include "pipeline/video_reader.h"

namespace tt {

/// The frozen VAE that encodes the clips.
struct VideoVaeOptions {
  std::string preset = "hunyuan";      // hunyuan | tiny (model/vae.h)
  std::optional<std::string> weights;  // the VAE's weights; "random": fixed random weights (benchmarks); none: tiny only
  std::string tiling = "auto";         // auto (diffusers' default) | on | off
  int64_t tile_batch = 0;              // tiles / frame windows of one shape encoded together; 0 = auto
  double memory_share = 0.25;          // CUDA: the most of the GPU the encoder's largest pass may take
  bool fused_padding = true;           // VaeRuntime::norm_pads and fold_bias
  bool gemm_kernels = true;            // VaeRuntime::gemm_first_and_attention
  bool cuda_graphs = false;            // VaeRuntime::cuda_graphs
};

struct VideoTrainingOptions {
  std::string manifest;                       // the video manifest (pipeline/video_manifest.h)
  std::string text_cache;                     // captions' embeddings (pipeline/text_cache.h); "": beside the manifest
  std::vector<Bucket> buckets;                // at least one
  std::vector<FrameSamplerOptions> samplers;  // one per bucket, each taking its bucket's frame count
  VideoReaderOptions reader;                  // reader.device: where frames are decoded and augmented
  AugmentOptions augment;                     // its dtype is set to the VAE's input dtype
  VideoVaeOptions vae;
  int64_t latent_channels = 16;               // the model's: checked against the VAE
  int64_t text_dim = 4096, pooled_dim = 768;  // the model's: checked against every row's embeddings
  int64_t workers = 0;                        // clip-loading threads (0: load in get_batch)
  double max_failed_share = 0.01;
  /// Rows whose motion score (<manifest>.motion.json, pipeline/motion.h) is outside [min, max] are
  /// left out before anything else; a row without a current score is TT_ERR_CONFIG.
  std::optional<double> min_motion, max_motion;
  /// The flow stage: each sample's motion score (pipeline/motion.h sample_motion) from its frames on
  /// the VAE's device, right before the encode, with motion.flow's algorithm (none: no stage); the
  /// scores and the stage's GPU time come back through take_gpu_time.
  MotionOptions motion;
  uint64_t seed = 0;                          // with (epoch, row): each sample's frame choice and augmentation
};

/// The source on `device` (where the VAE runs). With `stored` whose content_hash matches the data's
/// and whose row_buckets is set, takes that bucket assignment (TT_ERR_CHECKPOINT when it does not
/// fit the buckets) instead of opening every file. Sets cuDNN's benchmark flag on CUDA from
/// TELETRON_CUDNN_BENCHMARK (on unless "0").
std::unique_ptr<TrainingData> make_video_training_data(const VideoTrainingOptions& options, torch::Device device,
                                                       const StoredDataState* stored = nullptr);

}  // namespace tt
