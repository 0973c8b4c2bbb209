// Helpers of the attention tests that compare a path without a mask (segments, per-sample calls)
// with SDPA under the key mask.
#pragma once

#include <torch/torch.h>

#include <vector>

namespace tt::test {

/// (B, S) valid-token flags from per-sample lengths.
inline torch::Tensor valid_rows(const std::vector<int64_t>& lengths, int64_t tokens) {
  auto valid = torch::zeros({static_cast<int64_t>(lengths.size()), tokens}, torch::kBool);
  for (size_t b = 0; b < lengths.size(); ++b)
    valid[static_cast<int64_t>(b)].slice(0, 0, lengths[b]).fill_(true);
  return valid;
}

/// Attention with a key mask, (B, S, H * D), as the model's masked path computes it.
inline torch::Tensor masked_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                      const torch::Tensor& valid) {
  auto mask = valid.to(q.device()).view({valid.size(0), 1, 1, valid.size(1)});
  return at::scaled_dot_product_attention(q, k, v, mask).transpose(1, 2).flatten(2, 3);
}

/// |a - b| / |b| in fp64.
inline double relative(const torch::Tensor& a, const torch::Tensor& b) {
  auto d = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm().item<double>();
  return d / (b.to(torch::kFloat64).norm().item<double>() + 1e-30);
}

}  // namespace tt::test
