// Bucket fitting (see buckets.h).
#include "pipeline/buckets.h"

#include "core/errors.h"

namespace tt {

BucketFit fit_bucket(const Bucket& bucket, const FrameSamplerOptions& sampler, const std::vector<double>& times,
                     int64_t width, int64_t height) {
  BucketFit fit;
  fit.size = width >= bucket.width && height >= bucket.height;
  // Motion mode spans what fps mode spans; only where the window starts differs.
  FrameSamplerOptions span = sampler;
  if (span.mode == FrameSampleMode::kMotion) span.mode = FrameSampleMode::kFps;
  try {
    (void)sample_frames(span, times, 0, 0, 0);
    fit.frames = true;
  } catch (const Error& error) {
    if (error.code() != ErrorCode::kData) throw;  // too short is an answer; anything else is a bug
  }
  return fit;
}

}  // namespace tt
