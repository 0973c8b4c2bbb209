// AdamW on at::_fused_adamw_ and sync-free gradient clipping (see adamw.h).
#include "core/adamw.h"

#include <torch/torch.h>

#include "core/errors.h"

namespace tt {

AdamW::AdamW(std::vector<torch::Tensor> params, std::vector<std::string> names, const AdamWOptions& options,
             Bf16Rounding bf16_rounding)
    : options_(options), params_(std::move(params)), names_(std::move(names)), bf16_rounding_(std::move(bf16_rounding)) {
  TT_ASSERT(params_.size() == names_.size(), "AdamW: one name per parameter");
  TT_ASSERT(!params_.empty(), "AdamW: no parameters");
  for (const auto& p : params_) {
    TT_ASSERT(p.scalar_type() == torch::kFloat32 || (p.scalar_type() == torch::kBFloat16 && bf16_rounding_),
              "AdamW keeps fp32 master weights, or bf16 ones with a rounding; got ", p.scalar_type());
    const auto fp32 = p.options().dtype(torch::kFloat32);
    exp_avg_.push_back(torch::zeros(p.sizes(), fp32));
    exp_avg_sq_.push_back(torch::zeros(p.sizes(), fp32));
    steps_.push_back(torch::zeros({}, fp32));
  }
  lr_ = torch::full({}, options.lr, params_[0].options().dtype(torch::kFloat32));
}

void AdamW::set_lr(double lr) { lr_.fill_(lr); }

void AdamW::step(const torch::Tensor& found_inf) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> params, grads, m, v, steps;
  std::vector<size_t> bf16;  // indices of the bf16 parameters with a gradient
  for (size_t i = 0; i < params_.size(); ++i) {
    if (!params_[i].grad().defined()) continue;
    if (params_[i].scalar_type() == torch::kBFloat16) {
      bf16.push_back(i);
      continue;
    }
    params.push_back(params_[i]);
    grads.push_back(params_[i].grad());
    m.push_back(exp_avg_[i]);
    v.push_back(exp_avg_sq_[i]);
    steps.push_back(steps_[i]);
  }
  std::optional<torch::Tensor> skip;
  if (found_inf.defined()) skip = found_inf;
  if (!params.empty()) {
    // The fused kernel expects the step count already advanced (bias correction uses it).
    torch::_foreach_add_(steps, 1);
    at::_fused_adamw_(params, grads, m, v, /*max_exp_avg_sqs=*/{}, steps, lr_, options_.beta1, options_.beta2,
                      options_.weight_decay, options_.eps, /*amsgrad=*/false, /*maximize=*/false,
                      /*grad_scale=*/std::nullopt, skip);
    // A skipped step does not count.
    if (found_inf.defined()) {
      for (auto& count : steps) count.sub_(found_inf);
    }
  }
  for (const size_t i : bf16) {
    // The same update on fp32 copies; a skipped step leaves the copy as it was, and rounding a
    // bf16 value gives it back unchanged.
    torch::Tensor& p = params_[i];
    std::vector<torch::Tensor> p32 = {p.to(torch::kFloat32)}, g32 = {p.grad().to(torch::kFloat32)};
    steps_[i].add_(1);
    at::_fused_adamw_(p32, g32, {exp_avg_[i]}, {exp_avg_sq_[i]}, /*max_exp_avg_sqs=*/{}, {steps_[i]}, lr_,
                      options_.beta1, options_.beta2, options_.weight_decay, options_.eps, /*amsgrad=*/false,
                      /*maximize=*/false, /*grad_scale=*/std::nullopt, skip);
    if (found_inf.defined()) steps_[i].sub_(found_inf);
    p.copy_(bf16_rounding_(p32[0], static_cast<int64_t>(i), steps_[i]));
  }
}

void AdamW::zero_grad(bool set_to_none) {
  for (auto& p : params_) {
    if (set_to_none) {
      p.mutable_grad() = torch::Tensor();
    } else if (p.grad().defined()) {
      p.mutable_grad().detach_().zero_();
    }
  }
}

std::map<std::string, torch::Tensor> AdamW::state_dict() const {
  std::map<std::string, torch::Tensor> state;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = "optim." + names_[i];
    state[prefix + ".exp_avg"] = exp_avg_[i].cpu();
    state[prefix + ".exp_avg_sq"] = exp_avg_sq_[i].cpu();
    state[prefix + ".step"] = steps_[i].cpu();
  }
  return state;
}

void AdamW::load_state_dict(const std::map<std::string, torch::Tensor>& state) {
  torch::NoGradGuard no_grad;
  // Each tensor as saved: floating point, finite, and (second moments, step counts) not negative;
  // a damaged one would otherwise poison the first update and surface as TT_ERR_NAN steps later.
  auto restore = [&](const std::string& key, torch::Tensor& into, bool non_negative) {
    auto found = state.find(key);
    TT_CHECK(found != state.end(), ErrorCode::kCheckpoint, "optimizer state `", key, "` missing");
    TT_CHECK(found->second.sizes() == into.sizes(), ErrorCode::kCheckpoint, "optimizer state `", key,
             "` has shape ", found->second.sizes(), ", expected ", into.sizes());
    TT_CHECK(found->second.is_floating_point(), ErrorCode::kCheckpoint, "optimizer state `", key, "` is ",
             found->second.scalar_type(), ", not floating point");
    into.copy_(found->second);
    const torch::Tensor ok = non_negative ? torch::isfinite(into).logical_and(into >= 0) : torch::isfinite(into);
    TT_CHECK(ok.all().item<bool>(), ErrorCode::kCheckpoint, "optimizer state `", key, "` holds ",
             non_negative ? "negative or non-finite" : "non-finite", " values");
  };
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string prefix = "optim." + names_[i];
    restore(prefix + ".exp_avg", exp_avg_[i], false);
    restore(prefix + ".exp_avg_sq", exp_avg_sq_[i], true);
    restore(prefix + ".step", steps_[i], true);
  }
}

torch::Tensor clip_grad_norm(const std::vector<torch::Tensor>& params, double max_norm) {
  torch::NoGradGuard no_grad;
  std::vector<torch::Tensor> grads;
  for (const auto& p : params) {
    if (p.grad().defined()) grads.push_back(p.grad());
  }
  TT_ASSERT(!grads.empty(), "clip_grad_norm: no gradients");
  // Each norm accumulated and returned in fp32, also for bf16 gradients (bf16 master weights): a
  // bf16 norm keeps 8 bits, and squares summed in bf16 lose the small gradients entirely.
  auto norms = at::_foreach_norm(grads, 2, at::kFloat);
  auto total = torch::linalg_vector_norm(torch::stack(norms), 2);
  if (max_norm > 0) {
    // Scale by min(1, max_norm / (norm + 1e-6)) on the device; NaN norms stay NaN and are caught
    // by the caller's finiteness check.
    auto coef = torch::clamp_max(max_norm / (total + 1e-6), 1.0);
    torch::_foreach_mul_(grads, coef);
  }
  return total;
}

}  // namespace tt
