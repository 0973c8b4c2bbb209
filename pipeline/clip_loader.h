// One training sample's pixels from one video: frame sampling (deterministic from seed, epoch and
// sample index) -> decode of the distinct sampled frames only -> colour conversion -> display
// rotation -> gather (repeats of fps mode included, on the frames' device) -> the fused augment.
// On a CUDA reader every step after demuxing runs on the GPU (NVDEC where it takes the stream).
#pragma once

#include <memory>

#include "core/gpu_timer.h"

#include <torch/types.h>

#include <cstdint>
#include <vector>

#include "pipeline/augment.h"
#include "pipeline/frame_sampler.h"
#include "pipeline/video_reader.h"

namespace tt {

struct ClipRequest {
  FrameSamplerOptions sampler;
  AugmentOptions augment;
  int64_t height = 480;  // output size (the bucket's)
  int64_t width = 832;
  uint64_t seed = 0;
  int64_t epoch = 0;
  int64_t sample_index = 0;
  // Time the GPU kernels after decoding (colour, rotation, gather, augment) with two CUDA events on
  // the current stream (LoadedClip::gpu_stages; read them later, nothing waits here).
  bool time_gpu_stages = false;
  /// The clip's motion profile, which the sampler's motion mode needs (shared: one per clip).
  std::shared_ptr<const MotionProfile> motion;
};

struct LoadedClip {
  torch::Tensor pixels;         // (3, T, height, width) augment.dtype in [-1, 1], on the reader's device
  std::vector<int64_t> frames;  // the sampled frame indices, in order (fps mode may repeat one)
  AugmentParams params;         // the augmentation drawn for this sample
  std::shared_ptr<GpuInterval> gpu_stages;  // with time_gpu_stages on a CUDA reader: the kernels' interval
};

/// Throws what the sampler and the reader throw (kData for a clip too short, kDecode for damage).
LoadedClip load_clip(VideoReader& reader, const ClipRequest& request);

}  // namespace tt
