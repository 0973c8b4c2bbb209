// Reentrant activation checkpointing through a custom autograd Function (see activation_checkpoint.h).
#include "model/activation_checkpoint.h"

#include <ATen/autocast_mode.h>
#include <torch/autograd.h>
#include <torch/custom_class.h>

#include <algorithm>

#include "core/autocast.h"
#include "model/kept_attention.h"

namespace tt {
namespace {

// Per thread: autograd runs a CUDA backward on its device's worker thread, and the recompute runs
// there, inside CheckpointFunction::backward (a second rank's threads have their own).
thread_local bool recomputing = false;

struct RecomputeScope {
  RecomputeScope() : previous(recomputing) { recomputing = true; }
  ~RecomputeScope() { recomputing = previous; }
  bool previous;
};

// Carries the block function and both autocast states (CUDA, and the CPU's of a bf16-master-weight
// run there) from forward to backward inside the context: the recomputation must cast as the
// forward did, or its activations differ from the ones the gradients assume.
struct BlockHolder : torch::CustomClassHolder {
  BlockFunction fn;
  size_t input_count = 0;  // the block's inputs; the tensors after them are its trainable parameters
  size_t total_count = 0;
  bool autocast_cuda = false;
  at::ScalarType autocast_cuda_dtype = at::kBFloat16;
  bool autocast_cpu = false;
  at::ScalarType autocast_cpu_dtype = at::kBFloat16;
  // model.checkpoint_keeps_attention: the first forward's attention outputs, replayed by the
  // recompute (model/kept_attention.h); null = recompute the attention too.
  std::shared_ptr<KeptAttentionStore> kept;
};

class CheckpointFunction : public torch::autograd::Function<CheckpointFunction> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const c10::intrusive_ptr<BlockHolder>& holder,
                                                at::TensorList inputs) {
    holder->autocast_cuda = at::autocast::is_autocast_enabled(at::kCUDA);
    holder->autocast_cuda_dtype = at::autocast::get_autocast_dtype(at::kCUDA);
    holder->autocast_cpu = at::autocast::is_autocast_enabled(at::kCPU);
    holder->autocast_cpu_dtype = at::autocast::get_autocast_dtype(at::kCPU);
    ctx->saved_data["block"] = c10::IValue::make_capsule(holder);
    std::vector<torch::Tensor> block_inputs(inputs.begin(),
                                            inputs.begin() + static_cast<int64_t>(holder->input_count));
    ctx->save_for_backward(block_inputs);
    // Autograd is off inside Function::forward: nothing of the block is recorded.
    const KeptAttentionScope keep(holder->kept.get(), /*replay=*/false);
    return holder->fn(block_inputs);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grad_outputs) {
    auto holder = c10::static_intrusive_pointer_cast<BlockHolder>(ctx->saved_data["block"].toCapsule());
    auto saved = ctx->get_saved_variables();
    std::vector<torch::Tensor> inputs;
    for (const auto& x : saved) {
      auto leaf = x.detach();
      if (x.requires_grad()) leaf.requires_grad_(true);
      inputs.push_back(leaf);
    }
    std::vector<torch::Tensor> outputs;
    {
      torch::AutoGradMode grad_on(true);
      AutocastScope autocast_cuda(holder->autocast_cuda, holder->autocast_cuda_dtype, at::kCUDA);
      AutocastScope autocast_cpu(holder->autocast_cpu, holder->autocast_cpu_dtype, at::kCPU);
      RecomputeScope recompute;
      const KeptAttentionScope keep(holder->kept.get(), /*replay=*/true);
      outputs = holder->fn(inputs);
    }
    holder->kept.reset();  // the replayed attention nodes hold what their backward needs
    // Backpropagate through the recomputed block: parameter grads accumulate as usual; the
    // inputs' grads land on the detached leaves.
    std::vector<torch::Tensor> roots, grads;
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (outputs[i].requires_grad() && grad_outputs[i].defined()) {
        roots.push_back(outputs[i]);
        grads.push_back(grad_outputs[i]);
      }
    }
    if (!roots.empty()) torch::autograd::backward(roots, grads);
    torch::autograd::variable_list result;
    result.push_back(torch::Tensor());  // the holder is not a tensor
    for (const auto& leaf : inputs) result.push_back(leaf.requires_grad() ? leaf.grad() : torch::Tensor());
    // The parameters' gradients were accumulated by the backward pass above, not returned.
    for (size_t i = holder->input_count; i < holder->total_count; ++i) result.push_back(torch::Tensor());
    return result;
  }
};

}  // namespace

std::vector<bool> every_nth_block(int64_t blocks, int64_t every_n) {
  std::vector<bool> checkpointed(static_cast<size_t>(std::max<int64_t>(blocks, 0)), false);
  for (size_t i = 0; i < checkpointed.size() && every_n > 0; ++i)
    checkpointed[i] = static_cast<int64_t>(i) % every_n == 0;
  return checkpointed;
}

std::pair<int64_t, int64_t> checkpointed_by_kind(const std::vector<bool>& checkpointed, int64_t doubles) {
  int64_t d = 0, s = 0;
  for (size_t i = 0; i < checkpointed.size(); ++i)
    (static_cast<int64_t>(i) < doubles ? d : s) += checkpointed[i] ? 1 : 0;
  return {d, s};
}

bool recomputing_for_backward() {
  return recomputing;
}

std::vector<torch::Tensor> checkpointed(const BlockFunction& fn, const std::vector<torch::Tensor>& inputs,
                                        const std::vector<torch::Tensor>& parameters, bool keep_attention) {
  if (!torch::GradMode::is_enabled()) return fn(inputs);
  auto holder = c10::make_intrusive<BlockHolder>();
  holder->fn = fn;
  if (keep_attention) holder->kept = make_kept_attention_store();
  holder->input_count = inputs.size();
  // A TensorList argument makes every input a differentiable input of the autograd node. The
  // trainable parameters join them so that the outputs need gradients whenever one of them does:
  // with a frozen base (LoRA) the first block's inputs need none, and without the adapters among
  // the node's inputs the loss would have no gradient function at all.
  std::vector<torch::Tensor> all = inputs;
  for (const torch::Tensor& p : parameters)
    if (p.requires_grad()) all.push_back(p);
  holder->total_count = all.size();
  return CheckpointFunction::apply(holder, at::TensorList(all));
}

}  // namespace tt
