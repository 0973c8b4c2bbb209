// Motion scores (pipeline/motion): where the pairs are taken, the working resolution, and the
// ordering and size of scores of synthetic clips whose motion is known (a still picture, a slow
// and a fast pan of a smooth texture).
#include "pipeline/motion.h"

#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "core/errors.h"
#include "pipeline/flow_picture.h"
#include "test/test_util.h"

namespace {

// T frames (T, 3, h, w) uint8 of a smooth texture panning right by `speed` pixels per frame.
torch::Tensor pan(int64_t frames, int64_t h, int64_t w, double speed) {
  auto ys = torch::arange(h, torch::kFloat64).view({1, h, 1});
  auto xs = torch::arange(w, torch::kFloat64).view({1, 1, w});
  auto t = torch::arange(frames, torch::kFloat64).view({frames, 1, 1});
  auto x = xs - speed * t;
  auto v = 0.5 + 0.2 * torch::sin(0.29 * x + 0.13 * ys) + 0.15 * torch::cos(0.21 * x - 0.37 * ys) +
           0.1 * torch::sin(0.09 * x + 0.47 * ys + 0.7);
  auto grey = (v * 255).round().clamp(0, 255).to(torch::kUInt8);
  return torch::stack({grey, grey, grey}, 1);  // (T, 3, h, w)
}

double score_of(const torch::Tensor& clip, const tt::MotionOptions& options) {
  const std::vector<int64_t> starts = tt::motion_pair_starts(clip.size(0), options.pairs);
  std::vector<int64_t> firsts, seconds, gaps;
  for (int64_t s : starts) {
    firsts.push_back(s);
    seconds.push_back(s + 1);
    gaps.push_back(1);
  }
  const torch::Tensor frames = tt::motion_frames(clip, options.short_side);
  return tt::motion_score(frames.index_select(0, torch::tensor(firsts)), frames.index_select(0, torch::tensor(seconds)),
                          gaps, options);
}

}  // namespace

TEST_CASE("motion pairs: the middles of equal strata, within the clip", "[flow][motion]") {
  CHECK(tt::motion_pair_starts(33, 4) == std::vector<int64_t>{4, 12, 20, 28});
  CHECK(tt::motion_pair_starts(3, 4) == std::vector<int64_t>{0, 1});
  CHECK(tt::motion_pair_starts(2, 4) == std::vector<int64_t>{0});
  CHECK(tt::motion_pair_starts(1, 4).empty());
  for (int64_t frames : {2, 5, 17, 300})
    for (int64_t s : tt::motion_pair_starts(frames, 4)) CHECK((s >= 0 && s + 1 < frames));
}

TEST_CASE("motion frames: luma at the working resolution's short side, aspect kept", "[flow][motion]") {
  auto rgb = torch::full({2, 3, 48, 64}, 255, torch::kUInt8);
  const torch::Tensor frames = tt::motion_frames(rgb, 96);
  CHECK(frames.sizes() == torch::IntArrayRef({2, 96, 128}));
  CHECK(std::abs(frames.mean().item<double>() - 1.0) < 1e-5);  // white stays white (luma weights sum to 1)
  CHECK(tt::motion_frames(torch::rand({1, 300, 200}), 256).sizes() == torch::IntArrayRef({1, 384, 256}));
  CHECK(tt::test::expect_error([] { tt::motion_frames(torch::rand({2, 4, 8, 8}), 256); }).code() == tt::ErrorCode::kData);
}

TEST_CASE("motion scores: a still clip scores far below a slow pan, which scores below a fast pan; scores are pixels "
          "per frame at the working resolution", "[flow][motion]") {
  tt::MotionOptions options;
  options.short_side = 96;  // the clips' own 48 px short side, doubled: motion at the working resolution is 2x
  const double still = score_of(pan(17, 48, 64, 0.0), options);
  const double slow = score_of(pan(17, 48, 64, 0.5), options);
  const double fast = score_of(pan(17, 48, 64, 2.0), options);
  INFO("still " << still << ", slow " << slow << ", fast " << fast << " px per frame at 96 px short side");
  CHECK(still < 0.05);
  CHECK(std::abs(slow - 1.0) < 0.1);  // 0.5 px per frame, doubled
  CHECK(std::abs(fast - 4.0) < 0.3);  // 2 px per frame, doubled
  CHECK(still * 10 < slow);
  CHECK(slow * 2 < fast);
  // A gap of 2 frames between the pair's frames halves what one pair's flow says.
  const torch::Tensor frames = tt::motion_frames(pan(3, 48, 64, 0.5), 96);
  const double over_two = tt::motion_score(frames.slice(0, 0, 1), frames.slice(0, 2, 3), {2}, options);
  CHECK(std::abs(over_two - slow) < 0.15);
  CHECK(tt::test::expect_error([&] { tt::motion_score(frames.slice(0, 0, 0), frames.slice(0, 0, 0), {}, options); })
            .code() == tt::ErrorCode::kData);
}

TEST_CASE("the flow stage's sample score: a training sample's frames in [-1, 1] score as the clip's frames do, "
          "without waiting", "[flow][motion]") {
  tt::MotionOptions options;
  options.short_side = 96;
  options.flow.algorithm = "tvl1";
  tt::FlowEstimator flow(options.flow, torch::kCPU);
  for (const double speed : {0.0, 0.5, 2.0}) {
    const torch::Tensor clip = pan(9, 48, 64, speed);  // (T, 3, h, w) uint8
    // As the clip loader gives a sample: (3, T, H, W) in [-1, 1], here in bf16 as on the GPU.
    const torch::Tensor pixels = (clip.permute({1, 0, 2, 3}).to(torch::kFloat32) / 127.5 - 1).to(torch::kBFloat16);
    const torch::Tensor score = tt::sample_motion(pixels, options, flow);
    REQUIRE(score.dim() == 0);
    CHECK(score.scalar_type() == torch::kFloat32);
    const double expected = score_of(clip, options);
    INFO("speed " << speed << ": sample " << score.item<double>() << ", clip frames " << expected);
    // bf16 holds the 8-bit levels exactly up to 2^-8 steps near 1: the same flow within rounding.
    CHECK(std::abs(score.item<double>() - expected) < 0.02 + 0.01 * expected);
    CHECK(std::abs(score.item<double>() - 2 * speed) < 0.1 + 0.08 * speed);
  }
  CHECK(tt::test::expect_error([&] { tt::sample_motion(torch::zeros({3, 1, 8, 8}), options, flow); }).code() ==
        tt::ErrorCode::kData);
  CHECK(tt::test::expect_error([&] { tt::sample_motion(torch::zeros({1, 4, 8, 8}), options, flow); }).code() ==
        tt::ErrorCode::kData);
}

TEST_CASE("the motion cache keeps scores per clip while the file is unchanged; a damaged cache is TT_ERR_DATA",
          "[flow][motion]") {
  tt::test::TempDir dir("tt_motion_cache");
  const std::string clip = dir / "a.mp4", manifest = dir / "m.jsonl";
  tt::test::write_file(clip, "12345");
  const std::string path = tt::MotionCache::path_for(manifest);
  CHECK(path == manifest + ".motion.json");
  CHECK(tt::MotionCache::read(path).clips.empty());  // none yet: an empty cache
  const std::string old_clip = dir / "b.mp4";
  tt::test::write_file(old_clip, "abc");
  tt::MotionCache cache;
  tt::MotionProfile profile;
  profile.at = {0.125, 0.375, 0.625, 0.875};
  profile.score = {1.0, 2.0, 3.0, 4.0};
  cache.set(clip, 2.5, profile);
  cache.set(old_clip, 1.0);  // as caches written before profiles were recorded
  cache.write(path);
  const tt::MotionCache back = tt::MotionCache::read(path);
  REQUIRE(back.score_of(clip).has_value());
  CHECK(*back.score_of(clip) == 2.5);
  REQUIRE(back.profile_of(clip).has_value());
  CHECK(back.profile_of(clip)->at == profile.at);
  CHECK(back.profile_of(clip)->score == profile.score);
  CHECK(back.score_of(old_clip).has_value());
  CHECK_FALSE(back.profile_of(old_clip).has_value());  // scored, but no profile: motion mode asks for a rescore
  CHECK_FALSE(back.score_of(dir / "other.mp4").has_value());
  tt::test::write_file(clip, "123456");  // the file changed (size): its score no longer stands
  CHECK_FALSE(back.score_of(clip).has_value());
  CHECK_FALSE(back.profile_of(clip).has_value());
  tt::test::write_file(path, "{\"version\": 1, \"clips\": {\"x\": {\"score\": \"high\"}}}");
  CHECK(tt::test::expect_error([&] { tt::MotionCache::read(path); }).code() == tt::ErrorCode::kData);
  tt::test::write_file(path, "{\"version\": 1, \"algorithm\": \"tvl1\", \"pairs\": 4, \"short_side\": 256, \"clips\": "
                             "{\"x\": {\"score\": 1, \"stamp\": \"s\", \"profile\": {\"at\": [0.5], \"score\": []}}}}");
  CHECK(tt::test::expect_error([&] { tt::MotionCache::read(path); }).code() == tt::ErrorCode::kData);
  tt::test::write_file(path, "not json");
  CHECK(tt::test::expect_error([&] { tt::MotionCache::read(path); }).code() == tt::ErrorCode::kData);
}

TEST_CASE("flow pictures: hue from the direction, saturation from the length, no motion white; PNG through libavcodec",
          "[flow][picture]") {
  // Four pixels: right, down, left at full length; one still.
  auto flow = torch::zeros({2, 1, 4});
  flow[0][0][0] = 2.0;   // right
  flow[1][0][1] = 2.0;   // down (y grows downwards)
  flow[0][0][2] = -2.0;  // left
  const torch::Tensor rgb = tt::flow_to_rgb(flow);
  REQUIRE(rgb.sizes() == torch::IntArrayRef({1, 4, 3}));
  auto px = [&](int i) {
    return std::vector<int>{rgb[0][i][0].item<int>(), rgb[0][i][1].item<int>(), rgb[0][i][2].item<int>()};
  };
  CHECK(px(0) == std::vector<int>{255, 0, 0});      // right: red
  CHECK(px(1) == std::vector<int>{128, 255, 0});    // down: hue 90 degrees, chartreuse
  CHECK(px(2) == std::vector<int>{0, 255, 255});    // left: cyan
  CHECK(px(3) == std::vector<int>{255, 255, 255});  // still: white
  // Half the largest length: half saturated.
  CHECK(tt::flow_to_rgb(flow, 4.0)[0][0][1].item<int>() == 128);
  // A PNG: signature, then IHDR with the width and height (big-endian).
  tt::test::TempDir dir("tt_flow_png");
  const std::string path = dir / "f.png";
  tt::write_png(path, torch::zeros({5, 7, 3}, torch::kUInt8));
  const std::string bytes = tt::test::read_file(path);
  REQUIRE(bytes.size() > 24);
  CHECK(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  CHECK(bytes.substr(12, 4) == "IHDR");
  CHECK(static_cast<unsigned char>(bytes[19]) == 7);  // width
  CHECK(static_cast<unsigned char>(bytes[23]) == 5);  // height
  CHECK(tt::test::expect_error([&] { tt::write_png(dir / "no/such/folder/f.png", torch::zeros({2, 2, 3}, torch::kUInt8)); })
            .code() == tt::ErrorCode::kIo);
}
