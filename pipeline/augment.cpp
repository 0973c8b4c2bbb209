// Video augmentation (see augment.h): the parameter draw, the geometry shared with the kernel, and
// the plain-torch reference.
#include "pipeline/augment.h"

#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/errors.h"
#include "cuda/ops.h"
#include "pipeline/sample_rng.h"

namespace tt {
namespace {

namespace F = torch::nn::functional;

const char kKey[] = "tele_tron.data_pipeline.augment";

// BT.601 luma weights, as torchvision's rgb_to_grayscale; also the Y row of YIQ.
torch::Tensor grey(const torch::Tensor& x /* (T, 3, H, W) */) {
  return 0.299 * x.select(1, 0) + 0.587 * x.select(1, 1) + 0.114 * x.select(1, 2);  // (T, H, W)
}

void check_amount(double value, double max, const char* field) {
  TT_CHECK(std::isfinite(value) && value >= 0 && value <= max, ErrorCode::kConfig, kKey, ".", field,
           ": must be in [0, ", max, "], got ", value);
}

// A factor around 1: uniform in [max(0, 1 - amount), 1 + amount]; exactly 1 when amount is 0.
double draw_factor(SampleRng& rng, double amount) {
  return rng.uniform(std::max(0.0, 1.0 - amount), 1.0 + amount);
}

}  // namespace

void validate_augment_options(const AugmentOptions& options) {
  check_amount(options.flip, 1.0, "flip");
  check_amount(options.brightness, 1e9, "brightness");
  check_amount(options.contrast, 1e9, "contrast");
  check_amount(options.saturation, 1e9, "saturation");
  check_amount(options.hue, 0.5, "hue");
  TT_CHECK(options.dtype == torch::kBFloat16 || options.dtype == torch::kFloat32, ErrorCode::kConfig,
           "augment output dtype must be bf16 or fp32, got ", options.dtype);
}

AugmentParams draw_augment_params(const AugmentOptions& options, uint64_t seed, int64_t epoch,
                                  int64_t sample_index) {
  SampleRng rng = sample_rng(seed, epoch, sample_index, kRngAugment);
  AugmentParams params;
  params.flip = rng.uniform() < options.flip;
  double crop_y = rng.uniform();
  double crop_x = rng.uniform();
  if (options.crop == CropMode::kRandom) {
    params.crop_y = crop_y;
    params.crop_x = crop_x;
  }
  params.brightness = draw_factor(rng, options.brightness);
  params.contrast = draw_factor(rng, options.contrast);
  params.saturation = draw_factor(rng, options.saturation);
  params.hue = rng.uniform(-options.hue, options.hue);
  return params;
}

std::array<float, 9> hue_rotation_matrix(double hue) {
  std::array<float, 9> out = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  if (hue == 0.0) return out;
  // RGB -> YIQ (FCC NTSC); the inverse is computed rather than taken from the rounded published
  // table so that the product is a rotation to double precision.
  const double t[9] = {0.299, 0.587, 0.114, 0.596, -0.274, -0.322, 0.211, -0.523, 0.312};
  double inv[9];
  const double det = t[0] * (t[4] * t[8] - t[5] * t[7]) - t[1] * (t[3] * t[8] - t[5] * t[6]) +
                     t[2] * (t[3] * t[7] - t[4] * t[6]);
  inv[0] = (t[4] * t[8] - t[5] * t[7]) / det;
  inv[1] = (t[2] * t[7] - t[1] * t[8]) / det;
  inv[2] = (t[1] * t[5] - t[2] * t[4]) / det;
  inv[3] = (t[5] * t[6] - t[3] * t[8]) / det;
  inv[4] = (t[0] * t[8] - t[2] * t[6]) / det;
  inv[5] = (t[2] * t[3] - t[0] * t[5]) / det;
  inv[6] = (t[3] * t[7] - t[4] * t[6]) / det;
  inv[7] = (t[1] * t[6] - t[0] * t[7]) / det;
  inv[8] = (t[0] * t[4] - t[1] * t[3]) / det;
  const double angle = 2.0 * M_PI * hue;
  const double c = std::cos(angle), s = std::sin(angle);
  const double rot[9] = {1, 0, 0, 0, c, -s, 0, s, c};
  double rt[9];  // rot * t
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      rt[i * 3 + j] = rot[i * 3] * t[j] + rot[i * 3 + 1] * t[3 + j] + rot[i * 3 + 2] * t[6 + j];
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      out[i * 3 + j] =
          static_cast<float>(inv[i * 3] * rt[j] + inv[i * 3 + 1] * rt[3 + j] + inv[i * 3 + 2] * rt[6 + j]);
  return out;
}

AugmentKernelArgs augment_kernel_args(const AugmentParams& params, int64_t in_h, int64_t in_w, int64_t out_h,
                                      int64_t out_w) {
  TT_ASSERT(in_h > 0 && in_w > 0 && out_h > 0 && out_w > 0, "sizes ", in_h, "x", in_w, " -> ", out_h, "x",
            out_w);
  AugmentKernelArgs args;
  TT_ASSERT(params.pixel_aspect > 0.0, "pixel aspect ", params.pixel_aspect);
  const double shown_w = static_cast<double>(in_w) * params.pixel_aspect;  // the width on screen
  const double scale = std::max(static_cast<double>(out_h) / in_h, static_cast<double>(out_w) / shown_w);
  args.resized_h = std::max<int64_t>(out_h, std::llround(in_h * scale));
  args.resized_w = std::max<int64_t>(out_w, std::llround(shown_w * scale));
  const int64_t slack_y = args.resized_h - out_h;
  const int64_t slack_x = args.resized_w - out_w;
  args.crop_y = std::clamp<int64_t>(std::llround(params.crop_y * slack_y), 0, slack_y);
  args.crop_x = std::clamp<int64_t>(std::llround(params.crop_x * slack_x), 0, slack_x);
  args.flip = params.flip;
  args.brightness = static_cast<float>(params.brightness);
  args.contrast = static_cast<float>(params.contrast);
  args.saturation = static_cast<float>(params.saturation);
  args.hue = params.hue != 0.0;
  std::array<float, 9> hue = hue_rotation_matrix(params.hue);
  std::copy(hue.begin(), hue.end(), args.hue_matrix);
  return args;
}

torch::Tensor augment_reference(const torch::Tensor& rgb, const AugmentParams& params, int64_t out_h,
                                int64_t out_w) {
  TT_ASSERT(rgb.dim() == 4 && rgb.size(3) == 3 && rgb.scalar_type() == torch::kUInt8,
            "augment expects (T, H, W, 3) uint8, got ", rgb.sizes(), " ", rgb.scalar_type());
  const AugmentKernelArgs args = augment_kernel_args(params, rgb.size(1), rgb.size(2), out_h, out_w);
  torch::Tensor x = rgb.to(torch::kFloat32).permute({0, 3, 1, 2}) / 255.0;  // (T, 3, H, W) in [0, 1]
  const torch::Tensor mean = grey(x).mean();                                // () the clip's mean grey
  if (args.resized_h != rgb.size(1) || args.resized_w != rgb.size(2)) {
    x = F::interpolate(x.contiguous(), F::InterpolateFuncOptions()
                                           .size(std::vector<int64_t>{args.resized_h, args.resized_w})
                                           .mode(torch::kBilinear)
                                           .align_corners(false)
                                           .antialias(true));
  }
  x = x.slice(2, args.crop_y, args.crop_y + out_h)
          .slice(3, args.crop_x, args.crop_x + out_w);  // (T, 3, oh, ow)
  if (args.flip) x = x.flip({3});

  const double b = args.brightness, c = args.contrast, s = args.saturation;
  x = (x * b).clamp(0, 1);
  x = (c * x + (1 - c) * (mean * b).clamp_max(1)).clamp(0, 1);
  x = (s * x + (1 - s) * grey(x).unsqueeze(1)).clamp(0, 1);
  if (args.hue) {
    torch::Tensor m =
        torch::from_blob(const_cast<float*>(args.hue_matrix), {3, 3}, torch::kFloat32).clone().to(x.device());
    x = torch::einsum("ij,tjhw->tihw", {m, x}).clamp(0, 1);
  }
  return (x * 2 - 1).permute({1, 0, 2, 3}).contiguous();  // (3, T, oh, ow)
}

torch::Tensor augment_clip(const torch::Tensor& rgb, const AugmentParams& params, int64_t out_h,
                           int64_t out_w, torch::Dtype dtype) {
  TT_ASSERT(dtype == torch::kBFloat16 || dtype == torch::kFloat32, "augment dtype ", dtype);
  if (rgb.is_cuda())
    return augment_clip_cuda(rgb, augment_kernel_args(params, rgb.size(1), rgb.size(2), out_h, out_w), out_h,
                             out_w, dtype);
  return augment_reference(rgb, params, out_h, out_w).to(dtype);
}

torch::Tensor augment_batch(const std::vector<torch::Tensor>& clips, const std::vector<AugmentParams>& params,
                            int64_t out_h, int64_t out_w, torch::Dtype dtype) {
  TT_ASSERT(clips.size() == params.size() && !clips.empty(), clips.size(), " clips, ", params.size(),
            " params");
  std::vector<torch::Tensor> outs;
  outs.reserve(clips.size());
  for (size_t i = 0; i < clips.size(); ++i)
    outs.push_back(augment_clip(clips[i], params[i], out_h, out_w, dtype));
  return torch::stack(outs);  // (B, 3, T, out_h, out_w)
}

}  // namespace tt
