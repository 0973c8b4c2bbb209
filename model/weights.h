// Moving a model's parameters to and from in-memory name -> tensor maps with diffusers key names, strictly:
// every missing, unexpected and mis-shaped key is reported together in one error.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>

#include "core/safetensors.h"

namespace tt {

/// fp32 CPU copies of named tensors (e.g. model->diffusers_parameters()): what checkpoints hold.
safetensors::TensorMap snapshot_weights(const std::map<std::string, torch::Tensor>& tensors);

/// Copies `weights` into `destinations` (name -> tensor or view, any dtype/device), converting
/// dtype and device. Throws kCheckpoint listing all missing, unexpected and mis-shaped keys,
/// naming `source`, before anything is written.
void load_weights_into(const std::map<std::string, torch::Tensor>& destinations,
                       const safetensors::TensorMap& weights, const std::string& source);

}  // namespace tt
