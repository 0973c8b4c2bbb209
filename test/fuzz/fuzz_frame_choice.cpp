// Fuzz target (structured): frame choice (pipeline/frame_sampler.h: sample_frames, frames_needed,
// validate_vae_frame_count) and bucket fitting (pipeline/buckets.h: fit_bucket) on a frame index
// built from the input bytes as the video reader builds one (ascending pts times a time base), or
// on raw doubles (NaN, infinities, any order). Options take any value the config accepts
// (stride and frame counts: any int64 >= 1); only `samples` is kept below 2^16, because sample_frames
// allocates `samples` indices by design. Checks what sample_frames promises about its result.
#include <string>
#include <vector>

#include "app/video_data.h"
#include "pipeline/frame_sampler.h"
#include "pipeline/video_reader.h"
#include "test/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  tt::fuzz::ByteReader in(data, size);
  tt::FrameSamplerOptions options;
  options.mode = static_cast<tt::FrameSampleMode>(in.range(0, 3));
  options.samples = in.range(-2, 1 << 16);
  options.stride = in.flag() ? in.i64() : in.range(-2, 64);
  options.target_fps = in.flag() ? in.any_double() : static_cast<double>(in.range(1, 2400)) / 10.0;
  const uint64_t seed = in.u64();
  const int64_t epoch = in.i64();
  const int64_t sample_index = in.i64();
  tt::Bucket bucket;
  bucket.frames = in.flag() ? in.i64() : in.range(-2, 200);
  bucket.width = in.range(0, 4096);
  bucket.height = in.range(0, 4096);
  const int64_t width = in.range(0, 4096);
  const int64_t height = in.range(0, 4096);

  std::vector<double> times;
  const int64_t count = in.range(0, 4096);
  if (in.flag()) {
    for (int64_t i = 0; i < count && in.left() >= 8; ++i) times.push_back(in.any_double());
  } else {
    tt::FrameIndex index;
    index.time_base = static_cast<double>(in.range(1, 1001)) / static_cast<double>(in.range(1, 90000));
    int64_t pts = in.range(-100000, 100000);
    for (int64_t i = 0; i < count; ++i) {
      index.pts.push_back(pts);
      index.keyframe.push_back(i == 0);
      pts += in.range(0, 6000);
    }
    times = index.times();
  }
  const int64_t n = static_cast<int64_t>(times.size());

  try {
    tt::validate_vae_frame_count(bucket.frames, "samples_per_clip", "buckets[0].frames");
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  try {
    tt::validate_frame_sampler_options(options);
    const int64_t needed = tt::frames_needed(options);
    if (needed < 1) tt::fuzz::property_failed("frames_needed < 1");
    const std::vector<int64_t> frames = tt::sample_frames(options, times, seed, epoch, sample_index);
    if (static_cast<int64_t>(frames.size()) != options.samples) tt::fuzz::property_failed("wrong number of frames");
    for (size_t k = 0; k < frames.size(); ++k) {
      if (frames[k] < 0 || frames[k] >= n) tt::fuzz::property_failed("frame index out of range");
      if (k > 0 && options.mode != tt::FrameSampleMode::kFps && frames[k] <= frames[k - 1])
        tt::fuzz::property_failed("indices not strictly increasing");
      if (k > 0 && frames[k] < frames[k - 1]) tt::fuzz::property_failed("indices not sorted");
    }
    if (options.mode != tt::FrameSampleMode::kFps && n < needed)
      tt::fuzz::property_failed("frames chosen from a clip shorter than frames_needed");
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  try {
    const tt::BucketFit fit = tt::fit_bucket(bucket, options, times, width, height);
    if (fit.size != (width >= bucket.width && height >= bucket.height)) tt::fuzz::property_failed("fit.size wrong");
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  return 0;
}
