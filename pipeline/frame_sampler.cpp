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

std::vector<int64_t> sample_fps(const FrameSamplerOptions& options, const std::vector<double>& times,
                                SampleRng& rng) {
  const int64_t samples = options.samples;
  const double window = static_cast<double>(samples - 1) / options.target_fps;
  const double duration = times.back() - times.front();
  if (duration + kTimeEpsilon < window)
    too_short(options, static_cast<int64_t>(times.size()), frames_needed(options),
              str_cat(" (spans ", duration, " s, ", samples, " samples at ", options.target_fps, " fps span ",
                      window, " s)"));
  const double start = times.front() + std::max(0.0, duration - window) * rng.uniform();
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
  }
  return "?";
}

bool parse_frame_sample_mode(const std::string& name, FrameSampleMode* mode) {
  const FrameSampleMode all[] = {FrameSampleMode::kUniform, FrameSampleMode::kStratified,
                                 FrameSampleMode::kRandom, FrameSampleMode::kFps};
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
  if (options.mode == FrameSampleMode::kFps)
    TT_CHECK_HINT(std::isfinite(options.target_fps) && options.target_fps > 0, ErrorCode::kConfig,
                  "mode: fps samples at target_fps frames per second, e.g. target_fps: 24", kKey,
                  ".target_fps: must be > 0 with mode: fps, got ", options.target_fps);
}

int64_t frames_needed(const FrameSamplerOptions& options) {
  if (options.mode != FrameSampleMode::kRandom) return options.samples;
  // (samples - 1) * stride + 1, saturated at INT64_MAX (no clip is that long): the config takes
  // any stride >= 1, and the product overflowed (test/fuzz/regressions/frame_choice/).
  const int64_t gaps = options.samples - 1;
  if (gaps > 0 && options.stride > (INT64_MAX - 1) / gaps) return INT64_MAX;
  return gaps * options.stride + 1;
}

std::vector<int64_t> sample_frames(const FrameSamplerOptions& options,
                                   const std::vector<double>& frame_times_s, uint64_t seed, int64_t epoch,
                                   int64_t sample_index) {
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
      if (n < 1) too_short(options, n, 1);
      for (int64_t i = 0; i < n; ++i) {
        TT_CHECK(std::isfinite(frame_times_s[i]) && (i == 0 || frame_times_s[i] >= frame_times_s[i - 1]),
                 ErrorCode::kData, "frame timestamps must be finite and non-decreasing, frame ", i, " has ",
                 frame_times_s[i], (i > 0 ? str_cat(" after ", frame_times_s[i - 1]) : std::string()));
      }
      return sample_fps(options, frame_times_s, rng);
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
