// Config -> component options: the only place where the YAML sections become the Options structs
// that live beside each component.
#pragma once

#include "app/config.h"
#include "core/adamw.h"
#include "core/device.h"
#include "model/flow_matching.h"
#include "model/hunyuan_config.h"
#include "model/lora.h"

namespace tt {

/// The preset named by model.preset with every explicit override applied, validated.
HunyuanVideoConfig model_config_from(const ModelSection& model);
FlowMatchingOptions flow_matching_options_from(const FlowMatchingSection& section);
AdamWOptions adamw_options_from(const OptimizerSection& section);
/// model.lora.* -> LoraOptions (rank 0: no LoRA).
LoraOptions lora_options_from(const ModelSection& section);
/// train.expandable_segments and train.memory_cap.
AllocatorOptions allocator_options_from(const TrainSection& section);

/// Learning rate at optimizer step `step` (0-based): linear warmup to the peak over warmup_steps,
/// then constant or cosine decay to 0 at max_steps.
double learning_rate_at(const OptimizerSection& section, int64_t step, int64_t max_steps);

}  // namespace tt
