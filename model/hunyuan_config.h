// Architecture of the HunyuanVideo Transformer, with diffusers' config.json field names, and the
// tiny / 1b / 13b presets. Every field can be overridden from the YAML file (app/ does that).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace tt {

struct HunyuanVideoConfig {
  /// Latent channels in (16; 33 for image-to-video: noisy latent + first-frame latent + mask).
  int64_t in_channels = 16;
  /// Latent channels out.
  int64_t out_channels = 16;
  int64_t num_attention_heads = 24;
  int64_t attention_head_dim = 128;
  /// Double-stream blocks.
  int64_t num_layers = 20;
  /// Single-stream blocks.
  int64_t num_single_layers = 40;
  /// Token-refiner blocks.
  int64_t num_refiner_layers = 2;
  /// MLP hidden width = int(hidden * mlp_ratio) (diffusers truncates).
  double mlp_ratio = 4.0;
  /// Spatial patch (height and width).
  int64_t patch_size = 2;
  /// Temporal patch.
  int64_t patch_size_t = 1;
  /// Width of the LLM text hidden states.
  int64_t text_embed_dim = 4096;
  /// Width of the pooled CLIP text embedding.
  int64_t pooled_projection_dim = 768;
  /// RoPE dims per axis (T, H, W); must sum to attention_head_dim.
  std::vector<int64_t> rope_axes_dim = {16, 56, 56};
  double rope_theta = 256.0;
  /// Guidance embedding (the released cfg-distilled model has it).
  bool guidance_embeds = true;
  /// Only "rms_norm" (QK RMSNorm before RoPE) is supported.
  std::string qk_norm = "rms_norm";
  /// "" (text-to-video) or "latent_concat" (image-to-video: the input is the noisy latent, the
  /// first-frame latent with later frames zeroed, and a first-frame mask, so in_channels =
  /// 2 * out_channels + 1 = 33).
  std::string image_condition_type;
  /// On CUDA, run the gated residuals, QK RMSNorm + RoPE and GELU-tanh through teletron's fused
  /// kernels with backwards of their own (model/fused_ops.h); CPU tensors always take the plain
  /// torch composition. Not an architecture field: weights and outputs do not depend on it.
  /// Off by default until the kernels' device runs and their measured gain are on record.
  bool fused_kernels = false;
  /// On CUDA in bf16/fp16, a joint attention over masked (right-padded) text runs as flash
  /// attention's variable-length segments instead of SDPA with a mask (model/segment_attention.h);
  /// the same loss and gradients up to rounding. Not an architecture field either. Off by default
  /// until its device runs and measured gain are on record.
  bool segment_attention = false;
  /// A joint attention over masked (right-padded) text whose per-sample lengths the caller gave
  /// (TransformerInputs::text_lengths) runs once per sample at its own length, without a mask
  /// (model/per_sample_attention.h): cuDNN's kernel without a bias instead of with one. The same
  /// loss and gradients up to rounding; a step being captured into a CUDA graph keeps the mask.
  /// Not an architecture field. Off by default until its device runs and measured gain are on record.
  bool per_sample_attention = false;
  /// Checkpointed blocks keep their attention's output and log-sum-exp from the first forward, and
  /// their recompute in backward skips the attention kernel (model/kept_attention.h): N x hidden
  /// x 2 + N x heads x 4 bytes more per checkpointed block in bf16. Not an architecture field. Off
  /// by default until its device runs and measured gain are on record.
  bool checkpoint_keeps_attention = false;

  int64_t hidden_size() const { return num_attention_heads * attention_head_dim; }
  int64_t mlp_hidden() const { return static_cast<int64_t>(hidden_size() * mlp_ratio); }
};

/// "tiny" (tests), "1b" (~1.0 B parameters), "13b" (the released model). Unknown names throw kConfig.
HunyuanVideoConfig hunyuan_preset(const std::string& name);

/// Checks the cross-field rules (rope dims sum to the head dim and are even, ...). Throws kConfig
/// naming the field with `key_prefix` (e.g. "tele_tron.model.").
void validate_hunyuan_config(const HunyuanVideoConfig& config, const std::string& key_prefix);

/// One line: "hidden 1536 (12 heads x 128), 6 double + 14 single blocks, ...".
std::string describe_hunyuan_config(const HunyuanVideoConfig& config);

}  // namespace tt
