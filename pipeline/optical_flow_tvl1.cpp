// TV-L1 optical flow, the reference on LibTorch tensor ops (see optical_flow_tvl1.h).
#include "pipeline/optical_flow_tvl1.h"

#include <torch/nn/functional.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/errors.h"
#include "cuda/ops.h"

namespace tt {

namespace F = torch::nn::functional;

namespace {

// Forward differences along x (columns) and y (rows) of f (B, H, W); zero in the last column / row.
torch::Tensor forward_x(const torch::Tensor& f) {
  return F::pad(f.slice(2, 1) - f.slice(2, 0, -1), F::PadFuncOptions({0, 1}));
}
torch::Tensor forward_y(const torch::Tensor& f) {
  return F::pad(f.slice(1, 1) - f.slice(1, 0, -1), F::PadFuncOptions({0, 0, 0, 1}));
}

// The divergence of (px, py) (B, H, W) each, as the negative adjoint of forward_x / forward_y:
// backward differences, p taken as zero before the first column / row. The last column of px and
// row of py are zero here (the forward differences there are, and the duals start at zero).
torch::Tensor divergence(const torch::Tensor& px, const torch::Tensor& py) {
  return px - F::pad(px.slice(2, 0, -1), F::PadFuncOptions({1, 0})) + py -
         F::pad(py.slice(1, 0, -1), F::PadFuncOptions({0, 0, 1, 0}));
}

// Central differences of f (B, H, W) with the edge values repeated beyond the border.
std::pair<torch::Tensor, torch::Tensor> central_gradient(const torch::Tensor& f) {
  const torch::Tensor padded = F::pad(f.unsqueeze(1), F::PadFuncOptions({1, 1, 1, 1}).mode(torch::kReplicate)).squeeze(1);
  const int64_t h = f.size(1), w = f.size(2);
  const torch::Tensor gx = (padded.slice(1, 1, h + 1).slice(2, 2, w + 2) - padded.slice(1, 1, h + 1).slice(2, 0, w)) * 0.5;
  const torch::Tensor gy = (padded.slice(1, 2, h + 2).slice(2, 1, w + 1) - padded.slice(1, 0, h).slice(2, 1, w + 1)) * 0.5;
  return {gx, gy};
}

// (B, H, W) frames resized to (h, w) by area averaging (the pyramid's low-pass and subsampling).
torch::Tensor shrink(const torch::Tensor& frames, int64_t h, int64_t w) {
  return F::interpolate(frames.unsqueeze(1), F::InterpolateFuncOptions()
                                                 .size(std::vector<int64_t>{h, w})
                                                 .mode(torch::kArea))
      .squeeze(1);
}

// One pyramid level: `warps` x `iterations` of the scheme above from the flow u (B, 2, H, W).
torch::Tensor refine(const torch::Tensor& i0, const torch::Tensor& i1, torch::Tensor u, const TvL1Options& o) {
  const double lt = o.lambda * o.theta, step = o.tau / o.theta;
  torch::Tensor ux = u.select(1, 0).clone(), uy = u.select(1, 1).clone();
  torch::Tensor pxx = torch::zeros_like(ux), pxy = torch::zeros_like(ux);  // dual of ux
  torch::Tensor pyx = torch::zeros_like(ux), pyy = torch::zeros_like(ux);  // dual of uy
  for (int64_t warp = 0; warp < o.warps; ++warp) {
    const torch::Tensor warped = warp_by_flow(i1, torch::stack({ux, uy}, 1));
    const auto [gx, gy] = central_gradient(warped);
    const torch::Tensor grad_sq = (gx * gx + gy * gy).clamp_min(1e-12);
    // ρ(u) = warped − i0 + ∇I1 · (u − u_warp), linearised at this warp's flow.
    const torch::Tensor rho_at_warp = warped - i0 - gx * ux - gy * uy;
    for (int64_t it = 0; it < o.iterations; ++it) {
      // v: the minimiser of λ|ρ(v)| + (v − u)² / 2θ, pointwise.
      const torch::Tensor rho = rho_at_warp + gx * ux + gy * uy;
      const torch::Tensor shift = torch::where(rho < -lt * grad_sq, torch::full_like(rho, lt),
                                               torch::where(rho > lt * grad_sq, torch::full_like(rho, -lt),
                                                            -rho / grad_sq));
      const torch::Tensor vx = ux + shift * gx, vy = uy + shift * gy;
      // u: one dual step of the ROF problem per component.
      ux = vx + o.theta * divergence(pxx, pxy);
      uy = vy + o.theta * divergence(pyx, pyy);
      const torch::Tensor ux_x = forward_x(ux), ux_y = forward_y(ux);
      const torch::Tensor uy_x = forward_x(uy), uy_y = forward_y(uy);
      const torch::Tensor norm_x = 1 + step * torch::sqrt(ux_x * ux_x + ux_y * ux_y);
      const torch::Tensor norm_y = 1 + step * torch::sqrt(uy_x * uy_x + uy_y * uy_y);
      pxx = (pxx + step * ux_x) / norm_x;
      pxy = (pxy + step * ux_y) / norm_x;
      pyx = (pyx + step * uy_x) / norm_y;
      pyy = (pyy + step * uy_y) / norm_y;
    }
  }
  return torch::stack({ux, uy}, 1);
}

}  // namespace

torch::Tensor warp_by_flow(const torch::Tensor& image, const torch::Tensor& flow) {
  const int64_t b = image.size(0), h = image.size(1), w = image.size(2);
  const auto options = image.options();
  const torch::Tensor xs = torch::arange(w, options).view({1, 1, w});
  const torch::Tensor ys = torch::arange(h, options).view({1, h, 1});
  // Pixel coordinates to grid_sample's [-1, 1] (align_corners: -1 and 1 are the edge pixels' centres),
  // clamped so that points beyond the image take its edge values.
  const torch::Tensor x = (xs + flow.select(1, 0)).clamp(0, static_cast<double>(w - 1));
  const torch::Tensor y = (ys + flow.select(1, 1)).clamp(0, static_cast<double>(h - 1));
  const torch::Tensor grid = torch::stack({x * (2.0 / std::max<int64_t>(w - 1, 1)) - 1,
                                           y * (2.0 / std::max<int64_t>(h - 1, 1)) - 1}, -1);
  return F::grid_sample(image.view({b, 1, h, w}), grid,
                        F::GridSampleFuncOptions().mode(torch::kBilinear).padding_mode(torch::kBorder).align_corners(true))
      .view({b, h, w});
}

torch::Tensor tvl1_flow(const torch::Tensor& i0, const torch::Tensor& i1, const TvL1Options& o) {
  TT_CHECK(o.lambda > 0 && o.theta > 0 && o.tau > 0 && o.tau <= 0.25 && o.warps >= 1 && o.iterations >= 1 &&
               o.pyramid_scale > 0 && o.pyramid_scale < 1 && o.min_size >= 2,
           ErrorCode::kConfig,
           "TV-L1: lambda, theta > 0, tau in (0, 0.25], warps and iterations >= 1, pyramid_scale in (0, 1) and "
           "min_size >= 2 are needed");
  TT_CHECK(i0.sizes() == i1.sizes() && (i0.dim() == 2 || i0.dim() == 3) && i0.is_floating_point() &&
               i1.scalar_type() == i0.scalar_type() && i0.device() == i1.device(),
           ErrorCode::kData, "TV-L1: two frames of one shape, (H, W) or (B, H, W), one floating dtype and device "
           "are needed, got ", i0.sizes(), " ", i0.scalar_type(), " and ", i1.sizes(), " ", i1.scalar_type());
  const bool single = i0.dim() == 2;
  const torch::Tensor a = single ? i0.unsqueeze(0) : i0, b = single ? i1.unsqueeze(0) : i1;
  const int64_t h = a.size(1), w = a.size(2);
  TT_CHECK(h >= 2 && w >= 2, ErrorCode::kData, "TV-L1: frames of at least 2 x 2 pixels are needed, got ", h, " x ", w);

  // Level sizes, finest first, while the shorter side stays >= min_size.
  std::vector<std::pair<int64_t, int64_t>> sizes = {{h, w}};
  for (;;) {
    const auto [lh, lw] = sizes.back();
    const auto nh = static_cast<int64_t>(std::lround(static_cast<double>(lh) * o.pyramid_scale));
    const auto nw = static_cast<int64_t>(std::lround(static_cast<double>(lw) * o.pyramid_scale));
    if (std::min(nh, nw) < o.min_size || nh == lh || nw == lw) break;
    sizes.emplace_back(nh, nw);
  }
  torch::NoGradGuard no_grad;
  torch::Tensor flow;
  for (auto level = static_cast<int64_t>(sizes.size()) - 1; level >= 0; --level) {
    const auto [lh, lw] = sizes[static_cast<size_t>(level)];
    const torch::Tensor l0 = level == 0 ? a : shrink(a, lh, lw);
    const torch::Tensor l1 = level == 0 ? b : shrink(b, lh, lw);
    if (!flow.defined()) {
      flow = torch::zeros({a.size(0), 2, lh, lw}, a.options());
    } else {
      // The coarser flow, resized and scaled to this level's pixels.
      const double sx = static_cast<double>(lw) / static_cast<double>(flow.size(3));
      const double sy = static_cast<double>(lh) / static_cast<double>(flow.size(2));
      flow = F::interpolate(flow, F::InterpolateFuncOptions()
                                      .size(std::vector<int64_t>{lh, lw})
                                      .mode(torch::kBilinear)
                                      .align_corners(false));
      flow = torch::stack({flow.select(1, 0) * sx, flow.select(1, 1) * sy}, 1);
    }
    if (o.kernels && l0.is_cuda() && kernels_built()) {
      flow = tvl1_refine(l0, l1, flow, o.lambda, o.theta, o.tau, o.warps, o.iterations).to(a.scalar_type());
    } else {
      flow = refine(l0, l1, flow, o);
    }
  }
  return single ? flow.squeeze(0) : flow;
}

}  // namespace tt
