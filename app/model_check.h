// `teletron model-check`: one forward pass of the Transformer on named inputs from a safetensors
// file, written as `sample`, so users can check converted weights against diffusers.
#pragma once

#include <optional>
#include <string>

#include "app/config.h"

namespace tt {

struct ModelCheckOptions {
  /// Model section (architecture when the weights carry no config.json).
  Config config;
  /// Weights: a diffusers folder (config.json + safetensors), a (sharded) safetensors file, or an
  /// official-layout file.
  std::string weights;
  /// Inputs: hidden_states, timestep (sigma*1000), encoder_hidden_states, encoder_attention_mask
  /// (int, bool or float; nonzero = valid), pooled_projections, guidance (already x1000).
  std::string inputs;
  std::string output;
  std::string device = "cpu";  // cpu | cuda
  std::string dtype = "fp32";  // fp32 | bf16 (autocast over fp32 weights)
};

void run_model_check(const ModelCheckOptions& options);

}  // namespace tt
