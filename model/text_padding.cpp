// Batch-level trimming of text padding (see text_padding.h).
#include "model/text_padding.h"

#include <torch/torch.h>

#include <algorithm>

#include "core/errors.h"

namespace tt {

bool is_right_padded(const torch::Tensor& mask) {
  TT_ASSERT(!mask.is_cuda() && mask.dim() == 2, "is_right_padded reads a (B, L) mask on the host");
  auto valid = (mask != 0).to(torch::kInt32);
  // A row is a valid prefix when its values never rise from 0 to 1 along the row.
  if (valid.size(1) < 2) return true;
  return !(valid.slice(1, 1) > valid.slice(1, 0, -1)).any().item<bool>();
}

TrimmedText trim_text_padding(const torch::Tensor& states, const torch::Tensor& mask, int64_t multiple) {
  TT_ASSERT(!mask.is_cuda(), "trim_text_padding reads the mask on the host; pass the CPU copy");
  TT_ASSERT(states.dim() == 3 && mask.dim() == 2 && states.size(0) == mask.size(0) &&
            states.size(1) == mask.size(1), "text states ", states.sizes(), " and mask ", mask.sizes(), " disagree");
  TT_ASSERT(multiple >= 1, "trim_text_padding: multiple must be 1 or more, got ", multiple);
  auto valid = mask != 0;  // (B, L) bool
  const int64_t length = valid.size(1);
  int64_t keep = 1;  // the refiner forces the first key on, so one column always stays
  auto any_valid = valid.any(0);  // (L)
  const bool* flags = any_valid.data_ptr<bool>();
  for (int64_t j = length - 1; j >= 0; --j) {
    if (flags[j]) {
      keep = j + 1;
      break;
    }
  }
  // Rounding only pays where the batch runs masked anyway: a batch with no padding left at its exact
  // length (one sample, or captions of one length) stays exact and attends without a mask.
  const bool exact_all_valid = valid.slice(1, 0, keep).all().item<bool>();
  if (!exact_all_valid) keep = std::min(length, (keep + multiple - 1) / multiple * multiple);
  TrimmedText out;
  out.states = states.slice(1, 0, keep);
  out.mask = valid.slice(1, 0, keep);
  out.all_valid = exact_all_valid;  // rounded batches keep padding, so they stay masked
  return out;
}

}  // namespace tt
