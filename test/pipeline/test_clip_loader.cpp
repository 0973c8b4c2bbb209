// load_clip: one sample's pixels from a video — shape, range and determinism; equal to decoding the
// sampled frames with rotation and augmenting them by hand; fps mode's repeated frames gathered;
// a rotated clip comes out in its display orientation.
#include "pipeline/clip_loader.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#include <string>
#include <vector>

#include "test/test_util.h"

namespace {

std::string clip(const std::string& name, const std::string& args) {
  const auto result = tt::test::media_command("ffmpeg -v error -y " + args + " '{media}/" + name + "'");
  INFO(result.output);
  REQUIRE(result.exit_code == 0);
  return tt::test::media_dir() + "/" + name;
}

std::string plain() {
  return clip("cl_plain.mp4", "-f lavfi -i testsrc2=size=320x240:rate=25 -frames:v 24 -c:v libx264 -g 8 -bf 2 "
                              "-pix_fmt yuv420p");
}

std::string rotated() {
  (void)plain();  // the source clip must exist first
  // 5.1's encoder drops `rotate` metadata; remuxing keeps it.
  return clip("cl_rotated.mp4", "-i '{media}/cl_plain.mp4' -c copy -metadata:s:v:0 rotate=90");
}

tt::ClipRequest request(int64_t frames, int64_t height, int64_t width) {
  tt::ClipRequest r;
  r.sampler.mode = tt::FrameSampleMode::kStratified;
  r.sampler.samples = frames;
  r.augment.flip = 0.5;
  r.augment.brightness = 0.2;
  r.augment.dtype = torch::kFloat32;
  r.height = height;
  r.width = width;
  r.seed = 7;
  return r;
}

}  // namespace

TEST_CASE("load_clip: shape, range, determinism, and the same pixels as the steps done by hand", "[clip]") {
  for (const std::string& path : {plain(), rotated()}) {
    INFO(path);
    tt::VideoReader reader(path);
    tt::ClipRequest r = request(5, 96, 128);
    r.sample_index = 3;
    const tt::LoadedClip a = tt::load_clip(reader, r);
    REQUIRE(a.pixels.sizes() == torch::IntArrayRef({3, 5, 96, 128}));
    CHECK(a.pixels.min().item<float>() >= -1.0f);
    CHECK(a.pixels.max().item<float>() <= 1.0f);
    REQUIRE(a.frames.size() == 5);
    const tt::LoadedClip again = tt::load_clip(reader, r);
    CHECK(again.frames == a.frames);
    CHECK(torch::equal(again.pixels, a.pixels));
    // By hand: decode_rgb (rotation inside the reader) and the augmentation with the drawn params.
    const torch::Tensor rgb = reader.decode_rgb(a.frames);
    if (reader.info().rotation == 90) CHECK(rgb.size(1) == 320);  // displayed upright: 240 wide, 320 high
    const torch::Tensor expected = tt::augment_clip(rgb, a.params, 96, 128, torch::kFloat32);
    CHECK(torch::equal(a.pixels, expected));
    // Another sample index draws other frames (for some index among a few).
    bool differs = false;
    for (int64_t index = 4; index < 10 && !differs; ++index) {
      r.sample_index = index;
      differs = tt::load_clip(reader, r).frames != a.frames;
    }
    CHECK(differs);
  }
}

TEST_CASE("load_clip: fps mode repeats frames when the clip is slower than the target", "[clip]") {
  tt::VideoReader reader(plain());  // 25 fps
  tt::ClipRequest r = request(9, 64, 64);
  r.sampler.mode = tt::FrameSampleMode::kFps;
  r.sampler.target_fps = 50.0;  // every frame twice
  r.augment.brightness = 0.0;
  const tt::LoadedClip clip = tt::load_clip(reader, r);
  REQUIRE(clip.pixels.size(1) == 9);
  int repeats = 0;
  for (size_t t = 1; t < clip.frames.size(); ++t) {
    if (clip.frames[t] != clip.frames[t - 1]) continue;
    ++repeats;
    CHECK(torch::equal(clip.pixels.select(1, static_cast<int64_t>(t)),
                       clip.pixels.select(1, static_cast<int64_t>(t) - 1)));
  }
  CHECK(repeats >= 3);
}

TEST_CASE("load_clip on CUDA gives the CPU path's pixels within the colour tolerance", "[gpu][clip]") {
  const std::string path = rotated();  // recorded before the GPU check on machines with the CLI
  TT_REQUIRE_GPU();
  tt::VideoReader cpu(path);
  tt::VideoReaderOptions on_gpu;
  on_gpu.device = torch::Device(torch::kCUDA, 0);
  tt::VideoReader gpu(path, on_gpu);
  const tt::ClipRequest r = request(7, 128, 96);
  const tt::LoadedClip a = tt::load_clip(cpu, r);
  const tt::LoadedClip b = tt::load_clip(gpu, r);
  REQUIRE(b.pixels.is_cuda());
  CHECK(b.frames == a.frames);
  const torch::Tensor diff = (b.pixels.cpu() - a.pixels).abs();
  INFO("max |diff| " << diff.max().item<float>() << ", mean " << diff.mean().item<float>());
  CHECK(diff.max().item<float>() <= 0.02f);  // one colour level is 2/255 = 0.008 after normalising
  CHECK(diff.mean().item<float>() <= 0.002f);
}
