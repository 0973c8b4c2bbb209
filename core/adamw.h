// AdamW over a fixed parameter list through ATen's fused kernel (at::_fused_adamw_): the step
// counts and the learning rate are device tensors, so a step never syncs the host (ready for
// CUDA-graph capture), and the whole state is tensors that checkpoints save and restore exactly.
#pragma once

#include <torch/types.h>

#include <functional>
#include <map>
#include <string>
#include <vector>

namespace tt {

struct AdamWOptions {
  /// Peak learning rate (the schedule scales it per step via set_lr).
  double lr = 1e-5;
  double beta1 = 0.9;
  double beta2 = 0.999;
  /// Decoupled weight decay.
  double weight_decay = 0.01;
  double eps = 1e-8;
};

/// How a bf16 parameter takes its fp32 update: (updated fp32 value, the parameter's index, its
/// step count after this step (0-d fp32 on the device)) -> the bf16 value (stochastic rounding,
/// cuda/ops.h stochastic_round_bf16, keyed by index and step).
using Bf16Rounding = std::function<torch::Tensor(const torch::Tensor&, int64_t, const torch::Tensor&)>;

class AdamW {
 public:
  /// `names` label the parameters in saved state ("<name>.exp_avg", ...); same order as params.
  /// Parameters are fp32 master weights, or bf16 ones (then `bf16_rounding` is required): their
  /// moments stay fp32, and each step updates an fp32 copy of the parameter and its gradient
  /// (one parameter at a time, so the transient memory is the largest parameter's) and rounds it
  /// back. 12 bytes per bf16 parameter (weight, gradient, two moments) against 16.
  AdamW(std::vector<torch::Tensor> params, std::vector<std::string> names, const AdamWOptions& options,
        Bf16Rounding bf16_rounding = nullptr);

  /// Sets the learning rate used by the next step (written into a device tensor, no sync).
  void set_lr(double lr);
  /// One update from the parameters' .grad() (parameters without a grad are skipped). When
  /// `found_inf` (0-d fp32, 1 = skip) is given, a step with non-finite gradients changes nothing,
  /// decided on the device.
  void step(const torch::Tensor& found_inf = torch::Tensor());
  /// Drops the gradients (`set_to_none`, the default: the next backward allocates them), or zeroes
  /// them in place, keeping their memory and addresses (what a captured CUDA Graph needs).
  void zero_grad(bool set_to_none = true);

  /// "optim.<name>.exp_avg", "optim.<name>.exp_avg_sq", "optim.<name>.step" -> tensors (CPU copies).
  std::map<std::string, torch::Tensor> state_dict() const;
  /// Restores state saved by state_dict; a missing or mis-shaped entry throws kCheckpoint.
  void load_state_dict(const std::map<std::string, torch::Tensor>& state);

 private:
  AdamWOptions options_;
  std::vector<torch::Tensor> params_;
  std::vector<std::string> names_;
  std::vector<torch::Tensor> exp_avg_, exp_avg_sq_, steps_;  // steps_: 0-d fp32 on the param's device
  torch::Tensor lr_;                                          // 0-d fp32 on the params' device
  Bf16Rounding bf16_rounding_;
};

/// Global L2 norm of all grads (fp32 or bf16), computed in fp32, and (when max_norm > 0) scales
/// them so the norm is at most max_norm. Returns the norm before clipping as a 0-d fp32 device
/// tensor (no host sync).
torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm);

}  // namespace tt
