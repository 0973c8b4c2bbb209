// Text padding costs nothing it does not have to: columns that are padding in every sample of a
// batch are dropped before the Transformer, and when no padding is left the attention runs without
// a mask (SDPA can then take its flash/cuDNN paths). Exact: padded tokens only ever appear as
// masked keys, and their own rows never reach the video output.
#pragma once

#include <torch/types.h>

namespace tt {

struct TrimmedText {
  torch::Tensor states;  // (B, L', D): L' = last valid column + 1 over the batch
  torch::Tensor mask;    // (B, L') bool
  bool all_valid = false;  // every kept token valid in every sample: no attention mask needed
};

/// states (B, L, D) and mask (B, L) (bool or integer; nonzero = valid), on the CPU so that no
/// device sync is needed to decide the new length. A sample with no valid token keeps its first.
/// `multiple` > 1 rounds the kept length of a batch that keeps padding (and so runs masked) up to a
/// multiple of it (at most L): fewer distinct masked text lengths, so fewer step shapes for the
/// attention kernels to plan for, at the price of a few more masked columns. A batch with no padding
/// left at its exact length (one sample, or captions of one length) stays exact: no mask added.
TrimmedText trim_text_padding(const torch::Tensor& states, const torch::Tensor& mask, int64_t multiple = 1);

/// True when every row of mask (B, L) (CPU; nonzero = valid) is valid tokens followed by padding.
bool is_right_padded(const torch::Tensor& mask);

}  // namespace tt
