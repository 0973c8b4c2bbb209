// Building the Transformer a command asks for: the architecture from the config's model section,
// or from a diffusers config.json next to model.weights, then the initial weights loaded
// (streamed, strict) when model.weights names a file or folder.
#pragma once

#include <c10/core/ScalarType.h>

#include <optional>
#include <string>

#include "app/config.h"
#include "model/hunyuan_config.h"
#include "model/weight_io.h"

namespace tt {

struct ModelChoice {
  HunyuanVideoConfig config;
  std::optional<WeightSource> weights;  // set when there are initial weights to load
  std::string origin;                   // "preset 1b" or "config.json of /path"
};

/// Resolves the architecture. When `weights_path` is a diffusers folder with config.json, that
/// file decides the architecture; explicit model.* overrides in the YAML must then agree with it
/// (a disagreement is a kConfig error naming the key). Otherwise the preset + overrides decide.
ModelChoice choose_model(const ModelSection& model, const std::optional<std::string>& weights_path);

/// The dtype the Transformer's weights keep on the device while a step trains them: bf16 with
/// mixed_precision.master_weights: bf16; the autocast dtype for a LoRA run's frozen base when the
/// step runs under autocast (`autocast`); fp32 otherwise. Moving a freshly built model there with
/// one `to(device, dtype)` converts on the way, so the device never holds an fp32 copy of a base it
/// keeps in bf16 (51 GB for the 13B).
c10::ScalarType resident_weight_dtype(const Config& config, bool autocast);

}  // namespace tt
