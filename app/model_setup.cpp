// Architecture + initial weights resolution (see model_setup.h).
#include "app/model_setup.h"

#include <algorithm>

#include "app/options.h"
#include "core/checked_math.h"
#include "core/errors.h"
#include "model/diffusers_config.h"
#include "model/flops.h"

namespace tt {
namespace {

// An explicit YAML override must match the value config.json gives.
template <typename T>
void require_same(const std::optional<T>& override_value, const T& from_json, const char* key,
                  const std::string& json_path) {
  if (!override_value || *override_value == from_json) return;
  throw Error(ErrorCode::kConfig,
              str_cat("tele_tron.model.", key, " disagrees with ", json_path, ", which defines the architecture of ",
                      "these weights"),
              "remove the override from the YAML file (the weights' config.json decides)");
}

// What the weights' names and shapes say of their model: width and block counts (either layout).
std::string stored_architecture(const WeightSource& weights) {
  int64_t hidden = 0, doubles = 0, singles = 0;
  auto block_index = [](const std::string& name, const std::string& prefix) -> int64_t {
    if (name.rfind(prefix, 0) != 0) return -1;
    const size_t end = name.find('.', prefix.size());
    const std::string digits = name.substr(prefix.size(), end - prefix.size());
    return !digits.empty() && digits.size() < 7 && digits.find_first_not_of("0123456789") == std::string::npos
               ? std::stoll(digits)
               : -1;
  };
  for (const auto& [name, tensor] : weights.tensors) {
    if ((name == "x_embedder.proj.weight" || name == "img_in.proj.weight") && !tensor.shape.empty())
      hidden = tensor.shape[0];
    doubles = std::max({doubles, block_index(name, "transformer_blocks.") + 1, block_index(name, "double_blocks.") + 1});
    singles = std::max(
        {singles, block_index(name, "single_transformer_blocks.") + 1, block_index(name, "single_blocks.") + 1});
  }
  return str_cat("hidden ", hidden, ", ", doubles, " double + ", singles, " single blocks by its names");
}

// Weights far smaller than the architecture they are read into cannot be its weights: said before
// a model of that size is allocated (a config.json or preset of the wrong size would otherwise ask
// for its memory first). Closer sizes go on to the strict loader, which lists every key that differs.
constexpr int64_t kArchitectureToWeights = 4;

void check_weights_hold(const WeightSource& weights, const HunyuanVideoConfig& c, const std::string& origin) {
  int64_t stored = 0;
  for (const auto& [name, tensor] : weights.tensors) {
    const std::string what = str_cat(weights.description, ": tensor ", name);
    stored = checked_add(stored, checked_numel(tensor.shape, ErrorCode::kCheckpoint, what), ErrorCode::kCheckpoint, what);
  }
  const int64_t needed = transformer_parameter_count(c);
  TT_CHECK_HINT(needed / kArchitectureToWeights <= stored, ErrorCode::kCheckpoint,
                "give the weights with their own config.json (a diffusers folder), or choose tele_tron.model.preset "
                "and sizes that match them",
                origin, " describes a Transformer of ", needed, " parameters (", describe_hunyuan_config(c), "), but ",
                weights.description, " holds ", stored, " numbers in all (", stored_architecture(weights),
                "): they do not belong together");
}

}  // namespace

ModelChoice choose_model(const ModelSection& model, const std::optional<std::string>& weights_path) {
  ModelChoice choice;
  if (!weights_path) {
    choice.config = model_config_from(model);
    choice.origin = "preset " + model.preset;
    return choice;
  }
  choice.weights = open_weights(*weights_path);
  auto json = diffusers_config_json(*choice.weights);
  if (!json) {
    choice.config = model_config_from(model);
    choice.origin = "preset " + model.preset + " (the weights have no config.json)";
    check_weights_hold(*choice.weights, choice.config, "tele_tron.model (" + choice.origin + ")");
    return choice;
  }
  const std::string& json_path = choice.weights->config_path;
  HunyuanVideoConfig c = hunyuan_config_from_diffusers_json(*json, json_path);
  require_same(model.num_attention_heads, c.num_attention_heads, "num_attention_heads", json_path);
  require_same(model.attention_head_dim, c.attention_head_dim, "attention_head_dim", json_path);
  require_same(model.num_layers, c.num_layers, "num_layers", json_path);
  require_same(model.num_single_layers, c.num_single_layers, "num_single_layers", json_path);
  require_same(model.num_refiner_layers, c.num_refiner_layers, "num_refiner_layers", json_path);
  require_same(model.patch_size, c.patch_size, "patch_size", json_path);
  require_same(model.patch_size_t, c.patch_size_t, "patch_size_t", json_path);
  require_same(model.in_channels, c.in_channels, "in_channels", json_path);
  require_same(model.out_channels, c.out_channels, "out_channels", json_path);
  require_same(model.text_embed_dim, c.text_embed_dim, "text_embed_dim", json_path);
  require_same(model.pooled_projection_dim, c.pooled_projection_dim, "pooled_projection_dim", json_path);
  require_same(model.mlp_ratio, c.mlp_ratio, "mlp_ratio", json_path);
  require_same(model.rope_theta, c.rope_theta, "rope_theta", json_path);
  require_same(model.rope_axes_dim, c.rope_axes_dim, "rope_axes_dim", json_path);
  require_same(model.guidance_embeds, c.guidance_embeds, "guidance_embeds", json_path);
  c.fused_kernels = model.fused_kernels;
  c.segment_attention = model.segment_attention;
  c.per_sample_attention = model.per_sample_attention;
  c.checkpoint_keeps_attention = model.checkpoint_keeps_attention;
  choice.config = c;
  choice.origin = "config.json " + json_path;
  check_weights_hold(*choice.weights, c, json_path);
  return choice;
}

c10::ScalarType resident_weight_dtype(const Config& config, bool autocast) {
  if (config.mixed_precision.master_weights == "bf16") return at::kBFloat16;
  if (config.model.lora_rank > 0 && autocast) return config.mixed_precision.dtype == "fp16" ? at::kHalf : at::kBFloat16;
  return at::kFloat;
}

}  // namespace tt
