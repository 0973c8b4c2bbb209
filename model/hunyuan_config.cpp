// Presets and validation of the HunyuanVideo architecture (see hunyuan_config.h).
#include "model/hunyuan_config.h"

#include "core/errors.h"

namespace tt {

HunyuanVideoConfig hunyuan_preset(const std::string& name) {
  HunyuanVideoConfig config;  // defaults are the released 13B model
  if (name == "13b") return config;
  if (name == "1b") {
    config.num_attention_heads = 12;
    config.num_layers = 6;
    config.num_single_layers = 14;
    return config;
  }
  if (name == "tiny") {
    // Small enough for CPU tests and the 2-core quickstart, with every kind of block present.
    config.num_attention_heads = 4;
    config.attention_head_dim = 32;
    config.num_layers = 2;
    config.num_single_layers = 2;
    config.num_refiner_layers = 1;
    config.text_embed_dim = 64;
    config.pooled_projection_dim = 32;
    config.rope_axes_dim = {8, 12, 12};
    return config;
  }
  throw Error(ErrorCode::kConfig, str_cat("unknown model preset `", name, "`"),
              "use one of: tiny, 1b, 13b");
}

void validate_hunyuan_config(const HunyuanVideoConfig& config, const std::string& key_prefix) {
  const std::string& p = key_prefix;
  TT_CHECK(config.rope_axes_dim.size() == 3, ErrorCode::kConfig, p,
           "rope_axes_dim: expected 3 entries (T, H, W), got ", config.rope_axes_dim.size());
  int64_t rope_sum = 0;
  for (int64_t dim : config.rope_axes_dim) {
    TT_CHECK(dim > 0 && dim % 2 == 0, ErrorCode::kConfig, p,
             "rope_axes_dim: every entry must be even and > 0, got ", dim);
    rope_sum += dim;
  }
  TT_CHECK_HINT(rope_sum == config.attention_head_dim, ErrorCode::kConfig,
                "set rope_axes_dim so that its entries add up to attention_head_dim", p,
                "rope_axes_dim: entries sum to ", rope_sum, " but attention_head_dim is ",
                config.attention_head_dim);
  TT_CHECK(config.qk_norm == "rms_norm", ErrorCode::kConfig, p,
           "qk_norm: only rms_norm is supported, got ", config.qk_norm);
  if (!config.image_condition_type.empty()) {
    TT_CHECK_HINT(config.image_condition_type == "latent_concat", ErrorCode::kConfig,
                  "token_replace (the other image-to-video variant) is not supported; use latent_concat",
                  p, "image_condition_type: expected null or latent_concat, got ", config.image_condition_type);
    TT_CHECK_HINT(config.in_channels == 2 * config.out_channels + 1, ErrorCode::kConfig,
                  "leave in_channels unset: latent_concat sets it to 2 * out_channels + 1",
                  p, "in_channels: latent_concat needs 2 * out_channels + 1 = ", 2 * config.out_channels + 1,
                  " (noisy latent, first-frame latent, mask), got ", config.in_channels);
  }
  // Bounds far beyond any HunyuanVideo model (the released one: 24 x 128 wide, 60 blocks) that keep
  // the size arithmetic inside 64 bits: a crafted config.json is an error, not a huge allocation.
  auto at_most = [&](int64_t value, int64_t most, const char* key) {
    TT_CHECK(value <= most, ErrorCode::kConfig, p, key, ": ", value, " is beyond ", most,
             ", far past any model of this architecture");
  };
  at_most(config.num_attention_heads, 1024, "num_attention_heads");
  at_most(config.attention_head_dim, 1024, "attention_head_dim");
  at_most(config.hidden_size(), 65536, "num_attention_heads x attention_head_dim");
  at_most(config.num_layers, 1024, "num_layers");
  at_most(config.num_single_layers, 1024, "num_single_layers");
  at_most(config.num_refiner_layers, 1024, "num_refiner_layers");
  at_most(config.in_channels, 65536, "in_channels");
  at_most(config.out_channels, 65536, "out_channels");
  at_most(config.text_embed_dim, 65536, "text_embed_dim");
  at_most(config.pooled_projection_dim, 65536, "pooled_projection_dim");
  at_most(config.patch_size, 64, "patch_size");
  at_most(config.patch_size_t, 64, "patch_size_t");
  TT_CHECK(config.mlp_ratio > 0 && config.mlp_ratio <= 64, ErrorCode::kConfig, p, "mlp_ratio: must be in (0, 64], got ",
           config.mlp_ratio);
  TT_CHECK(config.mlp_hidden() > 0, ErrorCode::kConfig, p, "mlp_ratio: gives an empty MLP");
  TT_CHECK(config.num_layers + config.num_single_layers > 0, ErrorCode::kConfig, p,
           "num_layers + num_single_layers must be > 0");
}

std::string describe_hunyuan_config(const HunyuanVideoConfig& c) {
  return str_cat("hidden ", c.hidden_size(), " (", c.num_attention_heads, " heads x ",
                 c.attention_head_dim, "), ", c.num_layers, " double + ", c.num_single_layers,
                 " single blocks, ", c.num_refiner_layers, " refiner blocks, mlp ", c.mlp_hidden(),
                 ", patch [", c.patch_size_t, ",", c.patch_size, ",", c.patch_size, "], in ",
                 c.in_channels, " out ", c.out_channels, ", text ", c.text_embed_dim, "/",
                 c.pooled_projection_dim, ", guidance ", c.guidance_embeds ? "on" : "off",
                 c.image_condition_type.empty() ? "" : ", image condition " + c.image_condition_type);
}

}  // namespace tt
