// Config -> component options (see options.h).
#include "app/options.h"

#include <cmath>

namespace tt {

HunyuanVideoConfig model_config_from(const ModelSection& model) {
  HunyuanVideoConfig config = hunyuan_preset(model.preset);
  if (model.num_attention_heads) config.num_attention_heads = *model.num_attention_heads;
  if (model.attention_head_dim) config.attention_head_dim = *model.attention_head_dim;
  if (model.num_layers) config.num_layers = *model.num_layers;
  if (model.num_single_layers) config.num_single_layers = *model.num_single_layers;
  if (model.num_refiner_layers) config.num_refiner_layers = *model.num_refiner_layers;
  if (model.patch_size) config.patch_size = *model.patch_size;
  if (model.patch_size_t) config.patch_size_t = *model.patch_size_t;
  if (model.in_channels) config.in_channels = *model.in_channels;
  if (model.out_channels) config.out_channels = *model.out_channels;
  if (model.text_embed_dim) config.text_embed_dim = *model.text_embed_dim;
  if (model.pooled_projection_dim) config.pooled_projection_dim = *model.pooled_projection_dim;
  if (model.mlp_ratio) config.mlp_ratio = *model.mlp_ratio;
  if (model.rope_theta) config.rope_theta = *model.rope_theta;
  if (model.rope_axes_dim) config.rope_axes_dim = *model.rope_axes_dim;
  if (model.guidance_embeds) config.guidance_embeds = *model.guidance_embeds;
  if (model.qk_norm) config.qk_norm = *model.qk_norm;
  if (model.image_condition_type) {
    config.image_condition_type = *model.image_condition_type;
    if (!model.in_channels) config.in_channels = 2 * config.out_channels + 1;
  }
  config.fused_kernels = model.fused_kernels;
  config.segment_attention = model.segment_attention;
  config.per_sample_attention = model.per_sample_attention;
  config.checkpoint_keeps_attention = model.checkpoint_keeps_attention;
  validate_hunyuan_config(config, "tele_tron.model.");
  return config;
}

FlowMatchingOptions flow_matching_options_from(const FlowMatchingSection& section) {
  FlowMatchingOptions options;
  options.sampling = section.timestep_sampling == "uniform" ? TimestepSampling::kUniform
                                                            : TimestepSampling::kLogitNormal;
  options.logit_mean = section.logit_mean;
  options.logit_std = section.logit_std;
  options.shift = section.shift;
  options.guidance = section.guidance;
  return options;
}

LoraOptions lora_options_from(const ModelSection& section) {
  LoraOptions options;
  options.rank = section.lora_rank;
  options.alpha = section.lora_alpha;
  options.dropout = section.lora_dropout;
  options.targets = section.lora_targets;
  options.init = section.lora_init;
  return options;
}

AdamWOptions adamw_options_from(const OptimizerSection& section) {
  AdamWOptions options;
  options.lr = section.lr;
  options.beta1 = section.beta1;
  options.beta2 = section.beta2;
  options.weight_decay = section.weight_decay;
  options.eps = section.eps;
  return options;
}

AllocatorOptions allocator_options_from(const TrainSection& section) {
  AllocatorOptions options;
  options.expandable_segments = section.expandable_segments;
  options.memory_cap = section.memory_cap;
  return options;
}

double learning_rate_at(const OptimizerSection& section, int64_t step, int64_t max_steps) {
  if (step < section.warmup_steps) {
    return section.lr * static_cast<double>(step + 1) / static_cast<double>(section.warmup_steps);
  }
  if (section.schedule != "cosine") return section.lr;
  const int64_t decay_steps = std::max<int64_t>(1, max_steps - section.warmup_steps);
  const double progress = std::min(1.0, static_cast<double>(step - section.warmup_steps) / decay_steps);
  return section.lr * 0.5 * (1.0 + std::cos(M_PI * progress));
}

}  // namespace tt
