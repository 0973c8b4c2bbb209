// Launcher of the TV-L1 optical-flow kernels (no torch here; see cuda/ops.h for the entry point,
// pipeline/optical_flow_tvl1.h for the scheme and its reference on tensor ops).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tt::kernels {

/// The TV-L1 scheme's constants for one pyramid level.
struct Tvl1Params {
  float lambda;        // data attachment
  float theta;         // coupling of u and v
  float tau;           // dual step
  int64_t warps;       // warps of this level
  int64_t iterations;  // iterations per warp
};

/// One pyramid level of TV-L1, every buffer fp32 and dense: frames i0, i1 (b, h, w); the flow u
/// (b, 2, h, w: x then y displacement in pixels), refined in place; the dual fields p (b, 4, h, w:
/// ux's x and y duals, then uy's), zero on entry; scratch (b, 4, h, w) for the warped frame, its
/// gradient and the linearised residual. Per warp: one kernel warps i1 by u and one takes its
/// gradient; per iteration: one kernel updates v and u, one the duals. Returns the first launch
/// error.
cudaError_t tvl1_refine(const float* i0, const float* i1, float* u, float* p, float* scratch, int64_t b, int64_t h,
                        int64_t w, const Tvl1Params& params, cudaStream_t stream);

}  // namespace tt::kernels
