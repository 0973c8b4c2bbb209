// Moving a model's parameters to and from in-memory name -> tensor maps with diffusers key names, strictly:
// every missing, unexpected and mis-shaped key is reported together in one error.
#pragma once

#include <torch/types.h>

#include <map>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace tt {

/// "\n  <label>: <line>" for each line, capped at 20 with "... and N more".
std::string list_lines(const char* label, const std::vector<std::string>& lines);

/// Throws the one strict-loading error (kCheckpoint): every missing, unexpected and mis-shaped key
/// together, naming `source`. Does nothing when all three lists are empty.
void throw_if_weights_mismatch(const std::string& source, const std::vector<std::string>& missing,
                               const std::vector<std::string>& unexpected,
                               const std::vector<std::string>& misshaped);

/// CPU copies of named tensors (e.g. model->diffusers_parameters()): what checkpoints hold. bf16
/// tensors (bf16 master weights) stay bf16, everything else becomes fp32.
safetensors::TensorMap snapshot_weights(const std::map<std::string, torch::Tensor>& tensors);

/// Copies `weights` into `destinations` (name -> tensor or view, any dtype/device), converting
/// dtype and device. Throws kCheckpoint listing all missing, unexpected and mis-shaped keys,
/// naming `source`, before anything is written.
void load_weights_into(const std::map<std::string, torch::Tensor>& destinations,
                       const safetensors::TensorMap& weights, const std::string& source);

}  // namespace tt
