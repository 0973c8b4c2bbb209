// Where training batches come from: cached latents (data.source: latents, pipeline/latent_dataset)
// or raw videos (data.source: video): each row's clip is sampled, decoded (NVDEC on a GPU where it
// takes the stream), augmented (pipeline/clip_loader) and encoded by the frozen VAE
// (model/vae), its text embeddings read from the row's file. app/prefetch runs get_batch ahead of
// the step on its own thread and CUDA stream; prepare() lets data_pipeline.workers threads decode
// the clips of later batches meanwhile, so the VAE is the only stage the producer waits on.
//
// Video failures: a sample whose clip cannot be loaded (damaged file, too short, unreadable) is
// logged with its manifest line, path and reason, counted, and replaced by the next row in manifest
// order (deterministic); more failures than data.max_failed_share of the rows stop the run with
// TT_ERR_DATA.
//
// Resume: a checkpoint keeps content_hash() and row_buckets(); make_training_data takes them back
// (StoredDataState), and the video source then reuses the stored bucket assignment instead of
// probing every file again, so a file that became unreadable since fails when it is loaded and is
// replaced like any failing sample, and the epochs are dealt as before.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "app/config.h"
#include "model/hunyuan_config.h"
#include "pipeline/latent_dataset.h"

namespace tt {

/// GPU time of the video pipeline over `samples` samples (CUDA runs; see core/gpu_timer.h: each
/// interval is its stream's time, so work of other streams at the same moment can lengthen it).
struct PipelineGpuTime {
  int64_t samples = 0;
  double before_vae_ms = 0;  // colour, rotation, gather, augment (decoding runs on NVDEC's engines)
  double vae_ms = 0;
};

class TrainingData {
 public:
  virtual ~TrainingData() = default;
  virtual int64_t size() const = 0;
  /// (C, T', H', W') of every sample's latents.
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
  /// Bucket (index into data.buckets) of every row, -1 for rows that fit none; empty when every
  /// sample has one shape (cached latents), and the trainer then batches samples in epoch order.
  virtual std::vector<int64_t> row_buckets() const { return {}; }
  /// Totals since the last call of the samples whose timing events have completed; never waits.
  virtual PipelineGpuTime take_gpu_time() { return {}; }
  /// The manifest line and source file of row `index` (for messages and preprocess's output).
  virtual std::pair<int64_t, std::string> row_origin(int64_t index) const = 0;
  /// Fingerprint of the data (app/content_hash): the manifest file's bytes plus the size and
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

/// From config.data.source; checks every row up front (TT_ERR_DATA naming the row). With `stored`
/// whose content_hash matches the data's and whose row_buckets is set, the video source takes that
/// bucket assignment (one entry per row, TT_ERR_CHECKPOINT when it does not fit the config)
/// instead of opening every file to derive it.
std::unique_ptr<TrainingData> make_training_data(const Config& config, const HunyuanVideoConfig& model,
                                                 torch::Device device, const StoredDataState* stored = nullptr);

}  // namespace tt
