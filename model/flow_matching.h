// Flow-matching training objective of HunyuanVideo: x_t = (1 - s) x0 + s eps, target eps - x0,
// MSE. Sigma is drawn logit-normal (sigmoid(N(mean, std^2)); mean 0, std 1 is what peers call
// "sigmoid") or uniform, then shifted: s' = k s / (1 + (k - 1) s). The model sees s' * 1000.
#pragma once

#include <ATen/core/Generator.h>
#include <torch/types.h>

namespace tt {

enum class TimestepSampling { kLogitNormal, kUniform };

struct FlowMatchingOptions {
  /// How sigma is drawn before the shift.
  TimestepSampling sampling = TimestepSampling::kLogitNormal;
  /// Mean and std of the normal inside the sigmoid (logit_normal only).
  double logit_mean = 0.0;
  double logit_std = 1.0;
  /// Shift k applied to every sigma (1 = none).
  double shift = 7.0;
  /// Guidance value fed to the guidance embedder, before the x1000 scaling.
  double guidance = 1.0;
};

/// k s / (1 + (k - 1) s), elementwise.
torch::Tensor shift_sigmas(const torch::Tensor& sigmas, double shift);

/// (batch) fp32 shifted sigmas on the generator's device.
torch::Tensor sample_sigmas(int64_t batch, const FlowMatchingOptions& options, at::Generator& generator);

struct FlowMatchingSample {
  torch::Tensor noisy;    // (B, C, T, H, W) like x0: (1 - s) x0 + s eps
  torch::Tensor target;   // (B, C, T, H, W) fp32: eps - x0
  torch::Tensor sigmas;   // (B) fp32
};

/// Draws sigmas and noise from `generator` (on x0's device) and builds the model input and target.
FlowMatchingSample make_flow_matching_sample(const torch::Tensor& x0, const FlowMatchingOptions& options,
                                             at::Generator& generator);

}  // namespace tt
