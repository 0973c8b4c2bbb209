// Per-sample video augmentation: resize (aspect kept, antialiased when shrinking) so the frame covers
// the bucket, centre or random crop, horizontal flip, colour jitter, normalise to [-1, 1]. The
// parameters are drawn from (seed, epoch, sample) with pipeline/sample_rng.h; augment_reference is
// the plain-torch definition, cuda/augment.cu the fused kernel the [gpu] test holds to it.
//
// Colour jitter, in this fixed order on x in [0, 1], clamping to [0, 1] after each step:
//   brightness  x * b
//   contrast    c * x + (1 - c) * min(b * m, 1), m = mean grey (0.299 R + 0.587 G + 0.114 B) of the
//               whole source clip. torchvision averages the jittered output frame instead; the
//               source mean is what a single fused pass can know, and one mean per clip keeps the
//               contrast change from flickering between frames.
//   saturation  s * x + (1 - s) * grey(x)
//   hue         rotation of the chroma plane of YIQ by 2*pi*h (a 3x3 matrix on RGB). Chosen over an
//               HSV shift because it is linear and branch-free: kernel and reference agree to float
//               rounding instead of differing at the HSV sector boundaries; luma is preserved.
#pragma once

#include <torch/types.h>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/augment_args.h"

namespace tt {

enum class CropMode {
  kRandom,  // a uniformly random window inside the resized frame
  kCenter,  // the centred window
};

struct AugmentOptions {
  /// Probability of a horizontal flip, in [0, 1].
  double flip = 0.5;
  /// Where the output window sits inside the resized frame.
  CropMode crop = CropMode::kRandom;
  /// Brightness factor drawn from [max(0, 1 - brightness), 1 + brightness].
  double brightness = 0.0;
  /// Contrast factor drawn from [max(0, 1 - contrast), 1 + contrast].
  double contrast = 0.0;
  /// Saturation factor drawn from [max(0, 1 - saturation), 1 + saturation].
  double saturation = 0.0;
  /// Hue shift drawn from [-hue, hue] in turns; hue in [0, 0.5].
  double hue = 0.0;
  /// Output dtype: torch::kBFloat16 or torch::kFloat32.
  torch::Dtype dtype = torch::kBFloat16;
};

/// One sample's draw.
struct AugmentParams {
  bool flip = false;
  /// Crop position inside the resized frame's slack: 0 = top/left, 1 = bottom/right, 0.5 = centre.
  double crop_y = 0.5;
  double crop_x = 0.5;
  /// Jitter factors; 1, 1, 1, 0 is the identity.
  double brightness = 1.0;
  double contrast = 1.0;
  double saturation = 1.0;
  double hue = 0.0;
  /// Width over height of one source pixel (VideoInfo::pixel_aspect; not drawn): the resize
  /// scales the frame as shown, so anamorphic video comes out undistorted.
  double pixel_aspect = 1.0;
};

/// Throws kConfig naming tele_tron.data_pipeline.augment.<field> for out-of-range options.
void validate_augment_options(const AugmentOptions& options);

/// Deterministic from (seed, epoch, sample_index): every field is drawn, in a fixed order, even when
/// its amount is 0, so changing one amount does not shift the others.
AugmentParams draw_augment_params(const AugmentOptions& options, uint64_t seed, int64_t epoch,
                                  int64_t sample_index);

/// The hue rotation by `hue` turns in YIQ as a row-major 3x3 matrix on RGB (identity for 0).
std::array<float, 9> hue_rotation_matrix(double hue);

/// Resize size and crop corner for a (in_h, in_w) source and an (out_h, out_w) output: scale by
/// max(out_h / in_h, out_w / (in_w * pixel_aspect)) (rounded, at least the output; the width as
/// shown, in_w * pixel_aspect, is what scales), crop corner =
/// round(crop_y * (resized_h - out_h)), likewise for x. Also copies flip and jitter.
AugmentKernelArgs augment_kernel_args(const AugmentParams& params, int64_t in_h, int64_t in_w, int64_t out_h,
                                      int64_t out_w);

/// The definition: rgb (T, H, W, 3) uint8 (any device) -> (3, T, out_h, out_w) fp32 in [-1, 1].
torch::Tensor augment_reference(const torch::Tensor& rgb, const AugmentParams& params, int64_t out_h,
                                int64_t out_w);

/// rgb (T, H, W, 3) uint8 -> (3, T, out_h, out_w) `dtype` (bf16 or fp32): the fused kernel for CUDA
/// tensors, augment_reference (converted) for CPU tensors.
torch::Tensor augment_clip(const torch::Tensor& rgb, const AugmentParams& params, int64_t out_h,
                           int64_t out_w, torch::Dtype dtype);

/// Augments each clip (each (T, H_i, W_i, 3) uint8, same T) with its params and stacks them into
/// (B, 3, T, out_h, out_w) `dtype`.
torch::Tensor augment_batch(const std::vector<torch::Tensor>& clips, const std::vector<AugmentParams>& params,
                            int64_t out_h, int64_t out_w, torch::Dtype dtype);

}  // namespace tt
