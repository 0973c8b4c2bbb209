// data.caption_dropout (see caption_dropout.h).
#include "pipeline/caption_dropout.h"

#include <torch/torch.h>

#include "core/errors.h"
#include "pipeline/sample_rng.h"

namespace tt {

bool caption_dropped(double p, uint64_t seed, int64_t step, int64_t index) {
  if (p <= 0.0) return false;
  if (p >= 1.0) return true;
  return sample_rng(seed, step, index, kRngCaptionDropout).uniform() < p;
}

LatentBatch CaptionDropout::apply(const LatentBatch& batch, int64_t step, int64_t first) const {
  const int64_t size = batch.text_states.size(0);
  std::vector<int64_t> dropped;
  for (int64_t i = 0; i < size; ++i)
    if (caption_dropped(p, seed, step, first + i)) dropped.push_back(i);
  if (dropped.empty()) return batch;
  TT_ASSERT(batch.text_states.size(1) == empty.text_states.size(0) && batch.pooled.size(1) == empty.pooled.size(0),
            "caption dropout: the empty caption's shapes differ from the batch's (checked at start-up)");
  LatentBatch out = batch;
  out.text_states = batch.text_states.clone();  // (B, L, D)
  out.text_mask = batch.text_mask.clone();      // (B, L)
  out.pooled = batch.pooled.clone();            // (B, P)
  const torch::Tensor states = empty.text_states.to(out.text_states.device(), out.text_states.scalar_type());
  const torch::Tensor mask = empty.text_mask.to(out.text_mask.device(), out.text_mask.scalar_type());
  const torch::Tensor pooled = empty.pooled.to(out.pooled.device(), out.pooled.scalar_type());
  for (int64_t i : dropped) {
    out.text_states.select(0, i).copy_(states);
    out.text_mask.select(0, i).copy_(mask);
    out.pooled.select(0, i).copy_(pooled);
  }
  return out;
}

}  // namespace tt
