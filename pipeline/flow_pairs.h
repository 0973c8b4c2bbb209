// Frame pairs with exactly known optical flow, for the flow tests and `teletron bench --suite flow`
// (TV-L1, NVOFA, RAFT): a smooth texture evaluated at moved coordinates, so that no resampling
// error enters the ground truth; a real frame moved by the same maps and resampled; the end-point
// error against the truth.
#pragma once

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <utility>

namespace tt {

/// A smooth texture in [0.05, 0.95] at pixel coordinates (x, y): sums of sinusoids of several
/// orientations and periods (6-20 px), so that every direction of motion is observable.
inline torch::Tensor flow_texture(const torch::Tensor& x, const torch::Tensor& y) {
  return 0.5 + 0.15 * torch::sin(0.31 * x + 0.17 * y) + 0.15 * torch::cos(0.23 * x - 0.41 * y) +
         0.1 * torch::sin(0.11 * x + 0.52 * y + 1.3) + 0.05 * torch::cos(0.67 * x + 0.05 * y);
}

/// A non-periodic, multi-scale texture for the block-matching engine (NVOFA): 48 sinusoids with
/// wavelengths from 12 to 160 px, amplitudes growing with the wavelength (roughly a natural
/// image's spectrum), directions and phases from a fixed LCG seed, scaled to a standard deviation
/// near 0.15 around 0.5 and clamped to [0, 1]. flow_texture's four sinusoids repeat: a matcher that
/// searches tens of pixels finds shifted copies of a block there (NVOFA measured a 34-px mean flow for
/// a 5.3-px shift on it at 240x320), which says nothing about the engine's integration.
inline torch::Tensor rich_texture(const torch::Tensor& x, const torch::Tensor& y) {
  uint64_t state = 0x9E3779B97F4A7C15ull;
  auto next = [&state] {  // uniform in [0, 1)
    state = state * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<double>(state >> 11) / 9007199254740992.0;
  };
  torch::Tensor sum = torch::zeros_like(x);
  double power = 0.0;
  for (int i = 0; i < 48; ++i) {
    const double wavelength = 12.0 * std::pow(160.0 / 12.0, next());
    const double angle = 2.0 * M_PI * next(), phase = 2.0 * M_PI * next();
    const double amplitude = std::sqrt(wavelength);
    const double k = 2.0 * M_PI / wavelength;
    sum = sum + amplitude * torch::sin(k * std::cos(angle) * x + k * std::sin(angle) * y + phase);
    power += amplitude * amplitude / 2.0;
  }
  return (0.5 + sum * (0.15 / std::sqrt(power))).clamp(0.0, 1.0);
}

/// Which texture a synthetic pair shows.
enum class PairTexture { kPeriodic, kRich };

struct FlowPair {
  torch::Tensor i0, i1, flow;  // (H, W) float32, (H, W) float32, (2, H, W) float32 (x, y)
};

/// i1 is i0 moved by the map m: i1(m(q)) = i0(q), so the flow at p is m(p) - p. Built by evaluating
/// the texture at m⁻¹(p) for i1. `forward` and `inverse` map (x, y) grids (float64) to coordinates.
/// `scale` < 1 stretches the texture's periods by 1 / scale (large frames: at 6-20 px periods a
/// coarse-to-fine method's coarse levels alias them).
template <typename Forward, typename Inverse>
FlowPair moved_pair(int64_t h, int64_t w, Forward forward, Inverse inverse, double scale = 1.0,
                    PairTexture texture = PairTexture::kPeriodic) {
  auto paint = [texture](const torch::Tensor& x, const torch::Tensor& y) {
    return texture == PairTexture::kRich ? rich_texture(x, y) : flow_texture(x, y);
  };
  auto ys = torch::arange(h, torch::kFloat64).view({h, 1}).expand({h, w});
  auto xs = torch::arange(w, torch::kFloat64).view({1, w}).expand({h, w});
  FlowPair p;
  p.i0 = paint(xs * scale, ys * scale).to(torch::kFloat32);
  auto [sx, sy] = inverse(xs, ys);
  p.i1 = paint(sx * scale, sy * scale).to(torch::kFloat32);
  auto [fx, fy] = forward(xs, ys);
  p.flow = torch::stack({fx - xs, fy - ys}).to(torch::kFloat32);
  return p;
}

/// Maps of the plane with their inverses, on (x, y) grids (float64 tensors): a translation by
/// (dx, dy), a rotation by `degrees` and a zoom by `factor` about the centre of an h x w picture.
struct Translation {
  double dx, dy;
  template <typename T>
  std::pair<T, T> forward(const T& x, const T& y) const { return {x + dx, y + dy}; }
  template <typename T>
  std::pair<T, T> inverse(const T& x, const T& y) const { return {x - dx, y - dy}; }
};

struct Rotation {
  Rotation(int64_t h, int64_t w, double degrees)
      : c(std::cos(degrees * M_PI / 180.0)), s(std::sin(degrees * M_PI / 180.0)),
        cx(static_cast<double>(w - 1) / 2.0), cy(static_cast<double>(h - 1) / 2.0) {}
  double c, s, cx, cy;
  template <typename T>
  std::pair<T, T> forward(const T& x, const T& y) const {
    return {cx + c * (x - cx) - s * (y - cy), cy + s * (x - cx) + c * (y - cy)};
  }
  template <typename T>
  std::pair<T, T> inverse(const T& x, const T& y) const {
    return {cx + c * (x - cx) + s * (y - cy), cy - s * (x - cx) + c * (y - cy)};
  }
};

struct Zoom {
  Zoom(int64_t h, int64_t w, double factor)
      : z(factor), cx(static_cast<double>(w - 1) / 2.0), cy(static_cast<double>(h - 1) / 2.0) {}
  double z, cx, cy;
  template <typename T>
  std::pair<T, T> forward(const T& x, const T& y) const { return {cx + z * (x - cx), cy + z * (y - cy)}; }
  template <typename T>
  std::pair<T, T> inverse(const T& x, const T& y) const { return {cx + (x - cx) / z, cy + (y - cy) / z}; }
};

/// The texture pair moved by one of the maps above.
template <typename Map>
FlowPair texture_pair(int64_t h, int64_t w, const Map& map, double scale = 1.0,
                      PairTexture texture = PairTexture::kPeriodic) {
  return moved_pair(
      h, w, [&](auto x, auto y) { return map.forward(x, y); }, [&](auto x, auto y) { return map.inverse(x, y); },
      scale, texture);
}

/// The pair moved by (dx, dy) pixels.
inline FlowPair translated_pair(int64_t h, int64_t w, double dx, double dy, double scale = 1.0,
                                PairTexture texture = PairTexture::kPeriodic) {
  return texture_pair(h, w, Translation{dx, dy}, scale, texture);
}

/// The pair rotated by `degrees` about the picture's centre.
inline FlowPair rotated_pair(int64_t h, int64_t w, double degrees, double scale = 1.0) {
  return texture_pair(h, w, Rotation(h, w, degrees), scale);
}

/// `image` (H, W) float sampled bilinearly at (x, y) (float64 grids in pixels; edge values beyond it).
inline torch::Tensor sample_image_at(const torch::Tensor& image, const torch::Tensor& x, const torch::Tensor& y) {
  namespace F = torch::nn::functional;
  const int64_t h = image.size(0), w = image.size(1);
  const torch::Tensor gx = (x * 2 + 1) / static_cast<double>(w) - 1, gy = (y * 2 + 1) / static_cast<double>(h) - 1;
  const torch::Tensor grid = torch::stack({gx, gy}, -1).unsqueeze(0).to(torch::kFloat32);
  return F::grid_sample(
             image.view({1, 1, h, w}), grid,
             F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(torch::kBorder).align_corners(false))
      .view({h, w});
}

/// A real frame (H, W) float as i0, moved by `map` and resampled bilinearly as i1 (i1(q) =
/// i0(m⁻¹(q))): the truth is exact, the resampling blurs i1 a little.
template <typename Map>
FlowPair moved_frame(const torch::Tensor& frame, const Map& map) {
  const int64_t h = frame.size(0), w = frame.size(1);
  auto ys = torch::arange(h, torch::kFloat64).view({h, 1}).expand({h, w});
  auto xs = torch::arange(w, torch::kFloat64).view({1, w}).expand({h, w});
  FlowPair p;
  p.i0 = frame;
  auto [sx, sy] = map.inverse(xs, ys);
  p.i1 = sample_image_at(frame, sx, sy);
  auto [fx, fy] = map.forward(xs, ys);
  p.flow = torch::stack({fx - xs, fy - ys}).to(torch::kFloat32);
  return p;
}

/// Mean end-point error of `flow` (2, H, W) against `truth` away from a border of `margin` pixels
/// (where content enters or leaves).
inline double flow_epe(const torch::Tensor& flow, const torch::Tensor& truth, int64_t margin) {
  auto d = (flow.cpu() - truth.cpu()).slice(1, margin, -margin).slice(2, margin, -margin);
  return torch::sqrt((d * d).sum(0)).mean().item<double>();
}

}  // namespace tt
