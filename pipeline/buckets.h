// Buckets: the clip shapes (frames x height x width) training batches come in, and how a clip
// (its frame times and displayed size) meets one with that bucket's frame sampler.
#pragma once

#include <cstdint>
#include <vector>

#include "pipeline/frame_sampler.h"

namespace tt {

/// One entry of data.buckets: every sample of a batch has this shape.
struct Bucket {
  int64_t frames = 33, height = 480, width = 832;

  bool operator==(const Bucket&) const = default;
};

/// How a clip meets a bucket.
struct BucketFit {
  bool frames = false;  // the sampler finds its frames in the clip
  bool size = false;    // the clip is at least the bucket's width and height (no upscaling)
  bool both() const { return frames && size; }
};
BucketFit fit_bucket(const Bucket& bucket, const FrameSamplerOptions& sampler, const std::vector<double>& times,
                     int64_t width, int64_t height);

}  // namespace tt
