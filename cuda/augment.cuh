// Launchers of the fused augmentation kernels (no torch here; see cuda/ops.h for the entry and
// pipeline/augment.h for the definition they follow).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/augment_args.h"

namespace tt::kernels {

/// grey_sum[0] = sum over all pixels of 299 R + 587 G + 114 B (exact integer), rgb (pixels, 3)
/// uint8. Zeroes grey_sum on the stream first. Returns the launch status.
cudaError_t augment_grey_sum(unsigned long long* grey_sum, const uint8_t* rgb, int64_t pixels,
                             cudaStream_t stream);

/// rgb (frames, in_h, in_w, 3) uint8 -> out (3, frames, out_h, out_w): resize + crop + flip + jitter +
/// normalise in one pass. Exactly one of out_f32 / out_bf16 is non-null. grey_sum from
/// augment_grey_sum over the same clip. Returns the launch status.
cudaError_t augment_clip(float* out_f32, __nv_bfloat16* out_bf16, const uint8_t* rgb,
                         const unsigned long long* grey_sum, int64_t frames, int64_t in_h, int64_t in_w,
                         int64_t out_h, int64_t out_w, const AugmentKernelArgs& args, cudaStream_t stream);

/// The kernel's own per-pixel code run on the host (fp32 out, host pointers), so that machines
/// without a GPU can test the kernel's arithmetic against the reference.
void augment_clip_host(float* out_f32, const uint8_t* rgb, int64_t frames, int64_t in_h, int64_t in_w,
                       int64_t out_h, int64_t out_w, const AugmentKernelArgs& args);

}  // namespace tt::kernels
