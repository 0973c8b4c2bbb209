// Frame sampling (see frame_sampler.h). Index arithmetic is integer wherever possible so that the
// chosen frames do not depend on floating-point rounding; only fps mode works in seconds.
#include "pipeline/frame_sampler.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/errors.h"
#include "pipeline/sample_rng.h"

namespace tt {
namespace {

const char kKey[] = "tele_tron.data_pipeline.frame_sampler";

// Timestamps within this of each other count as equal when checking that a clip is long enough
// (container time bases are at best microseconds).
constexpr double kTimeEpsilon = 1e-6;

[[noreturn]] void too_short(const FrameSamplerOptions& options, int64_t available, int64_t needed,
                            const std::string& detail = "") {
  throw Error(ErrorCode::kData,
              str_cat("clip has ", available, " frames, the frame sampler (mode ",
                      frame_sample_mode_name(options.mode), ", ", options.samples, " samples) needs ", needed,
                      detail),
              "drop the clip from the manifest, or lower data_pipeline.frame_sampler.samples_per_clip / "
              "stride / the bucket's frames");
}

std::vector<int64_t> sample_uniform(int64_t n, int64_t samples) {
  // The centre of each stratum: the expectation of what stratified mode would draw.
  std::vector<int64_t> out(static_cast<size_t>(samples));
  for (int64_t k = 0; k < samples; ++k) out[k] = ((2 * k + 1) * n) / (2 * samples);
  return out;
}

std::vector<int64_t> sample_stratified(int64_t n, int64_t samples, SampleRng& rng) {
  std::vector<int64_t> out(static_cast<size_t>(samples));
  for (int64_t k = 0; k < samples; ++k) {
    int64_t lo = (k * n) / samples;  // stratum k is [lo, hi), never empty when n >= samples
    int64_t hi = ((k + 1) * n) / samples;
    out[k] = lo + static_cast<int64_t>(rng.below(static_cast<uint64_t>(hi - lo)));
  }
  return out;
}

std::vector<int64_t> sample_random(int64_t n, int64_t samples, int64_t stride, SampleRng& rng) {
  int64_t span = (samples - 1) * stride + 1;
  int64_t start = static_cast<int64_t>(rng.below(static_cast<uint64_t>(n - span + 1)));
  std::vector<int64_t> out(static_cast<size_t>(samples));
  for (int64_t k = 0; k < samples; ++k) out[k] = start + k * stride;
  return out;
}

// The frame whose timestamp is nearest to t, searching from `from` on (targets only increase);
// ties go to the earlier frame.
int64_t nearest_frame(const std::vector<double>& times, double t, int64_t from) {
  auto it = std::lower_bound(times.begin() + from, times.end(), t);
  int64_t i = static_cast<int64_t>(it - times.begin());
  if (i >= static_cast<int64_t>(times.size())) return static_cast<int64_t>(times.size()) - 1;
  if (i > from && t - times[i - 1] <= times[i] - t) return i - 1;
  return i;
}

// Motion mode's draw: where in [0, 1] of the free range the window starts (see sample_frames).
double motion_start(const MotionProfile& profile, double duration, double window, SampleRng& rng) {
  const double free = std::max(0.0, duration - window);
  if (free <= kTimeEpsilon || duration <= 0) return rng.uniform();
  double mean = 0;
  for (double score : profile.score) mean += score;
  mean /= static_cast<double>(profile.score.size());
  std::vector<double> cumulative(static_cast<size_t>(kMotionCandidates));
  double total = 0;
  for (int64_t j = 0; j < kMotionCandidates; ++j) {
    const double begin = free * static_cast<double>(j) / static_cast<double>(kMotionCandidates - 1);
    // A clip that does not move at all: every window weighs the same.
    total += window_motion(profile, begin / duration, (begin + window) / duration) + kMotionFloor * mean + 1e-9;
    cumulative[static_cast<size_t>(j)] = total;
  }
  const double pick = rng.uniform() * total;
  const auto chosen = static_cast<int64_t>(
      std::min<size_t>(std::lower_bound(cumulative.begin(), cumulative.end(), pick) - cumulative.begin(),
                       cumulative.size() - 1));
  const double spacing = 1.0 / static_cast<double>(kMotionCandidates - 1);
  const double jitter = (rng.uniform() - 0.5) * spacing;
  return std::clamp(static_cast<double>(chosen) * spacing + jitter, 0.0, 1.0);
}

std::vector<int64_t> sample_fps(const FrameSamplerOptions& options, const std::vector<double>& times,
                                SampleRng& rng, const MotionProfile* motion) {
  const int64_t samples = options.samples;
  const double window = fps_window_seconds(options);
  const double duration = times.back() - times.front();
  if (duration + kTimeEpsilon < window)
    too_short(options, static_cast<int64_t>(times.size()), frames_needed(options),
              str_cat(" (spans ", duration, " s, ", samples, " samples at ", options.target_fps, " fps span ",
                      window, " s)"));
  const double where = motion != nullptr ? motion_start(*motion, duration, window, rng) : rng.uniform();
  const double start = times.front() + std::max(0.0, duration - window) * where;
  std::vector<int64_t> out(static_cast<size_t>(samples));
  int64_t from = 0;
  for (int64_t k = 0; k < samples; ++k) {
    from = nearest_frame(times, start + static_cast<double>(k) / options.target_fps, from);
    out[k] = from;
  }
  return out;
}

}  // namespace

const char* frame_sample_mode_name(FrameSampleMode mode) {
  switch (mode) {
    case FrameSampleMode::kUniform:
      return "uniform";
    case FrameSampleMode::kStratified:
      return "stratified";
    case FrameSampleMode::kRandom:
      return "random";
    case FrameSampleMode::kFps:
      return "fps";
    case FrameSampleMode::kMotion:
      return "motion";
  }
  return "?";
}

bool parse_frame_sample_mode(const std::string& name, FrameSampleMode* mode) {
  const FrameSampleMode all[] = {FrameSampleMode::kUniform, FrameSampleMode::kStratified,
                                 FrameSampleMode::kRandom, FrameSampleMode::kFps, FrameSampleMode::kMotion};
  for (FrameSampleMode candidate : all) {
    if (name == frame_sample_mode_name(candidate)) {
      *mode = candidate;
      return true;
    }
  }
  return false;
}

void validate_frame_sampler_options(const FrameSamplerOptions& options) {
  TT_CHECK(options.samples >= 1, ErrorCode::kConfig, kKey, ".samples_per_clip: must be >= 1, got ",
           options.samples);
  if (options.mode == FrameSampleMode::kRandom)
    TT_CHECK(options.stride >= 1, ErrorCode::kConfig, kKey, ".stride: must be >= 1, got ", options.stride);
  if (options.mode == FrameSampleMode::kFps || options.mode == FrameSampleMode::kMotion)
    TT_CHECK_HINT(std::isfinite(options.target_fps) && options.target_fps > 0, ErrorCode::kConfig,
                  str_cat("mode: ", frame_sample_mode_name(options.mode),
                          " samples at target_fps frames per second, e.g. target_fps: 24"),
                  kKey, ".target_fps: must be > 0 with mode: ", frame_sample_mode_name(options.mode), ", got ",
                  options.target_fps);
}

int64_t frames_needed(const FrameSamplerOptions& options) {
  if (options.mode != FrameSampleMode::kRandom) return options.samples;
  // (samples - 1) * stride + 1, saturated at INT64_MAX (no clip is that long): the config takes
  // any stride >= 1, and the product overflowed (test/fuzz/regressions/frame_choice/).
  const int64_t gaps = options.samples - 1;
  if (gaps > 0 && options.stride > (INT64_MAX - 1) / gaps) return INT64_MAX;
  return gaps * options.stride + 1;
}

double fps_window_seconds(const FrameSamplerOptions& options) {
  return static_cast<double>(options.samples - 1) / options.target_fps;
}

double window_motion(const MotionProfile& profile, double begin, double end) {
  const size_t n = std::min(profile.at.size(), profile.score.size());
  if (n == 0) return 0;
  const auto at = [&](double x) {
    if (x <= profile.at[0]) return profile.score[0];
    if (x >= profile.at[n - 1]) return profile.score[n - 1];
    const size_t right = static_cast<size_t>(
        std::upper_bound(profile.at.begin(), profile.at.begin() + static_cast<std::ptrdiff_t>(n), x) -
        profile.at.begin());
    const size_t left = right - 1;
    const double span = profile.at[right] - profile.at[left];
    const double t = span > 0 ? (x - profile.at[left]) / span : 0.0;
    return profile.score[left] + t * (profile.score[right] - profile.score[left]);
  };
  double sum = 0;
  for (int64_t k = 0; k < kMotionPoints; ++k)
    sum += at(begin + (end - begin) * static_cast<double>(k) / static_cast<double>(kMotionPoints - 1));
  return sum / static_cast<double>(kMotionPoints);
}

std::vector<int64_t> sample_frames(const FrameSamplerOptions& options,
                                   const std::vector<double>& frame_times_s, uint64_t seed, int64_t epoch,
                                   int64_t sample_index, const MotionProfile* motion) {
  validate_frame_sampler_options(options);
  const int64_t n = static_cast<int64_t>(frame_times_s.size());
  SampleRng rng = sample_rng(seed, epoch, sample_index, kRngFrameSampler);
  switch (options.mode) {
    case FrameSampleMode::kUniform:
      if (n < options.samples) too_short(options, n, options.samples);
      return sample_uniform(n, options.samples);
    case FrameSampleMode::kStratified:
      if (n < options.samples) too_short(options, n, options.samples);
      return sample_stratified(n, options.samples, rng);
    case FrameSampleMode::kRandom:
      if (n < frames_needed(options)) too_short(options, n, frames_needed(options));
      return sample_random(n, options.samples, options.stride, rng);
    case FrameSampleMode::kFps:
    case FrameSampleMode::kMotion:
      if (options.mode == FrameSampleMode::kMotion) {
        TT_CHECK_HINT(motion != nullptr && !motion->score.empty() && motion->at.size() == motion->score.size(),
                      ErrorCode::kConfig,
                      "run `teletron validate-data CONFIG --motion`, which records each clip's motion profile, or "
                      "use mode: fps",
                      kKey, ".mode: motion needs the clip's motion profile, and there is none");
        for (size_t k = 0; k < motion->score.size(); ++k)
          TT_CHECK(std::isfinite(motion->score[k]) && motion->score[k] >= 0 && std::isfinite(motion->at[k]) &&
                       (k == 0 || motion->at[k] > motion->at[k - 1]),
                   ErrorCode::kData, "motion profile: pair ", k, " at ", motion->at[k], " scores ", motion->score[k],
                   " (positions must increase, scores be finite and >= 0)");
      }
      if (n < 1) too_short(options, n, 1);
      for (int64_t i = 0; i < n; ++i) {
        TT_CHECK(std::isfinite(frame_times_s[i]) && (i == 0 || frame_times_s[i] >= frame_times_s[i - 1]),
                 ErrorCode::kData, "frame timestamps must be finite and non-decreasing, frame ", i, " has ",
                 frame_times_s[i], (i > 0 ? str_cat(" after ", frame_times_s[i - 1]) : std::string()));
      }
      return sample_fps(options, frame_times_s, rng,
                        options.mode == FrameSampleMode::kMotion ? motion : nullptr);
  }
  throw Error(ErrorCode::kInternal, "sample_frames: unknown FrameSampleMode");
}

void validate_vae_frame_count(int64_t frames, const std::string& samples_key, const std::string& frames_key) {
  if (frames >= 1 && (frames - 1) % 4 == 0) return;
  int64_t below = frames <= 1 ? 1 : ((frames - 1) / 4) * 4 + 1;
  // Saturated: a bucket's frames can be any int64 (INT64_MAX overflowed here, see
  // test/fuzz/regressions/frame_choice/).
  int64_t above = below <= INT64_MAX - 4 ? below + 4 : below;
  if (frames < 1) above = 5;
  throw Error(
      ErrorCode::kConfig,
      str_cat(samples_key, " / ", frames_key, ": the VAE needs 4n+1 frames per clip, got ", frames),
      str_cat("set ", samples_key, " (or, when it is null, ", frames_key, ") to ", below, " or ", above));
}

}  // namespace tt
