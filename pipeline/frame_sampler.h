// Which frames of a clip one training sample uses. Five modes (uniform, stratified, random
// contiguous with stride, target fps by timestamps, target fps with the window drawn by motion), all
// deterministic from (seed, epoch,
// sample_index) through pipeline/sample_rng.h, so a resumed run sees the same frames. The result is
// a list of frame indices; the decoder decodes exactly those and the gather happens on the GPU.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

enum class FrameSampleMode {
  kUniform,     // evenly spaced, no randomness
  kStratified,  // one random frame inside each of `samples` equal strata
  kRandom,      // a random start, then `samples` frames `stride` apart
  kFps,         // frames nearest to start + k / target_fps on the presentation timestamps
  kMotion,      // as kFps, the start drawn by the clip's motion profile (see sample_frames)
};

/// How much a clip moves along its length: flow magnitudes (pixels per frame, pipeline/motion.h)
/// of frame pairs at positions `at` (the pair's middle as a fraction of the clip, 0 = first frame,
/// 1 = last; increasing), one `score` each. `teletron validate-data --motion` records it per clip.
struct MotionProfile {
  std::vector<double> at;
  std::vector<double> score;
};

struct FrameSamplerOptions {
  /// How frames are chosen (config: data_pipeline.frame_sampler.mode).
  FrameSampleMode mode = FrameSampleMode::kStratified;
  /// Frames per clip; app/ resolves samples_per_clip: null to the bucket's frame count.
  int64_t samples = 33;
  /// Random mode: distance in frames between consecutive samples (1 = contiguous).
  int64_t stride = 1;
  /// Fps mode: the sampling rate in frames per second (> 0).
  double target_fps = 0.0;
};

/// "uniform", "stratified", "random", "fps", "motion".
const char* frame_sample_mode_name(FrameSampleMode mode);
/// Parses a mode name; false when `name` is not one of the five.
bool parse_frame_sample_mode(const std::string& name, FrameSampleMode* mode);

/// Checks the options alone; throws kConfig naming the data_pipeline.frame_sampler key.
void validate_frame_sampler_options(const FrameSamplerOptions& options);

/// The frames one sample uses: `options.samples` indices into frame_times_s, sorted. Uniform,
/// stratified and random give strictly increasing indices; fps mode repeats a frame when the clip's
/// own rate is below target_fps (time resampling, as ffmpeg's fps filter does).
/// frame_times_s: presentation time of every frame in seconds, non-decreasing.
///
/// Motion mode (needs `motion`, the clip's profile): the window of fps mode, its start chosen
/// among kMotionCandidates starts spread evenly over the clip's free range with probability
/// proportional to the window's motion plus a floor of kMotionFloor times the clip's mean motion
/// (so the still parts of a moving clip are still seen now and then, and a clip that does not move
/// at all samples uniformly), then jittered uniformly within half a candidate spacing. A window's
/// motion is the mean of the profile, linearly interpolated (constant beyond its first and last
/// pair), at kMotionPoints points evenly across the window.
/// Throws kData ("clip has N frames, ... needs M") when the clip is too short for the mode, and
/// kConfig for invalid options or motion mode without a profile.
std::vector<int64_t> sample_frames(const FrameSamplerOptions& options,
                                   const std::vector<double>& frame_times_s, uint64_t seed, int64_t epoch,
                                   int64_t sample_index, const MotionProfile* motion = nullptr);

/// Motion mode's constants (see sample_frames).
constexpr int64_t kMotionCandidates = 16;
constexpr int64_t kMotionPoints = 8;
constexpr double kMotionFloor = 0.1;

/// The motion of the part [begin, end] (fractions of the clip) of `profile`, as motion mode weighs
/// a window (before the floor). An empty profile is 0.
double window_motion(const MotionProfile& profile, double begin, double end);

/// The fewest frames a clip needs for this mode (fps mode: at target_fps; the actual need follows
/// the timestamps, see sample_frames). validate-data reports clips below it.
int64_t frames_needed(const FrameSamplerOptions& options);
/// fps and motion modes: the seconds from the first sample's time to the last's, (samples - 1) /
/// target_fps, which the clip's frames must span.
double fps_window_seconds(const FrameSamplerOptions& options);

/// The VAE compresses time 4x with a causal first frame, so a clip must hold 4n+1 frames.
/// Throws kConfig naming both keys (e.g. tele_tron.data_pipeline.frame_sampler.samples_per_clip
/// and tele_tron.data.buckets[0].frames) with the nearest valid counts when `frames` is not 4n+1.
void validate_vae_frame_count(int64_t frames, const std::string& samples_key, const std::string& frames_key);

}  // namespace tt
