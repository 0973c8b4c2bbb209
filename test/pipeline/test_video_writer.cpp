// Tests for pipeline/video_writer: MP4 files read back through the project's VideoReader (frame
// count, size, red/green/blue/grey frames within codec tolerance) with libx264 and with FFmpeg's
// mpeg4 encoder (the GPU machine's only choice), odd sizes, bad input; animated GIFs decoded by
// FFmpeg's gif demuxer (frame count, size, colours); add_gif into an event file. The hidden case
// "[.tensorboard_demo]" writes the files scripts/check_tensorboard_events.py reads with the
// tensorboard package (ctest: tensorboard_events_read_by_tensorboard).
#include "pipeline/video_writer.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>
#include <nlohmann/json.hpp>
#include <torch/torch.h>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/errors.h"
#include "core/tensorboard.h"
#include "pipeline/video_reader.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;

namespace {

// The colours of the test frames, one per frame in turn.
const std::vector<std::vector<int>> kColours = {{255, 0, 0}, {0, 255, 0}, {0, 0, 255}, {128, 128, 128}};

// (T, H, W, 3) uint8: frame t is flat kColours[t % 4].
torch::Tensor colour_frames(int64_t count, int64_t height, int64_t width) {
  torch::Tensor frames = torch::empty({count, height, width, 3}, torch::kUInt8);
  for (int64_t t = 0; t < count; ++t) {
    const auto& c = kColours[t % kColours.size()];
    for (int channel = 0; channel < 3; ++channel) frames[t].select(2, channel).fill_(c[channel]);
  }
  return frames;
}

// Mean RGB of each frame: (T, 3) float.
torch::Tensor frame_means(const torch::Tensor& frames) { return frames.to(torch::kFloat).mean({1, 2}); }

void check_colours(const torch::Tensor& frames, double tolerance) {
  const torch::Tensor means = frame_means(frames);
  for (int64_t t = 0; t < frames.size(0); ++t) {
    const auto& c = kColours[t % kColours.size()];
    for (int channel = 0; channel < 3; ++channel) {
      INFO("frame " << t << " channel " << channel << ": mean " << means[t][channel].item<double>() << ", expected "
                    << c[channel]);
      CHECK(std::abs(means[t][channel].item<double>() - c[channel]) <= tolerance);
    }
  }
}

void check_mp4(const std::string& encoder, int64_t height, int64_t width) {
  tt::test::TempDir dir("tt_mp4");
  const std::string path = dir / "out.mp4";
  const torch::Tensor frames = colour_frames(9, height, width);
  tt::Mp4Options options;
  options.encoder = encoder;
  CHECK(tt::write_mp4(path, frames, 8.0, options) == encoder);
  CHECK_FALSE(std::filesystem::exists(path + ".tmp"));
  tt::VideoReader reader(path);
  CHECK(reader.info().codec == (encoder == "libx264" ? "h264" : "mpeg4"));
  CHECK(reader.info().frame_count == 9);
  // yuv420p: odd sizes come back one row / column larger (the last one repeated).
  CHECK(reader.info().height == height + height % 2);
  CHECK(reader.info().width == width + width % 2);
  CHECK(std::abs(reader.info().frame_rate - 8.0) < 1e-6);
  std::vector<int64_t> all(9);
  for (int64_t i = 0; i < 9; ++i) all[i] = i;
  const torch::Tensor decoded = reader.decode_rgb(all);  // (9, H', W', 3) uint8
  check_colours(decoded.narrow(1, 0, height).narrow(2, 0, width), 6.0);
}

// Decodes GIF bytes with FFmpeg's gif demuxer and decoder, via a temporary file and VideoReader's
// sibling: the ffmpeg CLI is not needed.
torch::Tensor decode_gif(const std::string& gif, const std::string& folder) {
  const std::string path = folder + "/clip.gif";
  tt::test::write_file(path, gif);
  tt::VideoReader reader(path);
  std::vector<int64_t> all(reader.info().frame_count);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<int64_t>(i);
  return reader.decode_rgb(all, tt::RgbConverter::kSwscale);
}

}  // namespace

TEST_CASE("write_mp4 picks libx264 where FFmpeg has it and reads back with the right frames and colours",
          "[video_writer]") {
  const std::string encoder = tt::default_mp4_encoder();
  REQUIRE_FALSE(encoder.empty());
  check_mp4(encoder, 48, 64);
  check_mp4(encoder, 33, 45);  // odd sizes
}

TEST_CASE("write_mp4 with FFmpeg's own mpeg4 encoder (the GPU machine's FFmpeg)", "[video_writer]") {
  check_mp4("mpeg4", 48, 64);
  check_mp4("mpeg4", 17, 31);
}

TEST_CASE("write_mp4 refuses bad frames and a missing encoder; an unwritable path is TT_ERR_IO", "[video_writer]") {
  tt::test::TempDir dir("tt_mp4_bad");
  const torch::Tensor frames = colour_frames(2, 16, 16);
  CHECK(tt::test::expect_error([&] { tt::write_mp4(dir / "a.mp4", frames.to(torch::kFloat), 8.0); }).code() ==
        tt::ErrorCode::kInternal);
  CHECK(tt::test::expect_error([&] { tt::write_mp4(dir / "a.mp4", frames.select(3, 0), 8.0); }).code() ==
        tt::ErrorCode::kInternal);
  tt::Mp4Options missing;
  missing.encoder = "no_such_encoder";
  const tt::Error none = tt::test::expect_error([&] { tt::write_mp4(dir / "a.mp4", frames, 8.0, missing); });
  CHECK(none.code() == tt::ErrorCode::kConfig);
  CHECK_THAT(none.what(), ContainsSubstring("no_such_encoder"));
  const tt::Error io = tt::test::expect_error([&] { tt::write_mp4(dir / "no/such/folder/a.mp4", frames, 8.0); });
  CHECK(io.code() == tt::ErrorCode::kIo);
  CHECK_FALSE(std::filesystem::exists(dir / "a.mp4"));
}

TEST_CASE("encode_gif makes an animated GIF with every frame, its size and its colours", "[video_writer]") {
  tt::test::TempDir dir("tt_gif");
  for (const auto& [height, width] : std::vector<std::pair<int64_t, int64_t>>{{24, 32}, {17, 23}}) {
    const std::string gif = tt::encode_gif(colour_frames(6, height, width), 8.0);
    CHECK(gif.rfind("GIF89a", 0) == 0);
    const torch::Tensor decoded = decode_gif(gif, dir.path());  // (T, H, W, 3) uint8
    CHECK(decoded.size(0) == 6);
    CHECK(decoded.size(1) == height);
    CHECK(decoded.size(2) == width);
    check_colours(decoded, 12.0);  // the grey frame is dithered between two palette levels
  }
  // A smooth gradient survives the 252-colour palette on average.
  torch::Tensor ramp = torch::linspace(0, 255, 64).to(torch::kUInt8).view({1, 1, 64, 1}).expand({3, 16, 64, 3});
  const torch::Tensor decoded = decode_gif(tt::encode_gif(ramp.contiguous(), 10.0), dir.path());
  CHECK((frame_means(decoded) - frame_means(ramp)).abs().max().item<double>() < 4.0);
}

TEST_CASE("add_gif puts the animated GIF into the event file as an image summary", "[video_writer][tensorboard]") {
  tt::test::TempDir dir("tt_gif_tb");
  std::string path;
  {
    tt::TensorBoardWriter writer(dir.path());
    path = writer.path();
    tt::add_gif(writer, "validation/0", 7, colour_frames(5, 17, 23), 8.0, 1234.0);
  }
  const auto events = tt::read_tensorboard_events(path);
  REQUIRE(events.size() == 2);
  REQUIRE(events[1].images.size() == 1);
  const auto& image = events[1].images[0];
  CHECK(image.tag == "validation/0");
  CHECK(events[1].step == 7);
  CHECK(image.height == 17);
  CHECK(image.width == 23);
  CHECK(image.colorspace == 3);
  CHECK(decode_gif(image.encoded, dir.path()).size(0) == 5);
}

// Not run by default ([.]): scripts/check_tensorboard_events.py --writer runs it with
// TELETRON_TB_DEMO_DIR set, then reads the folder with the tensorboard package.
TEST_CASE("tensorboard demo files for scripts/check_tensorboard_events.py", "[.tensorboard_demo]") {
  const char* folder = std::getenv("TELETRON_TB_DEMO_DIR");
  if (folder == nullptr) SKIP("TELETRON_TB_DEMO_DIR is not set");
  nlohmann::json expected = {{"scalars", nlohmann::json::object()}, {"images", nlohmann::json::object()}};
  tt::TensorBoardWriter writer(folder);
  for (int64_t step = 1; step <= 5; ++step) {
    const double loss = 1.0 / static_cast<double>(step) - 0.125, lr = 1.0e-4 * static_cast<double>(step);
    writer.add_scalars(step, {{"loss", static_cast<float>(loss)}, {"optimizer/lr", static_cast<float>(lr)}},
                       1.0e9 + static_cast<double>(step));
    expected["scalars"]["loss"].push_back({step, loss});
    expected["scalars"]["optimizer/lr"].push_back({step, lr});
  }
  writer.add_scalar("big", 3, -3.0e38, 1.0e9 + 3.0);
  expected["scalars"]["big"].push_back({3, -3.0e38});
  tt::add_gif(writer, "validation/clip", 5, colour_frames(6, 17, 23), 8.0, 1.0e9 + 5.0);
  nlohmann::json colours = nlohmann::json::array();
  for (int t = 0; t < 6; ++t) colours.push_back(kColours[t % kColours.size()]);
  expected["images"]["validation/clip"].push_back(
      {{"step", 5}, {"frames", 6}, {"height", 17}, {"width", 23}, {"colours", colours}});
  writer.close();
  tt::test::write_file(std::string(folder) + "/expected.json", expected.dump(1));
}
