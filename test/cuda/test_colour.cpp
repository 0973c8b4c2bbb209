// The YUV 4:2:0 -> RGB colour conversion: the reference against known colours, a textbook per-pixel
// formula and the ffmpeg CLI's rgb24 output (clips made with the CLI through tt::test::media_command, so
// the GPU machine replays recorded ones); the CUDA kernel against the reference.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <cmath>
#include <string>

#include "cuda/ops.h"
#include "test/test_util.h"

namespace {

// Planes of one constant colour: y (T, H, W), uv (T, ceil(H/2), ceil(W/2), 2) uint8.
std::pair<torch::Tensor, torch::Tensor> constant_planes(int64_t t, int64_t h, int64_t w, int y, int u,
                                                        int v) {
  auto yp = torch::full({t, h, w}, y, torch::kUInt8);
  auto uv = torch::empty({t, (h + 1) / 2, (w + 1) / 2, 2}, torch::kUInt8);
  uv.select(3, 0).fill_(u);
  uv.select(3, 1).fill_(v);
  return {yp, uv};
}

std::pair<torch::Tensor, torch::Tensor> random_planes(int64_t t, int64_t h, int64_t w, torch::Dtype dtype) {
  const int64_t high = dtype == torch::kUInt8 ? 256 : 65536;
  auto y = torch::randint(0, high, {t, h, w}, torch::kInt32).to(dtype);
  auto uv = torch::randint(0, high, {t, (h + 1) / 2, (w + 1) / 2, 2}, torch::kInt32).to(dtype);
  return {y, uv};
}

// RGB of one pixel (0-255 floats) by the textbook formula, in double.
std::array<double, 3> textbook_rgb(double y, double u, double v, double kr, double kb, bool full) {
  const double yn = full ? y / 255.0 : (y - 16.0) / 219.0;
  const double cb = full ? (u - 128.0) / 255.0 : (u - 128.0) / 224.0;
  const double cr = full ? (v - 128.0) / 255.0 : (v - 128.0) / 224.0;
  const double kg = 1.0 - kr - kb;
  const double r = yn + 2.0 * (1.0 - kr) * cr;
  const double b = yn + 2.0 * (1.0 - kb) * cb;
  const double g = (yn - kr * r - kb * b) / kg;
  return {255.0 * r, 255.0 * g, 255.0 * b};
}

struct ErrorStats {
  double mean = 0, p99 = 0, max = 0;
};

ErrorStats error_stats(const torch::Tensor& a, const torch::Tensor& b) {
  auto e = (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().flatten();
  ErrorStats s;
  s.mean = e.mean().item<double>();
  s.p99 = torch::quantile(e, 0.99).item<double>();
  s.max = e.max().item<double>();
  return s;
}

// Raw file -> uint8 tensor of `shape`.
torch::Tensor read_raw(const std::string& path, std::vector<int64_t> shape) {
  std::string bytes = tt::test::read_file(path);
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  REQUIRE(static_cast<int64_t>(bytes.size()) == n);
  return torch::from_blob(bytes.data(), shape, torch::kUInt8).clone();
}

// Makes a 5-frame testsrc2 clip (raw video in Matroska, which keeps range and colour tags), copies its planes
// out untouched and has ffmpeg convert it to rgb24 with `scale_args` (matrix and range explicit), then
// compares our reference and entry with that. The files are {media}/colour_<name>.yuv and .rgb.
void compare_with_ffmpeg(const std::string& name, int width, int height, const std::string& pix_fmt,
                         const std::string& tags, const std::string& scale_args,
                         const tt::YuvFormat& format) {
  const std::string quiet = "ffmpeg -hide_banner -loglevel error -y ";
  const std::string size = std::to_string(width + 2) + "x" + std::to_string(height + 2);
  const std::string crop = "crop=" + std::to_string(width) + ":" + std::to_string(height) + ":0:0:exact=1";
  const std::string clip = "'{media}/colour_" + name + ".mkv'";
  const std::string yuv_file = "colour_" + name + ".yuv";
  const std::string rgb_file = "colour_" + name + ".rgb";
  // One recorded command, so the Matroska clip, needed only to make the other two, is not kept (nor carried).
  const std::string command =
      quiet + "-f lavfi -i testsrc2=size=" + size + ":rate=25 -frames:v 5 -vf " + crop + ",format=" +
      pix_fmt + " " + tags + " -c:v rawvideo " + clip +
      " && " + quiet + "-i " + clip + " -c:v copy -f rawvideo '{media}/" + yuv_file + "'" +
      " && " + quiet + "-i " + clip + " -vf scale=" + scale_args + ",format=rgb24 -f rawvideo '{media}/" +
      rgb_file + "'" + " && rm " + clip;
  const auto result = tt::test::media_command(command);
  INFO(command << "\n" << result.output);
  REQUIRE(result.exit_code == 0);
  const std::string& media = tt::test::media_dir();
  const int64_t t = 5, h = height, w = width, ch = (h + 1) / 2, cw = (w + 1) / 2;
  auto yuv = read_raw(media + "/" + yuv_file, {t, h * w + 2 * ch * cw});
  auto y = yuv.narrow(1, 0, h * w).reshape({t, h, w});
  auto u = yuv.narrow(1, h * w, ch * cw).reshape({t, ch, cw});
  auto v = yuv.narrow(1, h * w + ch * cw, ch * cw).reshape({t, ch, cw});
  auto uv = torch::stack({u, v}, -1).contiguous();
  auto expected = read_raw(media + "/" + rgb_file, {t, h, w, 3});
  auto ours = tt::yuv420_to_rgb_reference(y, uv, format);
  auto stats = error_stats(ours, expected);
  INFO(width << "x" << height << " " << scale_args << ": mean " << stats.mean << " p99 " << stats.p99
             << " max " << stats.max);
  CHECK(stats.mean <= 1.0);
  CHECK(stats.p99 <= 3.0);
  CHECK(torch::equal(tt::yuv420_to_rgb(y, uv, format), ours));
}

tt::YuvFormat format_of(tt::YuvMatrix matrix, bool full_range, int bit_depth = 8) {
  tt::YuvFormat f;
  f.matrix = matrix;
  f.full_range = full_range;
  f.bit_depth = bit_depth;
  return f;
}

}  // namespace

TEST_CASE("limited-range black, white and grey", "[colour]") {
  for (auto matrix : {tt::YuvMatrix::kBt601, tt::YuvMatrix::kBt709, tt::YuvMatrix::kBt2020}) {
    auto format = format_of(matrix, false);
    auto [y0, uv0] = constant_planes(1, 4, 4, 16, 128, 128);
    CHECK(tt::yuv420_to_rgb_reference(y0, uv0, format).eq(0).all().item<bool>());
    auto [y1, uv1] = constant_planes(1, 4, 4, 235, 128, 128);
    CHECK(tt::yuv420_to_rgb_reference(y1, uv1, format).eq(255).all().item<bool>());
    auto [y2, uv2] = constant_planes(1, 4, 4, 126, 128, 128);  // (126 - 16) * 255 / 219 = 128.08
    CHECK(tt::yuv420_to_rgb_reference(y2, uv2, format).eq(128).all().item<bool>());
    auto [y3, uv3] = constant_planes(1, 2, 2, 0, 128, 128);  // below black clamps
    CHECK(tt::yuv420_to_rgb_reference(y3, uv3, format).eq(0).all().item<bool>());
  }
}

TEST_CASE("full-range black, white and grey", "[colour]") {
  auto format = format_of(tt::YuvMatrix::kBt601, true);
  auto [y0, uv0] = constant_planes(1, 2, 2, 0, 128, 128);
  CHECK(tt::yuv420_to_rgb_reference(y0, uv0, format).eq(0).all().item<bool>());
  auto [y1, uv1] = constant_planes(1, 2, 2, 255, 128, 128);
  CHECK(tt::yuv420_to_rgb_reference(y1, uv1, format).eq(255).all().item<bool>());
  auto [y2, uv2] = constant_planes(1, 2, 2, 77, 128, 128);
  CHECK(tt::yuv420_to_rgb_reference(y2, uv2, format).eq(77).all().item<bool>());
}

TEST_CASE("saturated colours differ between BT.601 and BT.709", "[colour]") {
  // BT.601 limited-range pure red is Y 81, Cb 90, Cr 240.
  auto [y, uv] = constant_planes(1, 2, 2, 81, 90, 240);
  auto bt601 = tt::yuv420_to_rgb_reference(y, uv, format_of(tt::YuvMatrix::kBt601, false))[0][0][0];
  auto bt709 = tt::yuv420_to_rgb_reference(y, uv, format_of(tt::YuvMatrix::kBt709, false))[0][0][0];
  CHECK(bt601[0].item<int>() >= 254);
  CHECK(bt601[1].item<int>() <= 1);
  CHECK(bt601[2].item<int>() <= 1);
  CHECK((bt601.to(torch::kInt32) - bt709.to(torch::kInt32)).abs().max().item<int>() >= 20);
}

TEST_CASE("the reference matches the textbook formula per pixel on odd sizes", "[colour]") {
  torch::manual_seed(1);
  const int64_t h = 181, w = 321;
  auto [y, uv] = random_planes(2, h, w, torch::kUInt8);
  struct Case {
    tt::YuvMatrix matrix;
    double kr, kb;
    bool full;
  };
  for (const Case& c :
       {Case{tt::YuvMatrix::kBt601, 0.299, 0.114, false}, Case{tt::YuvMatrix::kBt709, 0.2126, 0.0722, false},
        Case{tt::YuvMatrix::kBt2020, 0.2627, 0.0593, true}}) {
    auto rgb = tt::yuv420_to_rgb_reference(y, uv, format_of(c.matrix, c.full));
    REQUIRE(rgb.sizes() == torch::IntArrayRef({2, h, w, 3}));
    auto ya = y.accessor<uint8_t, 3>();
    auto uva = uv.accessor<uint8_t, 4>();
    auto out = rgb.accessor<uint8_t, 4>();
    int worst = 0;
    for (int64_t t = 0; t < 2; ++t) {
      for (int64_t i = 0; i < h; ++i) {
        for (int64_t j = 0; j < w; ++j) {
          auto expected =
              textbook_rgb(ya[t][i][j], uva[t][i / 2][j / 2][0], uva[t][i / 2][j / 2][1], c.kr, c.kb, c.full);
          for (int k = 0; k < 3; ++k) {
            const double clamped = std::fmin(std::fmax(std::round(expected[k]), 0.0), 255.0);
            worst = std::max(worst, static_cast<int>(std::abs(clamped - out[t][i][j][k])));
          }
        }
      }
    }
    CHECK(worst <= 1);
  }
}

TEST_CASE("10-bit P010 planes give the RGB of the equivalent 8-bit planes", "[colour]") {
  torch::manual_seed(2);
  auto [y8, uv8] = random_planes(2, 7, 9, torch::kUInt8);
  // 10-bit chroma is filtered vertically (colour.h): with chroma constant down each column the
  // filter changes nothing but float rounding, so the two conversions agree.
  uv8 = uv8.narrow(1, 0, 1).expand_as(uv8).contiguous();
  // P010: the 10-bit value v << 2 stored in the high bits; the 6 low bits must be ignored.
  auto to_p010 = [](const torch::Tensor& p) {
    auto low = torch::randint(0, 64, p.sizes(), torch::kInt32);
    return ((p.to(torch::kInt32) * 256) + low).to(torch::kUInt16);
  };
  auto y10 = to_p010(y8);
  auto uv10 = to_p010(uv8);
  for (auto matrix : {tt::YuvMatrix::kBt601, tt::YuvMatrix::kBt709, tt::YuvMatrix::kBt2020}) {
    auto limited8 = tt::yuv420_to_rgb(y8, uv8, format_of(matrix, false, 8)).to(torch::kInt32);
    auto limited10 = tt::yuv420_to_rgb(y10, uv10, format_of(matrix, false, 10)).to(torch::kInt32);
    CHECK((limited8 - limited10).abs().max().item<int>() <= 1);  // a tap sum may round one ulp off
    CHECK((limited8 != limited10).sum().item<int64_t>() <= limited8.numel() / 100);
    // Full range scales by 1023 instead of 4 * 255: equal within one level.
    auto full8 = tt::yuv420_to_rgb(y8, uv8, format_of(matrix, true, 8)).to(torch::kInt32);
    auto full10 = tt::yuv420_to_rgb(y10, uv10, format_of(matrix, true, 10)).to(torch::kInt32);
    CHECK((full8 - full10).abs().max().item<int>() <= 1);
  }
}

TEST_CASE("10-bit chroma is filtered vertically with the cubic taps, sited between luma rows", "[colour]") {
  torch::manual_seed(4);
  const int64_t h = 10, w = 6;
  auto [y8, uv8] = random_planes(2, h, w, torch::kUInt8);
  auto y = (y8.to(torch::kInt32) * 256).to(torch::kUInt16);  // P010, low bits zero
  auto uv = (uv8.to(torch::kInt32) * 256).to(torch::kUInt16);
  auto rgb = tt::yuv420_to_rgb_reference(y, uv, format_of(tt::YuvMatrix::kBt709, false, 10));
  auto ya = y8.accessor<uint8_t, 3>();
  auto uva = uv8.accessor<uint8_t, 4>();
  auto out = rgb.accessor<uint8_t, 4>();
  // Keys cubic, a = -0.6, at distance d.
  auto keys = [](double d) {
    const double a = -0.6, x = std::fabs(d);
    if (x < 1) return (a + 2) * x * x * x - (a + 3) * x * x + 1;
    if (x < 2) return a * x * x * x - 5 * a * x * x + 8 * a * x - 4 * a;
    return 0.0;
  };
  const int64_t ch = (h + 1) / 2;
  int worst = 0;
  for (int64_t t = 0; t < 2; ++t) {
    for (int64_t i = 0; i < h; ++i) {
      const double position = i / 2.0 - 0.25;  // in chroma rows
      for (int64_t j = 0; j < w; ++j) {
        double c[2] = {0, 0};
        for (int64_t r = static_cast<int64_t>(std::floor(position)) - 1; r <= static_cast<int64_t>(std::floor(position)) + 2; ++r) {
          const int64_t clamped = std::min(std::max<int64_t>(r, 0), ch - 1);
          for (int k = 0; k < 2; ++k) c[k] += keys(position - r) * uva[t][clamped][j / 2][k];
        }
        auto expected = textbook_rgb(ya[t][i][j], c[0], c[1], 0.2126, 0.0722, false);
        for (int k = 0; k < 3; ++k) {
          const double clamped = std::fmin(std::fmax(std::round(expected[k]), 0.0), 255.0);
          worst = std::max(worst, static_cast<int>(std::abs(clamped - out[t][i][j][k])));
        }
      }
    }
  }
  CHECK(worst <= 1);
}

TEST_CASE("bad dtypes and shapes are refused with clear messages", "[colour]") {
  auto [y, uv] = constant_planes(1, 5, 7, 16, 128, 128);
  auto format = format_of(tt::YuvMatrix::kBt601, false);
  CHECK_THROWS_WITH(tt::yuv420_to_rgb(y, uv.narrow(1, 0, 2), format),
                    Catch::Matchers::ContainsSubstring("expected uv (1, 3, 4, 2)"));
  CHECK_THROWS_WITH(tt::yuv420_to_rgb(y[0], uv, format),
                    Catch::Matchers::ContainsSubstring("expected y (T, H, W)"));
  CHECK_THROWS_WITH(tt::yuv420_to_rgb(y, uv, format_of(tt::YuvMatrix::kBt601, false, 10)),
                    Catch::Matchers::ContainsSubstring("bit_depth 10 expects UInt16"));
  CHECK_THROWS_WITH(tt::yuv420_to_rgb(y, uv, format_of(tt::YuvMatrix::kBt601, false, 12)),
                    Catch::Matchers::ContainsSubstring("must be 8 or 10"));
}

TEST_CASE("BT.601 limited range matches the ffmpeg CLI", "[colour]") {
  compare_with_ffmpeg("bt601_tv", 320, 240, "yuv420p", "", "in_color_matrix=bt601:in_range=tv",
                      format_of(tt::YuvMatrix::kBt601, false));
}

TEST_CASE("BT.709 limited range (tagged clip, odd width) matches the ffmpeg CLI", "[colour]") {
  compare_with_ffmpeg("bt709_tv_odd", 321, 180, "yuv420p",
                      "-color_primaries bt709 -color_trc bt709 -colorspace bt709",
                      "in_color_matrix=bt709:in_range=tv", format_of(tt::YuvMatrix::kBt709, false));
}

TEST_CASE("BT.601 full range (yuvj420p) matches the ffmpeg CLI", "[colour]") {
  compare_with_ffmpeg("bt601_pc", 320, 240, "yuvj420p", "", "in_color_matrix=bt601:in_range=pc",
                      format_of(tt::YuvMatrix::kBt601, true));
}

TEST_CASE("the CUDA colour kernel matches the reference", "[gpu][colour]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(3);
  const torch::Device cuda(torch::kCUDA);
  struct Size {
    int64_t t, h, w;
  };
  for (const Size& s : {Size{1, 1, 1}, Size{2, 2, 2}, Size{3, 5, 7}, Size{2, 181, 321}, Size{4, 270, 480},
                        Size{1, 720, 1280}}) {
    for (int bit_depth : {8, 10}) {
      for (auto matrix : {tt::YuvMatrix::kBt601, tt::YuvMatrix::kBt709, tt::YuvMatrix::kBt2020}) {
        for (bool full : {false, true}) {
          auto format = format_of(matrix, full, bit_depth);
          auto dtype = bit_depth == 8 ? torch::kUInt8 : torch::kUInt16;
          auto [y, uv] = random_planes(s.t, s.h, s.w, dtype);
          auto expected = tt::yuv420_to_rgb_reference(y, uv, format).to(torch::kInt32);
          INFO(s.t << "x" << s.h << "x" << s.w << " bit_depth " << bit_depth << " full " << full);
          auto dense = tt::yuv420_to_rgb(y.to(cuda), uv.to(cuda), format);
          REQUIRE(dense.is_cuda());
          CHECK((dense.cpu().to(torch::kInt32) - expected).abs().max().item<int>() <= 1);
          // Pitched like an NVDEC surface: rows padded past the width, frames further apart still.
          auto y_pad = torch::empty({s.t, s.h + 3, s.w + 37}, torch::TensorOptions(dtype).device(cuda));
          auto uv_pad = torch::empty({s.t, (s.h + 1) / 2 + 2, (s.w + 1) / 2 + 11, 2}, y_pad.options());
          auto y_view = y_pad.narrow(1, 0, s.h).narrow(2, 0, s.w);
          auto uv_view = uv_pad.narrow(1, 0, (s.h + 1) / 2).narrow(2, 0, (s.w + 1) / 2);
          y_view.copy_(y);
          uv_view.copy_(uv);
          auto pitched = tt::yuv420_to_rgb(y_view, uv_view, format);
          CHECK((pitched.cpu().to(torch::kInt32) - expected).abs().max().item<int>() <= 1);
          // The reference on the GPU agrees too.
          auto on_gpu = tt::yuv420_to_rgb_reference(y.to(cuda), uv.to(cuda), format).cpu().to(torch::kInt32);
          CHECK((on_gpu - expected).abs().max().item<int>() <= 1);
        }
      }
    }
  }
}
