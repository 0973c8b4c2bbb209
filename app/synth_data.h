// `teletron synth-data`: a small deterministic cached-latent dataset of moving Gaussian blobs in
// latent space, with synthetic text embeddings that encode each clip's blob parameters (so the
// caption really conditions the video and a model can learn it). Used by the quickstart and tests.
#pragma once

#include <cstdint>
#include <string>

namespace tt {

struct SynthDataOptions {
  /// Output folder; gets manifest.jsonl and sample_NNNNN.safetensors.
  std::string output;
  /// Number of samples.
  int64_t samples = 64;
  /// Latent shape (channels, T', H', W').
  int64_t channels = 16, frames = 3, height = 16, width = 16;
  /// Text tokens per sample (L) and widths.
  int64_t text_length = 32;
  int64_t text_dim = 64;
  int64_t pooled_dim = 32;
  uint64_t seed = 1234;
};

/// Writes the dataset; returns the manifest path. Existing files are overwritten.
std::string write_synthetic_latents(const SynthDataOptions& options);

}  // namespace tt
