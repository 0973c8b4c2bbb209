// LossScaler (see loss_scaler.h): scale, unscale-and-check and update through ATen's AMP kernels.
#include "core/loss_scaler.h"

#include <torch/torch.h>

#include "core/errors.h"

namespace tt {

LossScaler::LossScaler(const LossScalerOptions& options, torch::Device device) : options_(options) {
  TT_ASSERT(options.init_scale > 0 && options.growth_factor > 1 && options.backoff_factor > 0 &&
                options.backoff_factor < 1 && options.window >= 1,
            "LossScaler: bad options");
  const auto on = torch::TensorOptions().device(device);
  scale_ = torch::full({}, options.enabled ? options.init_scale : 1.0, on.dtype(torch::kFloat32));
  growth_tracker_ = torch::zeros({}, on.dtype(torch::kInt32));
}

torch::Tensor LossScaler::scale_loss(const torch::Tensor& loss) const {
  return options_.enabled ? loss * scale_ : loss;
}

torch::Tensor LossScaler::unscale_and_check(const std::vector<torch::Tensor>& params) const {
  auto found_inf = torch::zeros({}, scale_.options());
  std::vector<torch::Tensor> grads;
  for (const torch::Tensor& param : params) {
    if (!param.grad().defined()) continue;
    if (param.grad().scalar_type() == torch::kBFloat16) {
      TT_ASSERT(!options_.enabled,
                "LossScaler: bf16 gradients are never scaled (fp16 autocast has fp32 master weights)");
      continue;
    }
    grads.push_back(param.grad());
  }
  if (grads.empty()) return found_inf;
  // Disabled: the scale stays 1, so the same pass detects non-finite values and changes nothing.
  const torch::Tensor inv_scale = options_.enabled ? scale_.reciprocal() : scale_;
  at::_amp_foreach_non_finite_check_and_unscale_(grads, found_inf, inv_scale);
  return found_inf;
}

void LossScaler::update(const torch::Tensor& found_inf) {
  if (!options_.enabled) return;
  at::_amp_update_scale_(scale_, growth_tracker_, found_inf, options_.growth_factor, options_.backoff_factor,
                         options_.window);
}

std::map<std::string, torch::Tensor> LossScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"amp.scale", scale_.cpu().clone()}, {"amp.growth_tracker", growth_tracker_.cpu().clone()}};
}

bool LossScaler::load_state_dict(const std::map<std::string, torch::Tensor>& state) {
  if (!options_.enabled) return true;
  auto scale = state.find("amp.scale");
  auto tracker = state.find("amp.growth_tracker");
  if (scale == state.end() || tracker == state.end()) return false;
  TT_CHECK(scale->second.numel() == 1 && tracker->second.numel() == 1, ErrorCode::kCheckpoint,
           "amp.scale / amp.growth_tracker: expected single values, got ", scale->second.sizes(), " and ",
           tracker->second.sizes());
  const double value = scale->second.to(torch::kFloat64).item<double>();
  TT_CHECK(std::isfinite(value) && value > 0, ErrorCode::kCheckpoint, "amp.scale: expected a positive finite scale, got ",
           value);
  scale_.fill_(value);
  growth_tracker_.fill_(tracker->second.to(torch::kInt64).item<int64_t>());
  return true;
}

}  // namespace tt
