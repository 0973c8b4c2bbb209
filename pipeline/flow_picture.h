// Pictures of optical flow (`teletron probe VIDEO --flow OUT.png`): the usual colour coding, hue for
// the direction and saturation for the length, written as PNG through libavcodec's encoder.
#pragma once

#include <torch/types.h>

#include <string>

namespace tt {

/// flow (2, H, W) in pixels (x, y) -> (H, W, 3) uint8 RGB on the CPU: hue from the direction
/// (right red, down yellow-green, left cyan, up violet: hue = atan2(y, x) going round), saturation
/// |flow| / `max_magnitude` (clamped to 1), value 1, so no motion is white. max_magnitude <= 0 takes
/// the flow's own largest length (a still flow stays white).
torch::Tensor flow_to_rgb(const torch::Tensor& flow, double max_magnitude = 0);

/// Writes (H, W, 3) uint8 RGB as a PNG file through libavcodec's png encoder (TT_ERR_IO naming the
/// path when it cannot be encoded or written).
void write_png(const std::string& path, const torch::Tensor& rgb);

}  // namespace tt
