// Attention that a checkpointed block keeps from its first forward (model.checkpoint_keeps_attention).
// A recomputed block runs its whole forward again in backward; at long sequences its attention is
// the most expensive part of that (about 44 % of a 13B block's forward FLOPs at 14k tokens). What
// attention's backward needs besides q, k and v is its output and the softmax's log-sum-exp, so a
// block that keeps those two from its first forward ((B, H, N, D) in the attention dtype and
// (B, H, N) fp32: N x C x 2 + N x H x 4 bytes a layer in bf16) can replay them during the recompute
// and go straight to the backward kernel with the recomputed q, k and v. The same kernels SDPA
// chooses run, forward and backward, with the same inputs: the gradients are those of the plain
// recompute.
//
// How: activation_checkpoint.cpp opens a KeptAttentionScope on the thread running the block (its
// first forward records, its recompute replays, one store per checkpointed call); attend()
// (model/layers.h) goes through kept_or_sdpa, which is SDPA when no scope is open. Kept: attention
// without a mask whose backend SDPA would choose is flash (CUDA, CPU) or cuDNN (CUDA); any other
// call (a key mask, segments, another backend) is recorded as not kept and recomputed as before.
#pragma once

#include <torch/types.h>

#include <memory>

namespace tt {

/// What one checkpointed call's first forward kept, in call order (opaque; activation_checkpoint.cpp
/// owns one per checkpointed block call).
struct KeptAttentionStore;
std::shared_ptr<KeptAttentionStore> make_kept_attention_store();

/// While alive, attention on this thread records into `store` (replay false: the block's first
/// forward) or replays from it (replay true: its recompute for backward). A null store opens
/// nothing. Scopes nest: the innermost one holds.
class KeptAttentionScope {
 public:
  KeptAttentionScope(KeptAttentionStore* store, bool replay);
  ~KeptAttentionScope();
  KeptAttentionScope(const KeptAttentionScope&) = delete;
  KeptAttentionScope& operator=(const KeptAttentionScope&) = delete;

 private:
  KeptAttentionStore* previous_store_;
  bool previous_replay_;
};

/// at::scaled_dot_product_attention(q, k, v, mask) (B, H, N, D) -> (B, H, N, D), or, inside a
/// KeptAttentionScope, recorded (the output and log-sum-exp kept) or replayed (the kept output
/// returned, its backward the backend's backward on this call's q, k and v).
torch::Tensor kept_or_sdpa(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                           const std::optional<torch::Tensor>& mask);

}  // namespace tt
