// LoRA: low-rank adapters on the Transformer's Linear layers, y = W x + b + (alpha / r) B A x, with
// the base frozen and only A (r, in) and B (out, r) trained (fp32). Adapters are named by diffusers'
// module names (`transformer_blocks.0.attn.to_q`), so a run's adapters are the PEFT state dict that
// diffusers' load_lora_weights reads. A fused base GEMM (to_qkv, add_qkv_proj, a single block's
// linear1) hosts one adapter per diffusers module in it: their A's run as one (k r, in) GEMM on the
// same input and their B's as one block-diagonal (rows, k r) GEMM added into the base output, so
// q, k and v keep separate adapters exactly as diffusers' per-module LoRA layers do.
// The adapters are not submodules of the model: model.named_parameters() and the diffusers views
// stay the base's, and LoraSet holds the trainable tensors.
#pragma once

#include <torch/nn.h>

#include <string>
#include <utility>
#include <vector>

namespace tt {

struct LoraOptions {
  /// Rank r of every adapter; 0 = no LoRA (the whole model trains).
  int64_t rank = 0;
  /// The update is scaled by alpha / rank; 0 means alpha = rank (scale 1).
  double alpha = 0;
  /// Dropout on the adapters' input in training (the base path sees the input unchanged).
  double dropout = 0;
  /// Modules that get adapters, as peft matches target_modules: a plain name matches a module whose
  /// diffusers name is it or ends with "." + it ("to_q", "ff.net.2"); an entry holding a regular
  /// expression character must match the whole name. Empty: default_lora_targets().
  std::vector<std::string> targets;
  /// "kaiming": A Kaiming-uniform with a = sqrt(5) (torch.nn.Linear's and peft's default), B zero;
  /// "gaussian": A ~ N(0, 1/r), B zero. Either way the adapted model starts as the base.
  std::string init = "kaiming";

  double scale() const { return (alpha > 0 ? alpha : static_cast<double>(rank)) / static_cast<double>(rank); }
};

/// The default targets: both streams' attention projections and MLPs in the double blocks, and the
/// single blocks' linear1 (to_q, to_k, to_v, proj_mlp) and linear2 (proj_out). The adaLN
/// modulations (norm1.linear, norm1_context.linear, norm.linear) can be named too.
std::vector<std::string> default_lora_targets();

/// Whether `module` (a diffusers module name) is one of `targets` (rules of LoraOptions::targets).
bool lora_target_matches(const std::vector<std::string>& targets, const std::string& module);

/// One diffusers module inside a host Linear's output rows.
struct LoraPart {
  std::string module;  // diffusers name, e.g. "transformer_blocks.0.attn.to_k"
  int64_t rows = 0;    // its output rows in the host
};

/// The adapters of one host Linear: one (A, B) pair per adapted part.
class LoraAdapterImpl : public torch::nn::Module {
 public:
  /// in_features: the host's input width; parts: its output rows in order; adapted[i]: part i
  /// gets an adapter (the others keep the base's rows unchanged).
  LoraAdapterImpl(int64_t in_features, std::vector<LoraPart> parts, const std::vector<bool>& adapted,
                  const LoraOptions& options);

  /// The adapted parts' A stacked: (k r, in) fp32.
  torch::Tensor down_weight() const;
  /// The adapters' input projection of x (dropout first, in training): (..., in) -> (..., k r).
  torch::Tensor down(const torch::Tensor& x) const;
  /// base_out + scale * B down, with B block-diagonal over the parts: base_out (..., rows),
  /// down (..., k r) -> (..., rows). One GEMM with the addition folded in.
  torch::Tensor add_up(const torch::Tensor& base_out, const torch::Tensor& down) const;
  /// Dropout is on: the fused paths must materialise the adapters' input to drop from it.
  bool has_dropout() const { return options_.dropout > 0; }

  struct Pair {
    std::string module;
    torch::Tensor a;  // (r, in) fp32, lora_A
    torch::Tensor b;  // (rows, r) fp32, lora_B
  };
  const std::vector<Pair>& pairs() const { return pairs_; }
  int64_t in_features() const { return in_features_; }

 private:
  torch::Tensor up_weight() const;  // (rows, k r), scale folded in

  int64_t in_features_;
  std::vector<LoraPart> parts_;
  std::vector<int> pair_of_part_;  // -1: not adapted
  LoraOptions options_;
  std::vector<Pair> pairs_;
};
TORCH_MODULE(LoraAdapter);

/// base_out (a Linear's output on x) plus the adapter's update of x, when there is an adapter.
torch::Tensor with_lora(const LoraAdapter& lora, const torch::Tensor& base_out, const torch::Tensor& x);
/// base(x) with the host's adapter, when there is one (x: the Linear's input).
torch::Tensor lora_linear(torch::nn::Linear& base, const LoraAdapter& lora, const torch::Tensor& x);

/// Every adapter of a model: the trainable tensors under their diffusers PEFT names.
struct LoraSet {
  LoraOptions options;
  std::vector<LoraAdapter> adapters;

  /// ("transformer_blocks.0.attn.to_q.lora_A.weight", tensor), ... in model order.
  std::vector<std::pair<std::string, torch::Tensor>> named_parameters() const;
  int64_t parameter_count() const;
  /// The adapted diffusers modules, in model order.
  std::vector<std::string> modules() const;
  void train(bool on);
};

}  // namespace tt
