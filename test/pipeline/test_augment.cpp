// Tests for pipeline/augment: the parameter draw (deterministic, in range), the reference's
// properties (shape, range, flip, crop, antialiasing, jitter identity and effects), the kernel's
// per-pixel arithmetic run on the host against the reference, and ([gpu]) the CUDA kernel itself.
#include "pipeline/augment.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#include <cmath>

#include "core/errors.h"
#include "cuda/ops.h"
#include "test/test_util.h"

namespace F = torch::nn::functional;

namespace {

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// (T, H, W, 3) uint8 noise, reproducible.
torch::Tensor random_clip(int64_t t, int64_t h, int64_t w, int64_t seed) {
  torch::manual_seed(seed);
  return torch::randint(0, 256, {t, h, w, 3}, torch::kInt64).to(torch::kUInt8);
}

// A smooth image with some texture: gradients plus a few sinusoids, so resizing errors are visible.
torch::Tensor smooth_clip(int64_t t, int64_t h, int64_t w) {
  auto y = torch::arange(h, torch::kFloat32).view({1, h, 1});
  auto x = torch::arange(w, torch::kFloat32).view({1, 1, w});
  auto f = torch::arange(t, torch::kFloat32).view({t, 1, 1});
  auto r = 127.5 + 100 * torch::sin(x * 0.21 + f) * torch::cos(y * 0.13);
  auto g = 255.0 * (x + y) / static_cast<double>(h + w) + 0 * f;
  auto b = 127.5 + 120 * torch::cos(x * 0.05 - y * 0.31 + 0.5 * f);
  return torch::stack({r, g, b}, -1).round().clamp(0, 255).to(torch::kUInt8);
}

tt::AugmentParams identity_params() {
  return tt::AugmentParams{};
}

float max_abs(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max().item<float>();
}

}  // namespace

TEST_CASE("augment params are deterministic per (seed, epoch, sample) and within the amounts", "[augment]") {
  tt::AugmentOptions options;
  options.flip = 0.5;
  options.brightness = 0.2;
  options.contrast = 0.3;
  options.saturation = 1.5;
  options.hue = 0.1;
  auto a = tt::draw_augment_params(options, 42, 3, 7);
  auto b = tt::draw_augment_params(options, 42, 3, 7);
  CHECK(a.flip == b.flip);
  CHECK(a.crop_y == b.crop_y);
  CHECK(a.crop_x == b.crop_x);
  CHECK(a.brightness == b.brightness);
  CHECK(a.hue == b.hue);
  int flips = 0, differ = 0;
  for (int64_t i = 0; i < 2000; ++i) {
    auto p = tt::draw_augment_params(options, 42, i, 7);
    flips += p.flip;
    differ += p.brightness != a.brightness;
    CHECK(p.crop_y >= 0.0);
    CHECK(p.crop_y < 1.0);
    CHECK(p.brightness >= 0.8);
    CHECK(p.brightness <= 1.2);
    CHECK(p.contrast >= 0.7);
    CHECK(p.contrast <= 1.3);
    CHECK(p.saturation >= 0.0);  // 1 - 1.5 clipped at 0
    CHECK(p.saturation <= 2.5);
    CHECK(std::abs(p.hue) <= 0.1);
  }
  CHECK(flips > 900);
  CHECK(flips < 1100);
  CHECK(differ >= 1999);
  CHECK(tt::draw_augment_params(options, 42, 3, 8).brightness != a.brightness);

  // Zero amounts: exactly the identity; centre crop ignores the drawn position.
  tt::AugmentOptions none;
  none.flip = 0.0;
  none.crop = tt::CropMode::kCenter;
  for (int64_t i = 0; i < 50; ++i) {
    auto p = tt::draw_augment_params(none, 1, 0, i);
    CHECK_FALSE(p.flip);
    CHECK(p.crop_y == 0.5);
    CHECK(p.crop_x == 0.5);
    CHECK(p.brightness == 1.0);
    CHECK(p.contrast == 1.0);
    CHECK(p.saturation == 1.0);
    CHECK(p.hue == 0.0);
  }
}

TEST_CASE("invalid augment options are kConfig errors naming the key", "[augment]") {
  tt::AugmentOptions options;
  options.hue = 0.6;
  auto error = tt::test::expect_error([&] { tt::validate_augment_options(options); });
  CHECK(error.code() == tt::ErrorCode::kConfig);
  CHECK(contains(error.what(), "tele_tron.data_pipeline.augment.hue"));
  options.hue = 0.0;
  options.flip = 1.5;
  error = tt::test::expect_error([&] { tt::validate_augment_options(options); });
  CHECK(contains(error.what(), "tele_tron.data_pipeline.augment.flip"));
  options.flip = 0.5;
  options.brightness = -0.1;
  error = tt::test::expect_error([&] { tt::validate_augment_options(options); });
  CHECK(contains(error.what(), "brightness"));
  options.brightness = 0.0;
  CHECK_NOTHROW(tt::validate_augment_options(options));
}

TEST_CASE("the geometry covers the output, keeps the aspect ratio and places the crop", "[augment]") {
  tt::AugmentParams params;
  auto args = tt::augment_kernel_args(params, 720, 1280, 480, 832);  // 720p -> 480x832: scale 2/3 by height
  CHECK(args.resized_h == 480);
  CHECK(args.resized_w == 853);
  CHECK(args.crop_y == 0);
  CHECK(args.crop_x == 11);  // round(0.5 * 21)
  params.crop_x = 0.0;
  CHECK(tt::augment_kernel_args(params, 720, 1280, 480, 832).crop_x == 0);
  params.crop_x = 0.999;
  CHECK(tt::augment_kernel_args(params, 720, 1280, 480, 832).crop_x == 21);
  args = tt::augment_kernel_args(params, 1080, 1080, 480, 832);  // square source: width decides
  CHECK(args.resized_w == 832);
  CHECK(args.resized_h == 832);
  args = tt::augment_kernel_args(params, 100, 200, 480, 832);  // small source: enlarged
  CHECK(args.resized_h == 480);
  CHECK(args.resized_w == 960);
}

TEST_CASE("anamorphic sources are resized as shown, by their pixel aspect", "[augment]") {
  tt::AugmentParams params;
  // HDV: 1440x1080 stored, 4:3 pixels, shown 1920x1080 -> 480x832 scales by height to 853 wide,
  // as a square-pixel 1080p source does (it was 480x640 and cropped: a squeezed picture).
  params.pixel_aspect = 4.0 / 3.0;
  auto args = tt::augment_kernel_args(params, 1080, 1440, 480, 832);
  CHECK(args.resized_h == 480);
  CHECK(args.resized_w == 853);
  const tt::AugmentParams square;
  const auto full_hd = tt::augment_kernel_args(square, 1080, 1920, 480, 832);
  CHECK(full_hd.resized_w == args.resized_w);
  CHECK(full_hd.crop_x == args.crop_x);
  // NTSC DVD 16:9: 720x480 stored, 32:27 pixels, shown 853x480.
  params.pixel_aspect = 32.0 / 27.0;
  args = tt::augment_kernel_args(params, 480, 720, 480, 832);
  CHECK(args.resized_h == 480);
  CHECK(args.resized_w == 853);
  // The reference resamples to that size: a vertical edge at a third of the stored width stays
  // at a third of the output's uncropped width.
  params.crop_x = 0.0;
  params.pixel_aspect = 2.0;
  torch::Tensor clip = torch::zeros({1, 16, 24, 3}, torch::kUInt8);
  clip.slice(2, 8, 24).fill_(255);  // columns 8.. white: the edge at 1/3
  const torch::Tensor out = tt::augment_reference(clip, params, 16, 48);  // (3, 1, 16, 48): shown 48 wide
  const torch::Tensor row = out[0][0][8];
  CHECK(row[14].item<float>() < 0.0f);  // left of the edge (16 of 48)
  CHECK(row[18].item<float>() > 0.0f);
}

TEST_CASE("augment_reference returns (3, T, H, W) in [-1, 1]", "[augment]") {
  tt::AugmentOptions options;
  options.brightness = 0.5;
  options.contrast = 0.5;
  options.saturation = 0.5;
  options.hue = 0.2;
  auto clip = random_clip(3, 45, 70, 1);
  for (int64_t i = 0; i < 5; ++i) {
    auto out = tt::augment_reference(clip, tt::draw_augment_params(options, 9, 0, i), 24, 32);
    CHECK(out.sizes() == torch::IntArrayRef({3, 3, 24, 32}));
    CHECK(out.scalar_type() == torch::kFloat32);
    CHECK(out.min().item<float>() >= -1.0f);
    CHECK(out.max().item<float>() <= 1.0f);
  }
  auto batch = tt::augment_batch({clip, random_clip(3, 30, 90, 2)}, {identity_params(), identity_params()},
                                 24, 32, torch::kBFloat16);
  CHECK(batch.sizes() == torch::IntArrayRef({2, 3, 3, 24, 32}));
  CHECK(batch.scalar_type() == torch::kBFloat16);
}

TEST_CASE("a centre crop of an unscaled clip is the slice, normalised; random crops move it", "[augment]") {
  auto clip = random_clip(2, 32, 48, 3);
  auto expected = [&](int64_t x0) {
    return clip.slice(2, x0, x0 + 32).permute({3, 0, 1, 2}).to(torch::kFloat32) / 127.5 - 1;
  };
  auto params = identity_params();  // centre: x offset round(0.5 * 16) = 8
  auto out = tt::augment_reference(clip, params, 32, 32);
  CHECK(max_abs(out, expected(8)) <= 1e-6f);
  params.crop_x = 0.0;
  CHECK(max_abs(tt::augment_reference(clip, params, 32, 32), expected(0)) <= 1e-6f);
  params.crop_x = 1.0;
  CHECK(max_abs(tt::augment_reference(clip, params, 32, 32), expected(16)) <= 1e-6f);
  // Jitter amounts of 0 leave the pixels alone (exactly, up to the /255 and *2-1 rounding).
  tt::AugmentOptions none;
  none.flip = 0.0;
  none.crop = tt::CropMode::kCenter;
  CHECK(max_abs(tt::augment_reference(clip, tt::draw_augment_params(none, 5, 1, 2), 32, 32), expected(8)) <=
        1e-6f);
}

TEST_CASE("flip mirrors the output left-right", "[augment]") {
  auto clip = smooth_clip(2, 50, 80);
  auto params = identity_params();
  params.crop_x = 0.3;
  params.brightness = 1.1;
  auto plain = tt::augment_reference(clip, params, 40, 40);
  params.flip = true;
  auto flipped = tt::augment_reference(clip, params, 40, 40);
  CHECK(max_abs(flipped, plain.flip({3})) <= 1e-6f);
  CHECK(max_abs(flipped, plain) > 0.1f);
}

TEST_CASE("shrinking is antialiased: a one-pixel checkerboard becomes flat grey", "[augment]") {
  for (int64_t factor : {3, 4, 5}) {
    const int64_t n = 32 * factor;
    auto i = torch::arange(n, torch::kInt64);
    auto board = ((i.view({n, 1}) + i.view({1, n})) % 2 * 255).to(torch::kUInt8);  // (n, n)
    auto clip = board.view({1, n, n, 1}).expand({1, n, n, 3}).contiguous();
    auto out = tt::augment_reference(clip, identity_params(), 32, 32);
    INFO("factor " << factor);
    CHECK(out.abs().max().item<float>() <= 0.05f);  // mid-grey is 0 in [-1, 1]
    // Plain bilinear picks one or two source pixels and keeps the pattern at full contrast (3x: exactly
    // one pixel), which is what the test must tell apart.
    auto plain = F::interpolate(clip.permute({0, 3, 1, 2}).to(torch::kFloat32) / 127.5 - 1,
                                F::InterpolateFuncOptions()
                                    .size(std::vector<int64_t>{32, 32})
                                    .mode(torch::kBilinear)
                                    .align_corners(false));
    if (factor == 3 || factor == 5) CHECK(plain.abs().max().item<float>() >= 0.99f);
  }
}

TEST_CASE("colour jitter: brightness scales, saturation 0 is grey, hue keeps luma", "[augment]") {
  // A flat clip of one colour, no resize (32x32 -> 32x32).
  auto colour = torch::tensor({200, 100, 50}, torch::kInt64).to(torch::kUInt8);
  auto clip = colour.view({1, 1, 1, 3}).expand({2, 32, 32, 3}).contiguous();
  auto to01 = [](const torch::Tensor& out) { return (out + 1) / 2; };  // (3, T, H, W) in [0, 1]

  auto params = identity_params();
  params.brightness = 0.5;
  auto out = to01(tt::augment_reference(clip, params, 32, 32));
  CHECK(std::abs(out[0].mean().item<float>() - 100 / 255.0f) <= 1e-5f);
  CHECK(std::abs(out[2].mean().item<float>() - 25 / 255.0f) <= 1e-5f);

  params = identity_params();
  params.saturation = 0.0;
  out = to01(tt::augment_reference(clip, params, 32, 32));
  const float luma = (0.299f * 200 + 0.587f * 100 + 0.114f * 50) / 255;
  for (int c = 0; c < 3; ++c) CHECK(std::abs(out[c].mean().item<float>() - luma) <= 1e-5f);

  params = identity_params();
  params.contrast = 0.0;  // everything becomes the clip's mean grey, which is this colour's luma
  out = to01(tt::augment_reference(clip, params, 32, 32));
  for (int c = 0; c < 3; ++c) CHECK(std::abs(out[c].mean().item<float>() - luma) <= 1e-5f);

  // A muted colour so that no channel clips: the rotation keeps luma and changes the colour.
  auto muted =
      torch::tensor({150, 120, 100}, torch::kInt64).to(torch::kUInt8).view({1, 1, 1, 3}).expand({1, 8, 8, 3});
  params = identity_params();
  params.hue = 0.25;
  out = to01(tt::augment_reference(muted.contiguous(), params, 8, 8));
  const float r = out[0].mean().item<float>(), g = out[1].mean().item<float>(),
              b = out[2].mean().item<float>();
  CHECK(std::abs(0.299f * r + 0.587f * g + 0.114f * b - (0.299f * 150 + 0.587f * 120 + 0.114f * 100) / 255) <=
        1e-4f);
  CHECK(std::abs(r - 150 / 255.0f) > 0.02f);

  auto identity = tt::hue_rotation_matrix(0.0);
  auto full_turn = tt::hue_rotation_matrix(1.0);
  for (int k = 0; k < 9; ++k) {
    CHECK(identity[k] == (k % 4 == 0 ? 1.0f : 0.0f));
    CHECK(std::abs(full_turn[k] - identity[k]) <= 1e-5f);
  }
}

TEST_CASE("the kernel's arithmetic, run on the host, matches the reference", "[augment]") {
  if (!tt::kernels_built()) SKIP("built without CUDA kernels");
  struct Case {
    int64_t in_h, in_w, out_h, out_w;
    bool flip;
    double crop_y, crop_x, brightness, contrast, saturation, hue;
  };
  const Case cases[] = {
      {48, 64, 48, 48, false, 0.5, 0.5, 1, 1, 1, 0},           // crop only
      {90, 160, 32, 40, false, 0.5, 0.5, 1, 1, 1, 0},          // shrink 2.8x, odd ratio
      {121, 203, 24, 36, true, 0.2, 0.9, 1.3, 0.7, 1.4, 0.1},  // shrink ~5x, everything on
      {20, 30, 48, 64, true, 0.7, 0.3, 0.8, 1.2, 0.5, -0.3},   // enlarge
      {64, 64, 64, 64, false, 0.5, 0.5, 2.0, 1.0, 1.0, 0.0},   // brightness clipping
  };
  int64_t seed = 10;
  for (const Case& c : cases) {
    auto clip = (seed % 2 == 0) ? smooth_clip(3, c.in_h, c.in_w) : random_clip(3, c.in_h, c.in_w, seed);
    ++seed;
    tt::AugmentParams params;
    params.flip = c.flip;
    params.crop_y = c.crop_y;
    params.crop_x = c.crop_x;
    params.brightness = c.brightness;
    params.contrast = c.contrast;
    params.saturation = c.saturation;
    params.hue = c.hue;
    auto reference = tt::augment_reference(clip, params, c.out_h, c.out_w);
    auto args = tt::augment_kernel_args(params, c.in_h, c.in_w, c.out_h, c.out_w);
    auto emulated = tt::augment_clip_emulated(clip, args, c.out_h, c.out_w);
    INFO(c.in_h << "x" << c.in_w << " -> " << c.out_h << "x" << c.out_w);
    CHECK(emulated.sizes() == reference.sizes());
    CHECK(max_abs(emulated, reference) <= 1e-4f);
  }
}

// Tolerances: the kernel and the reference do the same float arithmetic in a different order (2-D
// window sum vs torch's two separable passes, FMA contraction), so fp32 outputs differ by float
// rounding only, ~1e-6; 1e-4 (0.013 of one 0-255 level) leaves room and still catches any wrong tap,
// weight or jitter step (those show up as >= 1e-3). bf16 rounds each side separately: values that
// straddle a rounding boundary land one bf16 step apart, which is 2^-8 for |x| in [0.5, 1) (half of
// 2/255), so bf16 allows 2^-8 + 1e-4.
TEST_CASE("the CUDA augment kernel matches the reference", "[gpu][augment]") {
  TT_REQUIRE_GPU();
  REQUIRE(tt::kernels_built());
  tt::AugmentOptions options;
  options.brightness = 0.3;
  options.contrast = 0.3;
  options.saturation = 0.5;
  options.hue = 0.1;
  // The last two anamorphic (HDV's 4:3 pixels, a 16:9 DVD's 32:27): the resize scales the axes apart.
  const int64_t sizes[][4] = {{720, 1280, 480, 832}, {362, 642, 480, 832}, {1080, 1920, 240, 416},
                              {64, 64, 64, 64},      {540, 720, 480, 832}, {480, 720, 240, 416}};
  const double pixel_aspects[] = {1.0, 1.0, 1.0, 1.0, 4.0 / 3.0, 32.0 / 27.0};
  int64_t sample = 0;
  for (const auto& s : sizes) {
    auto clip = (sample % 2 == 0) ? smooth_clip(5, s[0], s[1]) : random_clip(5, s[0], s[1], sample);
    auto params = tt::draw_augment_params(options, 42, 0, sample);
    params.pixel_aspect = pixel_aspects[sample++];
    auto reference = tt::augment_reference(clip, params, s[2], s[3]);
    auto gpu_clip = clip.to(torch::kCUDA);
    auto f32 = tt::augment_clip(gpu_clip, params, s[2], s[3], torch::kFloat32);
    auto bf16 = tt::augment_clip(gpu_clip, params, s[2], s[3], torch::kBFloat16);
    INFO(s[0] << "x" << s[1] << " -> " << s[2] << "x" << s[3]);
    CHECK(f32.sizes() == reference.sizes());
    CHECK(bf16.scalar_type() == torch::kBFloat16);
    CHECK(max_abs(f32.cpu(), reference) <= 1e-4f);
    CHECK(max_abs(bf16.cpu(), reference.to(torch::kBFloat16)) <= 1.0f / 256 + 1e-4f);
  }
  auto batch = tt::augment_batch(
      {smooth_clip(3, 90, 160).to(torch::kCUDA), random_clip(3, 100, 100, 1).to(torch::kCUDA)},
      {tt::AugmentParams{}, tt::AugmentParams{}}, 48, 64, torch::kBFloat16);
  CHECK(batch.sizes() == torch::IntArrayRef({2, 3, 3, 48, 64}));
  CHECK(batch.is_cuda());
}
