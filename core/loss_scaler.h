// Dynamic loss scaling for fp16 training, kept entirely on the device: the loss is multiplied by
// the scale before backward, the gradients are unscaled and checked for inf/NaN in one pass
// (ATen's _amp_foreach_non_finite_check_and_unscale_), and the scale is updated without a host
// read (_amp_update_scale_): halved, with the step skipped, when a gradient is not finite; doubled
// after `window` clean steps in a row. bf16 and fp32 need no scaling: a disabled scaler passes the
// loss through and only reports non-finite gradients.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

namespace tt {

struct LossScalerOptions {
  /// Scale the loss (fp16); false: a pass-through that only detects non-finite gradients.
  bool enabled = false;
  /// The scale of the first step.
  double init_scale = 65536.0;
  /// Growth after `window` clean steps, and backoff on a non-finite step.
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  /// Clean steps in a row before the scale grows (mixed_precision.loss_scale_window).
  int64_t window = 2000;
};

class LossScaler {
 public:
  LossScaler(const LossScalerOptions& options, torch::Device device);

  bool enabled() const { return options_.enabled; }
  /// loss * scale when enabled, else loss itself.
  torch::Tensor scale_loss(const torch::Tensor& loss) const;
  /// Divides the parameters' gradients by the scale in place (enabled) and returns 0-d fp32 on the
  /// device: 1 when any gradient holds inf or NaN, else 0. Parameters without a gradient are skipped,
  /// and so are bf16 gradients (bf16 master weights), which are never scaled (only fp16 scales) and
  /// which ATen's AMP kernel does not take on CUDA: the caller's gradient-norm check covers them.
  torch::Tensor unscale_and_check(const std::vector<torch::Tensor>& params) const;
  /// After the optimizer step: halves the scale where `found_inf` (0-d fp32) is 1 and resets the
  /// clean-step count, otherwise counts the step and grows the scale at `window`. No-op when disabled.
  void update(const torch::Tensor& found_inf);

  /// The current scale (0-d fp32 on the device; 1 when disabled).
  const torch::Tensor& scale() const { return scale_; }
  /// "amp.scale", "amp.growth_tracker" (CPU copies); empty when disabled.
  std::map<std::string, torch::Tensor> state_dict() const;
  /// Restores state_dict's entries; returns false (scale left at init_scale) when they are absent.
  bool load_state_dict(const std::map<std::string, torch::Tensor>& state);

 private:
  LossScalerOptions options_;
  torch::Tensor scale_;           // 0-d fp32 on the device
  torch::Tensor growth_tracker_;  // 0-d int32 on the device: clean steps since the last change
};

}  // namespace tt
