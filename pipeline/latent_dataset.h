// The cached-latent dataset: a JSONL manifest whose rows name safetensors files holding
// `latents` (16, T', H', W') bf16/fp32 (already multiplied by the VAE scaling factor),
// `text_states` (L, text_dim), `text_mask` (L) bool/uint8/int and `pooled` (pooled_dim).
// Relative paths inside the manifest are relative to the manifest's folder.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

struct LatentDatasetOptions {
  /// Path of the JSONL manifest.
  std::string manifest;
  /// Channels the model expects in `latents` (dim 0).
  int64_t latent_channels = 16;
  /// Width of `text_states` rows (the model's text_embed_dim).
  int64_t text_dim = 4096;
  /// Length of `pooled` (the model's pooled_projection_dim).
  int64_t pooled_dim = 768;
};

struct LatentSample {
  torch::Tensor latents;      // (C, T', H', W') fp32
  torch::Tensor text_states;  // (L, text_dim) fp32
  torch::Tensor text_mask;    // (L) bool
  torch::Tensor pooled;       // (pooled_dim) fp32
};

/// What is wrong with a loaded sample's values, or "" when nothing is: a text_mask that marks no
/// token (the refiner's masked mean would average nothing, and the sample carries no text), or a
/// non-finite value in latents, text_states or pooled (it would surface as TT_ERR_NAN steps later).
/// Undefined tensors are skipped (a video sample is checked before its latents exist).
std::string check_sample_values(const LatentSample& sample);

struct LatentBatch {
  torch::Tensor latents;      // (B, C, T', H', W') fp32
  torch::Tensor text_states;  // (B, L, text_dim) fp32
  torch::Tensor text_mask;    // (B, L) bool
  torch::Tensor pooled;       // (B, pooled_dim) fp32
};

class LatentDataset {
 public:
  /// Parses the manifest and checks every row's file header (exists, has the four tensors with
  /// the expected ranks, dtypes and widths; L equal across rows). Any bad row throws kData naming
  /// the manifest, the 1-based line number, the file and the problem. Rows may differ in latent
  /// shape: each distinct shape is a bucket (teletron preprocess writes one per data.buckets entry).
  explicit LatentDataset(const LatentDatasetOptions& options);

  int64_t size() const { return static_cast<int64_t>(files_.size()); }
  /// The first row's latent shape (C, T', H', W') and the text length L every row shares.
  const std::vector<int64_t>& latent_shape() const { return shapes_.front(); }
  /// The distinct latent shapes, in the order of their first row: the buckets.
  const std::vector<std::vector<int64_t>>& bucket_shapes() const { return shapes_; }
  /// Each row's bucket (index into bucket_shapes()); empty when every row has one shape.
  std::vector<int64_t> row_buckets() const { return shapes_.size() > 1 ? row_bucket_ : std::vector<int64_t>{}; }
  int64_t text_length() const { return text_length_; }
  const std::string& file(int64_t index) const { return files_[index]; }

  /// Reads one sample (fp32/bool CPU tensors). Throws kData naming the row on a read failure.
  LatentSample get(int64_t index) const;
  /// Reads and stacks samples into a batch (of one bucket).
  LatentBatch get_batch(const std::vector<int64_t>& indices) const;

 private:
  LatentDatasetOptions options_;
  std::vector<std::string> files_;   // absolute or manifest-relative resolved paths
  std::vector<int64_t> lines_;       // 1-based manifest line of each row
  std::vector<std::vector<int64_t>> shapes_;  // the buckets' latent shapes
  std::vector<int64_t> row_bucket_;           // each row's index into shapes_
  int64_t text_length_ = 0;
};

/// Deterministic epoch order: a permutation of [0, n) from (seed, epoch).
std::vector<int64_t> epoch_order(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace tt
