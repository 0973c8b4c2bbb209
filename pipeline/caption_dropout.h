// data.caption_dropout: a share p of the training samples get the empty caption's embedding
// (pipeline/text_cache.h load_empty_caption) instead of their own text, the unconditional samples
// that classifier-free guidance needs. Which samples is decided from (seed, step, the sample's
// place in the global batch) through the per-sample stream of pipeline/sample_rng.h, as the noise
// and sigma of model/flow_matching are keyed, so a resumed run drops the same samples as an
// uninterrupted one, however the global batch is cut into micro-batches.
#pragma once

#include <cstdint>

#include "pipeline/latent_dataset.h"

namespace tt {

inline constexpr uint64_t kRngCaptionDropout = 0x63617074ULL;  // "capt" (pipeline/sample_rng.h)

/// Whether sample `index` of the global batch of step `step` trains on the empty caption.
bool caption_dropped(double p, uint64_t seed, int64_t step, int64_t index);

struct CaptionDropout {
  double p = 0.0;
  uint64_t seed = 0;
  LatentSample empty;  // text_states (L, D) fp32, text_mask (L) bool, pooled (P) fp32; latents unused

  /// `batch` (B samples: the global batch's first..first+B-1 of step `step`) with the dropped
  /// samples' text_states, text_mask and pooled replaced by the empty caption's, each on its
  /// tensor's device; the batch itself when none is dropped (the tensors are never written in
  /// place: a micro-batch may be a view of a batch another attempt reads again).
  LatentBatch apply(const LatentBatch& batch, int64_t step, int64_t first) const;
};

}  // namespace tt
