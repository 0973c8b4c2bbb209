// Per-sample joint attention without a mask: see per_sample_attention.h.
#include "model/per_sample_attention.h"

#include <torch/torch.h>

#include "core/errors.h"
#include "core/graph_capture.h"
#include "model/kept_attention.h"

namespace tt {

torch::Tensor per_sample_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                   const std::vector<int64_t>& lengths) {
  TT_ASSERT(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
            "per_sample_attention: q, k, v must be (B, H, S, D) alike, got ", q.sizes(), k.sizes(),
            v.sizes());
  const int64_t batch = q.size(0), tokens = q.size(2);
  TT_ASSERT(static_cast<int64_t>(lengths.size()) == batch, "per_sample_attention: ", lengths.size(),
            " lengths for a batch of ", batch);
  // unbind's backward stacks the samples' gradients in one copy; narrowing a sample's tokens keeps
  // the (B, S, H, D) layout the projections made (no copy; the call's shape is its length alone).
  const auto qs = q.unbind(0), ks = k.unbind(0), vs = v.unbind(0);
  // Each sample's rows, then its padding's zeros, joined by one cat: the output is written once
  // (its backward only takes views).
  std::vector<torch::Tensor> pieces;
  pieces.reserve(2 * static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) {
    const int64_t length = lengths[static_cast<size_t>(b)];
    TT_ASSERT(length >= 1 && length <= tokens, "per_sample_attention: sample ", b, " has length ", length,
              ", outside [1, ", tokens, "]");
    // (1, H, L, D): the sample's first `length` tokens.
    auto valid = [length](const torch::Tensor& t) { return t.narrow(1, 0, length).unsqueeze(0); };
    auto out =
        kept_or_sdpa(valid(qs[b]), valid(ks[b]), valid(vs[b]), std::nullopt).squeeze(0).transpose(0, 1);
    pieces.push_back(out);  // (L, H, D)
    if (length < tokens)
      pieces.push_back(at::zeros({tokens - length, out.size(1), out.size(2)}, out.options()));
  }
  return torch::cat(pieces, 0).view({batch, tokens, -1});  // (B, S, H * D)
}

bool per_sample_attention_allowed(const torch::Tensor& q) {
  return !step_in_graph(q.device());
}

}  // namespace tt
