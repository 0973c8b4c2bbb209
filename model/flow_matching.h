// Flow-matching training objective of HunyuanVideo: x_t = (1 - s) x0 + s eps, target eps - x0,
// MSE. Sigma is drawn logit-normal (sigmoid(N(mean, std^2)); mean 0, std 1 is what peers call
// "sigmoid") or uniform, then shifted: s' = k s / (1 + (k - 1) s). The model sees s' * 1000.
// Every draw is keyed by the sample (cuda/keyed_random.h): a sample's sigma and noise are a
// function of (seed, step, its index in the step's global batch), whatever micro-batch it is in.
#pragma once

#include <torch/types.h>

#include <cstdint>

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

/// The keys of samples first .. first + count - 1 of optimizer step `step` (0-based): (count) int64
/// on `device`, (step << 32) | index. Made on the device without a host sync.
torch::Tensor sample_keys(int64_t step, int64_t first, int64_t count, torch::Device device);

/// The same keys from a 0-d int64 step counter on the device: no host value in the arithmetic, so a
/// captured CUDA Graph that reads the counter draws each replay's own step.
torch::Tensor sample_keys(const torch::Tensor& step, int64_t first, int64_t count);

/// (B) fp32 shifted sigmas of the samples `keys` (B) int64 names, on the keys' device.
torch::Tensor sample_sigmas(const torch::Tensor& keys, const FlowMatchingOptions& options, uint64_t seed);

struct FlowMatchingSample {
  torch::Tensor noisy;    // (B, C, T, H, W) fp32: (1 - s) x0 + s eps
  torch::Tensor target;   // (B, C, T, H, W) fp32: eps - x0
  torch::Tensor sigmas;   // (B) fp32
};

/// The model input and target of x0 (B, C, T, H, W) for the samples `keys` (B) int64 (on x0's
/// device) names: their sigmas and noise drawn from (seed, key).
FlowMatchingSample make_flow_matching_sample(const torch::Tensor& x0, const FlowMatchingOptions& options,
                                             const torch::Tensor& keys, uint64_t seed);

}  // namespace tt
