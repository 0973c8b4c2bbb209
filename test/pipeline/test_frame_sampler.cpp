// Tests for pipeline/frame_sampler: each mode's structural properties, determinism from
// (seed, epoch, sample), variation across epochs and samples, too-short clips (kData) and the VAE's
// 4n+1 frame rule (kConfig naming both keys).
#include "pipeline/frame_sampler.h"

#include <catch2/catch_test_macros.hpp>

#include <cmath>
#include <set>

#include "core/errors.h"
#include "test/test_util.h"

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// n frames at a constant rate.
std::vector<double> cfr_times(int64_t n, double fps) {
  std::vector<double> times(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) times[i] = static_cast<double>(i) / fps;
  return times;
}

tt::FrameSamplerOptions options_for(tt::FrameSampleMode mode, int64_t samples, int64_t stride = 1,
                                    double target_fps = 0.0) {
  tt::FrameSamplerOptions options;
  options.mode = mode;
  options.samples = samples;
  options.stride = stride;
  options.target_fps = target_fps;
  return options;
}

void check_sorted_in_range(const std::vector<int64_t>& frames, int64_t samples, int64_t n, bool strict) {
  REQUIRE(static_cast<int64_t>(frames.size()) == samples);
  for (size_t k = 0; k < frames.size(); ++k) {
    CHECK(frames[k] >= 0);
    CHECK(frames[k] < n);
    if (k > 0) {
      if (strict)
        CHECK(frames[k] > frames[k - 1]);
      else
        CHECK(frames[k] >= frames[k - 1]);
    }
  }
}

}  // namespace

TEST_CASE("uniform mode takes the centre of each stratum without randomness", "[sampler]") {
  auto options = options_for(tt::FrameSampleMode::kUniform, 4);
  auto times = cfr_times(100, 30);
  auto frames = tt::sample_frames(options, times, 1, 0, 0);
  CHECK(frames == std::vector<int64_t>{12, 37, 62, 87});
  CHECK(tt::sample_frames(options, times, 99, 7, 3) == frames);
  // Exactly as many frames as samples: every frame, once.
  CHECK(tt::sample_frames(options, cfr_times(4, 30), 1, 0, 0) == std::vector<int64_t>{0, 1, 2, 3});
  check_sorted_in_range(
      tt::sample_frames(options_for(tt::FrameSampleMode::kUniform, 33), cfr_times(34, 30), 5, 1, 2), 33, 34,
      true);
}

TEST_CASE("stratified mode draws one frame inside each stratum", "[sampler]") {
  for (int64_t n : {33, 34, 50, 97, 300}) {
    auto options = options_for(tt::FrameSampleMode::kStratified, 33);
    auto times = cfr_times(n, 24);
    for (int64_t sample = 0; sample < 20; ++sample) {
      auto frames = tt::sample_frames(options, times, 42, 0, sample);
      check_sorted_in_range(frames, 33, n, true);
      for (int64_t k = 0; k < 33; ++k) {
        CHECK(frames[k] >= k * n / 33);
        CHECK(frames[k] < (k + 1) * n / 33);
      }
    }
  }
  // Over many draws every frame of a stratum shows up: the draw is not stuck at one position.
  auto options = options_for(tt::FrameSampleMode::kStratified, 2);
  std::set<int64_t> seen;
  for (int64_t sample = 0; sample < 200; ++sample)
    seen.insert(tt::sample_frames(options, cfr_times(8, 24), 3, 0, sample)[0]);
  CHECK(seen == std::set<int64_t>{0, 1, 2, 3});
}

TEST_CASE("random mode is a contiguous window with the stride", "[sampler]") {
  for (int64_t stride : {1, 2, 3}) {
    auto options = options_for(tt::FrameSampleMode::kRandom, 9, stride);
    int64_t n = 40;
    std::set<int64_t> starts;
    for (int64_t sample = 0; sample < 100; ++sample) {
      auto frames = tt::sample_frames(options, cfr_times(n, 30), 7, 1, sample);
      check_sorted_in_range(frames, 9, n, true);
      for (size_t k = 1; k < frames.size(); ++k) CHECK(frames[k] - frames[k - 1] == stride);
      starts.insert(frames[0]);
    }
    CHECK(starts.size() > 5);  // the start moves
    CHECK(*starts.rbegin() <= n - (8 * stride + 1));
  }
  // A clip exactly as long as the window has one placement.
  auto exact = tt::sample_frames(options_for(tt::FrameSampleMode::kRandom, 3, 4), cfr_times(9, 30), 1, 0, 0);
  CHECK(exact == std::vector<int64_t>{0, 4, 8});
}

TEST_CASE("fps mode follows the timestamps of a variable-frame-rate clip", "[sampler]") {
  // 2 s at 60 fps, then 2 s at 15 fps: indices alone would oversample the fast half.
  std::vector<double> times;
  for (int i = 0; i < 120; ++i) times.push_back(i / 60.0);
  for (int i = 0; i < 30; ++i) times.push_back(2.0 + i / 15.0);
  const double fps = 10.0;
  auto options = options_for(tt::FrameSampleMode::kFps, 21, 1, fps);  // spans 2 s of the 3.93 s clip
  std::set<int64_t> firsts;
  for (int64_t sample = 0; sample < 50; ++sample) {
    auto frames = tt::sample_frames(options, times, 11, 0, sample);
    check_sorted_in_range(frames, 21, static_cast<int64_t>(times.size()), true);  // 10 fps < both rates
    firsts.insert(frames[0]);
    const double start = times[frames[0]];
    for (int64_t k = 0; k < 21; ++k) {
      // Each pick is the nearest frame to start' + k/fps, so it lies within half the local frame
      // interval (1/120 s or 1/30 s) of the target, plus the first pick's own rounding.
      double target = start + k / fps;
      double local_interval = times[frames[k]] < 2.0 ? 1 / 60.0 : 1 / 15.0;
      CHECK(std::abs(times[frames[k]] - target) <= local_interval + 1 / 60.0 + 1e-9);
    }
    // Equal time steps, not equal index steps: the spacing in seconds stays near 0.1 s.
    double span = times[frames[20]] - times[frames[0]];
    CHECK(std::abs(span - 2.0) <= 1 / 15.0 + 1e-9);
  }
  CHECK(firsts.size() > 5);
}

TEST_CASE("fps mode repeats frames when the clip is slower than target_fps", "[sampler]") {
  auto options = options_for(tt::FrameSampleMode::kFps, 9, 1, 30.0);
  auto frames = tt::sample_frames(options, cfr_times(5, 10.0), 1, 0, 0);  // 0.4 s, needs 0.267 s
  check_sorted_in_range(frames, 9, 5, false);
  CHECK(frames.front() >= 0);
  std::set<int64_t> distinct(frames.begin(), frames.end());
  CHECK(distinct.size() < frames.size());
}

TEST_CASE("the same (seed, epoch, sample) gives the same frames; others differ", "[sampler]") {
  auto times = cfr_times(500, 30);
  for (auto mode :
       {tt::FrameSampleMode::kStratified, tt::FrameSampleMode::kRandom, tt::FrameSampleMode::kFps}) {
    auto options = options_for(mode, 17, 2, 12.0);
    auto base = tt::sample_frames(options, times, 42, 3, 5);
    CHECK(tt::sample_frames(options, times, 42, 3, 5) == base);
    int other_epochs = 0, other_samples = 0, other_seeds = 0;
    for (int64_t i = 0; i < 8; ++i) {
      other_epochs += tt::sample_frames(options, times, 42, 4 + i, 5) != base;
      other_samples += tt::sample_frames(options, times, 42, 3, 6 + i) != base;
      other_seeds += tt::sample_frames(options, times, 43 + i, 3, 5) != base;
    }
    INFO(tt::frame_sample_mode_name(mode));
    CHECK(other_epochs >= 7);
    CHECK(other_samples >= 7);
    CHECK(other_seeds >= 7);
  }
}

TEST_CASE("stratified draws are pinned (platform-independent SplitMix64)", "[sampler]") {
  // Values from an independent Python SplitMix64; a change here changes which frames resumed runs
  // train on, so update them only on purpose.
  auto options = options_for(tt::FrameSampleMode::kStratified, 5);
  auto frames = tt::sample_frames(options, cfr_times(50, 30), 42, 0, 0);
  auto again = tt::sample_frames(options, cfr_times(50, 30), 42, 0, 0);
  CHECK(frames == again);
  UNSCOPED_INFO("pinned stratified draw: " << frames[0] << " " << frames[1] << " " << frames[2] << " "
                                           << frames[3] << " " << frames[4]);
  CHECK(frames == std::vector<int64_t>{2, 19, 26, 30, 47});
}

TEST_CASE("clips too short for the mode are kData errors naming available and needed frames", "[sampler]") {
  auto error = tt::test::expect_error([] {
    tt::sample_frames(options_for(tt::FrameSampleMode::kStratified, 33), cfr_times(20, 30), 1, 0, 0);
  });
  CHECK(error.code() == tt::ErrorCode::kData);
  CHECK(contains(error.what(), "clip has 20 frames"));
  CHECK(contains(error.what(), "needs 33"));

  error = tt::test::expect_error(
      [] { tt::sample_frames(options_for(tt::FrameSampleMode::kUniform, 5), cfr_times(4, 30), 1, 0, 0); });
  CHECK(error.code() == tt::ErrorCode::kData);

  error = tt::test::expect_error(
      [] { tt::sample_frames(options_for(tt::FrameSampleMode::kRandom, 5, 3), cfr_times(12, 30), 1, 0, 0); });
  CHECK(error.code() == tt::ErrorCode::kData);
  CHECK(contains(error.what(), "clip has 12 frames"));
  CHECK(contains(error.what(), "needs 13"));

  // fps: 1 s of video cannot hold 33 samples at 24 fps (1.33 s).
  error = tt::test::expect_error([] {
    tt::sample_frames(options_for(tt::FrameSampleMode::kFps, 33, 1, 24.0), cfr_times(31, 30), 1, 0, 0);
  });
  CHECK(error.code() == tt::ErrorCode::kData);
  CHECK(contains(error.what(), "clip has 31 frames"));

  error = tt::test::expect_error(
      [] { tt::sample_frames(options_for(tt::FrameSampleMode::kFps, 3, 1, 24.0), {}, 1, 0, 0); });
  CHECK(error.code() == tt::ErrorCode::kData);

  error = tt::test::expect_error([] {
    tt::sample_frames(options_for(tt::FrameSampleMode::kFps, 2, 1, 1.0), {0.0, 2.0, 1.0, 3.0}, 1, 0, 0);
  });
  CHECK(error.code() == tt::ErrorCode::kData);
  CHECK(contains(error.what(), "non-decreasing"));
}

TEST_CASE("invalid sampler options are kConfig errors naming the key", "[sampler]") {
  auto error = tt::test::expect_error([] {
    tt::sample_frames(options_for(tt::FrameSampleMode::kFps, 3, 1, 0.0), cfr_times(10, 30), 1, 0, 0);
  });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK(contains(error.what(), "tele_tron.data_pipeline.frame_sampler.target_fps"));
  error = tt::test::expect_error(
      [] { tt::sample_frames(options_for(tt::FrameSampleMode::kRandom, 3, 0), cfr_times(10, 30), 1, 0, 0); });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK(contains(error.what(), "stride"));
  error = tt::test::expect_error(
      [] { tt::sample_frames(options_for(tt::FrameSampleMode::kUniform, 0), cfr_times(10, 30), 1, 0, 0); });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK(contains(error.what(), "samples_per_clip"));

  tt::FrameSampleMode mode{};
  CHECK(tt::parse_frame_sample_mode("fps", &mode));
  CHECK(mode == tt::FrameSampleMode::kFps);
  CHECK_FALSE(tt::parse_frame_sample_mode("optical", &mode));
  CHECK(tt::frames_needed(options_for(tt::FrameSampleMode::kRandom, 5, 3)) == 13);
}

TEST_CASE("the VAE frame count must be 4n+1; the error names both keys", "[sampler]") {
  const std::string samples_key = "tele_tron.data_pipeline.frame_sampler.samples_per_clip";
  const std::string frames_key = "tele_tron.data.buckets[0].frames";
  for (int64_t ok : {1, 5, 13, 33, 129})
    CHECK_NOTHROW(tt::validate_vae_frame_count(ok, samples_key, frames_key));
  for (int64_t bad : {0, 2, 4, 16, 32, 34}) {
    auto error = tt::test::expect_error([&] { tt::validate_vae_frame_count(bad, samples_key, frames_key); });
    CHECK(error.code() == tt::ErrorCode::kConfig);
    CHECK(contains(error.what(), samples_key));
    CHECK(contains(error.what(), frames_key));
    CHECK(contains(error.what(), std::to_string(bad)));
  }
  auto error = tt::test::expect_error([&] { tt::validate_vae_frame_count(16, samples_key, frames_key); });
  CHECK(contains(error.hint(), "13 or 17"));
}

TEST_CASE("motion mode draws the window by the clip's motion profile; a still profile samples like fps", "[sampler]") {
  // 300 frames at 30 fps (10 s); 33 samples at 24 fps span 1.33 s.
  const std::vector<double> times = cfr_times(300, 30.0);
  const auto motion = options_for(tt::FrameSampleMode::kMotion, 33, 1, 24.0);
  const auto fps = options_for(tt::FrameSampleMode::kFps, 33, 1, 24.0);
  // All the motion in the last fifth of the clip: 8 px/frame there, none before.
  tt::MotionProfile late;
  late.at = {0.1, 0.3, 0.5, 0.7, 0.9};
  late.score = {0.0, 0.0, 0.0, 0.0, 8.0};
  tt::MotionProfile still;
  still.at = late.at;
  still.score = {0.0, 0.0, 0.0, 0.0, 0.0};
  const int draws = 2000;
  double late_mean = 0, still_mean = 0, fps_mean = 0;
  int late_in_motion = 0;
  for (int i = 0; i < draws; ++i) {
    const std::vector<int64_t> a = tt::sample_frames(motion, times, 5, 0, i, &late);
    const std::vector<int64_t> b = tt::sample_frames(motion, times, 5, 0, i, &still);
    const std::vector<int64_t> c = tt::sample_frames(fps, times, 5, 0, i);
    check_sorted_in_range(a, 33, 300, false);
    // Contiguous at 24 fps on a 30-fps clip: each step 1 or 2 frames.
    for (size_t k = 1; k < a.size(); ++k) CHECK((a[k] - a[k - 1] == 1 || a[k] - a[k - 1] == 2));
    late_mean += static_cast<double>(a.front()) / draws;
    still_mean += static_cast<double>(b.front()) / draws;
    fps_mean += static_cast<double>(c.front()) / draws;
    if (a.back() >= 210) ++late_in_motion;  // the window reaches the moving part (after 0.7)
  }
  INFO("mean first frame: motion profile late " << late_mean << ", still " << still_mean << ", fps " << fps_mean
                                                << "; windows reaching the motion " << late_in_motion);
  // fps and a still profile start anywhere in [0, 260]: means near 130. The late profile puts most
  // windows over its moving end, some (the floor) elsewhere.
  CHECK(std::abs(fps_mean - 130) < 10);
  CHECK(std::abs(still_mean - 130) < 10);
  CHECK(late_mean > 190);
  CHECK(late_in_motion > draws * 3 / 4);
  CHECK(late_in_motion < draws);  // the floor: still windows are seen too
  // Deterministic from (seed, epoch, sample), like every mode.
  CHECK(tt::sample_frames(motion, times, 5, 0, 7, &late) == tt::sample_frames(motion, times, 5, 0, 7, &late));
}

TEST_CASE("window_motion interpolates the profile and holds its ends", "[sampler]") {
  tt::MotionProfile profile;
  profile.at = {0.25, 0.75};
  profile.score = {2.0, 6.0};
  CHECK(std::abs(tt::window_motion(profile, 0.5, 0.5) - 4.0) < 1e-12);
  CHECK(std::abs(tt::window_motion(profile, 0.0, 0.2) - 2.0) < 1e-12);
  CHECK(std::abs(tt::window_motion(profile, 0.8, 1.0) - 6.0) < 1e-12);
  CHECK(tt::window_motion(tt::MotionProfile{}, 0.0, 1.0) == 0.0);
}

TEST_CASE("motion mode without a profile, or with a damaged one, is an error naming the fix", "[sampler]") {
  const std::vector<double> times = cfr_times(100, 30.0);
  const auto motion = options_for(tt::FrameSampleMode::kMotion, 9, 1, 24.0);
  const tt::Error none = tt::test::expect_error([&] { tt::sample_frames(motion, times, 1, 0, 0); });
  CHECK(none.code() == tt::ErrorCode::kConfig);
  CHECK(contains(none.what(), "frame_sampler.mode: motion needs the clip's motion profile"));
  CHECK(contains(none.hint(), "validate-data CONFIG --motion"));
  tt::MotionProfile backwards;
  backwards.at = {0.6, 0.2};
  backwards.score = {1.0, 1.0};
  CHECK(tt::test::expect_error([&] { tt::sample_frames(motion, times, 1, 0, 0, &backwards); }).code() ==
        tt::ErrorCode::kData);
  tt::FrameSampleMode parsed = tt::FrameSampleMode::kUniform;
  CHECK(tt::parse_frame_sample_mode("motion", &parsed));
  CHECK(parsed == tt::FrameSampleMode::kMotion);
  const auto no_rate = options_for(tt::FrameSampleMode::kMotion, 9);
  CHECK(tt::test::expect_error([&] { tt::validate_frame_sampler_options(no_rate); }).code() ==
        tt::ErrorCode::kConfig);
}
