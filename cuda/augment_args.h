// The per-clip arguments of the fused augmentation kernel, shared by its launcher (cuda/augment.cuh)
// and its torch entry (cuda/ops.h); plain data, no torch or CUDA headers. pipeline/augment.h draws
// the parameters and turns them into these.
#pragma once

#include <cstdint>

namespace tt {

struct AugmentKernelArgs {
  /// Size the whole source frame is resized to (aspect kept; covers the output).
  int64_t resized_h = 0;
  int64_t resized_w = 0;
  /// Top-left corner of the output window inside the resized frame.
  int64_t crop_y = 0;
  int64_t crop_x = 0;
  /// Mirror the output window left-right.
  bool flip = false;
  /// x * brightness, then clamp to [0, 1].
  float brightness = 1.0f;
  /// Blend with the clip's mean grey (times brightness): contrast * x + (1 - contrast) * mean.
  float contrast = 1.0f;
  /// Blend with each pixel's grey: saturation * x + (1 - saturation) * grey.
  float saturation = 1.0f;
  /// Apply hue_matrix (a YIQ hue rotation, row-major 3x3 on RGB); false when the hue shift is 0.
  bool hue = false;
  float hue_matrix[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
};

}  // namespace tt
