// Activation checkpointing for C++ modules: run a block without keeping its activations and
// recompute it during backward (what torch.utils.checkpoint's reentrant variant does in Python).
// Trades one extra forward per checkpointed block for the block's activation memory.
#pragma once

#include <torch/types.h>

#include <functional>
#include <utility>
#include <vector>

namespace tt {

using BlockFunction = std::function<std::vector<torch::Tensor>(const std::vector<torch::Tensor>&)>;

/// Returns fn(inputs), recording only `inputs` for backward. `fn` must be deterministic and may
/// capture modules and constants (not tensors that need gradients: pass those as inputs).
/// `parameters`: the trainable tensors `fn` uses (a block's weights, its LoRA adapters); those that
/// need gradients make the outputs need them even when no input does (a frozen base under LoRA),
/// and get theirs accumulated when the block is recomputed. The recomputation runs under the
/// autocast state that was active here. `keep_attention`: the attention calls of the first forward
/// keep their output and log-sum-exp and the recompute replays them instead of running attention
/// again (model/kept_attention.h: more memory held per block, less recompute).
std::vector<torch::Tensor> checkpointed(const BlockFunction& fn, const std::vector<torch::Tensor>& inputs,
                                        const std::vector<torch::Tensor>& parameters = {},
                                        bool keep_attention = false);

/// The blocks every_n checkpointing recomputes among `blocks` (the model's double-stream blocks
/// first, then its single-stream ones): those whose index % every_n == 0; every_n <= 0: none.
std::vector<bool> every_nth_block(int64_t blocks, int64_t every_n);
/// How many of `checkpointed` are among the first `doubles` (double-stream) and how many after.
std::pair<int64_t, int64_t> checkpointed_by_kind(const std::vector<bool>& checkpointed, int64_t doubles);

/// True on this thread while a checkpointed block runs again for its backward: what it computes
/// then serves only the gradients (the recomputed outputs are roots of that backward, their values
/// never read), so a block may skip a result that no gradient needs (DoubleBlock, SingleBlock).
bool recomputing_for_backward();

}  // namespace tt
