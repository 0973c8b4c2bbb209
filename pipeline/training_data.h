// The interface the trainer, preprocess and the prefetcher draw samples through (TrainingData),
// what a checkpoint keeps of it (StoredDataState), and the cached-latent source: the rows of a
// latent manifest (pipeline/latent_dataset). The raw-video source is pipeline/video_training_data;
// app/training_data picks one from the config.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "pipeline/latent_dataset.h"

namespace tt {

/// GPU time of the video pipeline over `samples` samples (CUDA runs; see core/gpu_timer.h: each
/// interval is its stream's time, so work of other streams at the same moment can lengthen it).
struct PipelineGpuTime {
  int64_t samples = 0;
  double before_vae_ms = 0;  // colour, rotation, gather, augment (decoding runs on NVDEC's engines)
  double vae_ms = 0;
  double flow_ms = 0;        // the flow stage (its motion scores), over the same samples
  /// The flow stage's motion scores (pixels per sampled frame at the working resolution) of the
  /// samples whose scores have arrived, on any device (CPU runs too).
  int64_t motion_samples = 0;
  double motion_sum = 0;
};

class TrainingData {
 public:
  virtual ~TrainingData() = default;
  virtual int64_t size() const = 0;
  /// (C, T', H', W') of the first bucket's latents (every sample's, without buckets).
  virtual std::vector<int64_t> latent_shape() const = 0;
  virtual int64_t text_length() const = 0;
  /// One line for the start-up log.
  virtual std::string describe() const = 0;
  /// Samples `indices`, each of the epoch at the same position of `epochs` (video: the epoch varies
  /// frame sampling and augmentation).
  virtual LatentBatch get_batch(const std::vector<int64_t>& indices, const std::vector<int64_t>& epochs) = 0;
  /// A batch get_batch will be asked for later, in order: the video source starts loading its clips
  /// on data_pipeline.workers threads (the prefetch producer passes plans ahead of the one it loads).
  virtual void prepare(const std::vector<int64_t>& /*indices*/, const std::vector<int64_t>& /*epochs*/) {}
  /// One sample with no replacement: throws (kDecode, kData, kIo) when it cannot be loaded.
  /// Safe to call from several threads at once (teletron preprocess --jobs).
  virtual LatentSample load_one(int64_t index, int64_t epoch) = 0;
  /// Before a thread's first load_one of `indices`: runs the source's own GPU work once on blank
  /// input of each shape those rows give, on the calling thread and stream, and waits for it (video
  /// on CUDA: one encode per bucket; LibTorch keeps cuDNN's timed algorithm choices per thread, so a
  /// thread that skipped this would time them inside its first clips). Returns how many shapes ran.
  virtual int64_t prepare_encoder(const std::vector<int64_t>& /*indices*/) { return 0; }
  /// Bucket of every row (video: index into data.buckets, -1 for rows that fit none; cached
  /// latents: index of the row's latent shape among the distinct ones); empty when every sample
  /// has one shape, and the trainer then batches samples in epoch order.
  virtual std::vector<int64_t> row_buckets() const { return {}; }
  /// (C, T', H', W') of each bucket's latents, in the order row_buckets() numbers them (one shape,
  /// latent_shape(), without buckets).
  virtual std::vector<std::vector<int64_t>> bucket_latent_shapes() const { return {latent_shape()}; }
  /// Totals since the last call of the samples whose timing events (and motion scores) have
  /// completed; never waits.
  virtual PipelineGpuTime take_gpu_time() { return {}; }
  /// Device memory (bytes) the source's own GPU work may hold at once while a training step runs
  /// beside it (video: the VAE encoder's largest pass, measured at start-up on CUDA); the step's
  /// memory budget leaves it free. 0 where nothing runs beside the step.
  virtual double side_memory_bytes() const { return 0; }
  /// The manifest line and source file of row `index` (for messages and preprocess's output).
  virtual std::pair<int64_t, std::string> row_origin(int64_t index) const = 0;
  /// Fingerprint of the data (core/content_hash): the manifest file's bytes plus the size and
  /// modification time of every file its rows name (video and text embeddings, or latents). Paths
  /// enter only as the manifest spells them, so a moved dataset keeps its hash.
  virtual std::string content_hash() const = 0;
  /// What row `index`'s sample is made from, as text: its files with size and modification time,
  /// and (video) its bucket. preprocess keys its output files by it.
  virtual std::string row_identity(int64_t index) const = 0;
};

/// What a checkpoint remembers about the data it was trained on.
struct StoredDataState {
  std::string content_hash;          // content_hash() when the run started
  std::vector<int64_t> row_buckets;  // row_buckets() then; empty: derive the assignment
};

/// The cached-latent source over `options.manifest` (every row checked up front, TT_ERR_DATA naming
/// the row).
std::unique_ptr<TrainingData> make_latent_training_data(const LatentDatasetOptions& options);

}  // namespace tt
