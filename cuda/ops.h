// torch-facing entry points of teletron's kernels. Each checks dtypes/devices/contiguity, runs the
// CUDA kernel on the current stream for CUDA tensors, and the plain-torch CPU reference otherwise.
#pragma once

#include <torch/types.h>

#include <utility>

namespace tt {

/// Flow-matching mix in one pass: x0, noise (B, ...) fp32, sigmas (B) fp32 ->
/// (noisy = (1 - s) x0 + s noise, target = noise - x0), both fp32 like x0.
std::pair<torch::Tensor, torch::Tensor> flow_matching_mix(const torch::Tensor& x0, const torch::Tensor& noise,
                                                          const torch::Tensor& sigmas);

/// The plain-torch reference of flow_matching_mix (any device).
std::pair<torch::Tensor, torch::Tensor> flow_matching_mix_reference(const torch::Tensor& x0,
                                                                    const torch::Tensor& noise,
                                                                    const torch::Tensor& sigmas);

/// True when this build has the CUDA kernels compiled in.
bool kernels_built();

}  // namespace tt
