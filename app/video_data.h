// The data_pipeline.* section of the config turned into the pipeline's option structs: the frame
// sampler per bucket (samples_per_clip: null = the bucket's frame count; with data.source: video
// the VAE needs 4n+1, checked naming both keys), the augmentation, and where frames are decoded.
#pragma once

#include <torch/types.h>

#include <cstddef>

#include "app/config.h"
#include "pipeline/augment.h"
#include "pipeline/buckets.h"
#include "pipeline/frame_sampler.h"
#include "pipeline/motion.h"
#include "pipeline/video_reader.h"

namespace tt {

/// The sampler for data.buckets[bucket_index]. Throws kConfig naming the keys.
FrameSamplerOptions frame_sampler_options(const Config& config, size_t bucket_index);

/// data_pipeline.augment, checked; `dtype` is the output dtype (bf16 on CUDA, fp32 on the CPU).
AugmentOptions augment_options(const Config& config, torch::Dtype dtype);

/// data_pipeline.optical_flow as the flow stage's options (motion scores with its pairs at the
/// 256-px working resolution), checked: TT_ERR_CONFIG naming the key.
MotionOptions motion_options(const Config& config);

/// Reader options for video files: decoded for train.device (auto/cpu/cuda), NVDEC allowed when
/// data_pipeline.video_decoding is nvdec. `device_override` (e.g. a --device flag) wins when set.
VideoReaderOptions video_reader_options(const Config& config, const std::string& device_override = "");

}  // namespace tt
