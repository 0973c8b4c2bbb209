// Moving a module's parameters to and from name -> tensor maps with diffusers key names, strictly:
// every missing, unexpected and mis-shaped key is reported together in one error.
#pragma once

#include <torch/nn/module.h>

#include <string>

#include "core/safetensors.h"

namespace tt {

/// Parameters (and buffers) by their dotted names, as fp32 CPU copies (what checkpoints hold).
safetensors::TensorMap module_weights(const torch::nn::Module& module);

/// Copies `weights` into the module's parameters (converting dtype and device). Throws
/// kCheckpoint listing all missing, unexpected and mis-shaped keys, naming `source`.
void load_module_weights(torch::nn::Module& module, const safetensors::TensorMap& weights,
                         const std::string& source);

}  // namespace tt
