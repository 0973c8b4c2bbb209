// TV-L1 optical flow (Zach, Pock and Bischof 2007, with Wedel et al.'s warping): the data pipeline's
// weight-free flow algorithm and the CPU baseline of the flow benchmarks (issue 13). This is the
// reference implementation on LibTorch tensor ops (any device, any float dtype); the CUDA kernels
// are checked against it.
//
// On CUDA frames each level's warps and iterations run as CUDA kernels (cuda/tvl1.cu, two launches
// per iteration) with the reference's arithmetic; the pyramid stays on tensor ops.
//
// The energy is  Σ λ |ρ(u)| + |∇u_x| + |∇u_y|  with ρ(u) = I1(p + u(p)) − I0(p) linearised around the
// flow of the current warp. It is split with an auxiliary field v (coupling (u − v)² / 2θ):
//  - v: pointwise, thresholding ρ against λθ|∇I1|² (the L1 data term's closed-form minimiser);
//  - u: for each component, the ROF problem  min |∇u| + (u − v)² / 2θ, solved with Chambolle's
//    dual projection: u = v + θ div p, then p ← (p + (τ/θ) ∇u) / (1 + (τ/θ) |∇u|).
// ∇ is the forward difference (zero at the last row and column), div its negative adjoint (backward
// differences). Each pyramid level (scale `pyramid_scale`, down to `min_size` pixels on the shorter
// side) runs `warps` warps of `iterations` iterations, starting from the coarser level's flow
// resized and scaled; the dual fields start at zero on every level. The parameters follow
// scikit-image's `optical_flow_tvl1` (images in [0, 1]: attachment λ = 15, tightness θ = 0.3, 5
// warps of 10 iterations, pyramid 0.5), so that comparisons at equal iterations mean the same work.
#pragma once

#include <torch/types.h>

#include <cstdint>

namespace tt {

struct TvL1Options {
  double lambda = 15.0;         // data attachment, for intensities in [0, 1]
  double theta = 0.3;           // coupling of u and v
  double tau = 0.25;            // dual step (<= 1/4 for the 2-D scheme to converge)
  int64_t warps = 5;            // per pyramid level
  int64_t iterations = 10;      // per warp
  double pyramid_scale = 0.5;   // size ratio of one level to the next finer one, in (0, 1)
  int64_t min_size = 16;        // the coarsest level's shorter side is at least this (pixels)
  /// CUDA frames: each level's warps and iterations run as cuda/tvl1.cu's kernels (false: as the
  /// tensor-op reference on the GPU, the kernels' comparison in tests and benchmarks). Where the
  /// build has no kernels the reference runs.
  bool kernels = true;
};

/// Flow from `i0` to `i1`: frames (H, W) or (B, H, W), floating point, intensities in [0, 1], on
/// any device. Returns (2, H, W) or (B, 2, H, W) in i0's dtype: channel 0 the x (column) and 1 the
/// y (row) displacement in pixels, such that i1(p + flow(p)) ≈ i0(p). Sizes below 2 pixels or a
/// mismatch between the frames are TT_ERR_DATA; options out of range TT_ERR_CONFIG.
torch::Tensor tvl1_flow(const torch::Tensor& i0, const torch::Tensor& i1, const TvL1Options& options = {});

/// `image` (B, H, W) sampled at p + flow(p) (bilinear, coordinates clamped to the image: edge
/// values beyond it); flow (B, 2, H, W) in pixels.
torch::Tensor warp_by_flow(const torch::Tensor& image, const torch::Tensor& flow);

}  // namespace tt
