// The HunyuanVideo diffusion Transformer (text-to-video, flow matching), following diffusers'
// HunyuanVideoTransformer3DModel and the official HYVideoDiffusionTransformer: token refiner,
// 3D RoPE on video tokens, key-masked joint attention over (video, text) tokens, double-stream
// then single-stream blocks, adaLN final layer, unpatchify. Parameter names are diffusers' keys.
#pragma once

#include <torch/nn.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/block_graphs.h"
#include "model/hunyuan_config.h"
#include "model/layers.h"
#include "model/rope.h"

namespace tt {

/// One refiner block: self-attention over text tokens with a pairwise mask, SiLU MLP, gates from
/// the refiner's own conditioning vector.
class TokenRefinerBlockImpl : public torch::nn::Module {
 public:
  TokenRefinerBlockImpl(int64_t heads, int64_t head_dim, double mlp_ratio);
  /// x: (B, L, hidden); temb: (B, hidden); pair_mask: (B, 1, L, L) bool.
  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& temb, const torch::Tensor& pair_mask);

 private:
  torch::nn::LayerNorm norm1_{nullptr}, norm2_{nullptr};
  Attention attn_{nullptr};
  FeedForward ff_{nullptr};
  Modulation norm_out_{nullptr};  // (gate_msa, gate_mlp)
};
TORCH_MODULE(TokenRefinerBlock);

/// diffusers HunyuanVideoTokenRefiner (`context_embedder`): masked-mean pooled text + timestep
/// conditioning, proj_in (text_dim -> hidden), refiner blocks.
class TokenRefinerImpl : public torch::nn::Module {
 public:
  TokenRefinerImpl(int64_t text_dim, int64_t heads, int64_t head_dim, int64_t layers, double mlp_ratio);
  /// text: (B, L, text_dim); timestep: (B) sigma*1000; mask: (B, L) bool -> (B, L, hidden).
  /// all_valid: the mask is all true (no attention mask needed).
  torch::Tensor forward(const torch::Tensor& text, const torch::Tensor& timestep, const torch::Tensor& mask,
                        bool all_valid);

 private:
  MlpEmbedder timestep_embedder_{nullptr}, text_embedder_{nullptr};
  torch::nn::Linear proj_in_{nullptr};
  std::vector<TokenRefinerBlock> blocks_;
};
TORCH_MODULE(TokenRefiner);

/// Which keys the joint attention of a block sees: undefined members mean every token is valid.
struct JointKeys {
  torch::Tensor mask;      // (B, 1, 1, N+L) bool, the keys valid for every query
  torch::Tensor segments;  // (2B + 1) int32 segment offsets (model/segment_attention.h), or undefined
  std::vector<int64_t> lengths;  // valid keys per sample, host (model/per_sample_attention.h), or empty
};

/// Double-stream block: separate weights for video and text tokens, joint attention.
class DoubleBlockImpl : public torch::nn::Module {
  friend class HunyuanVideoTransformerImpl;  // lora_hosts()

 public:
  /// fused_kernels: on CUDA, gated residuals, QK RMSNorm + RoPE and GELU-tanh through the fused
  /// kernels (model/fused_ops.h).
  DoubleBlockImpl(int64_t heads, int64_t head_dim, int64_t mlp_hidden, bool fused_kernels = false);
  /// video: (B, N, hidden), text: (B, L, hidden), vec: (B, hidden); keys: the valid keys.
  /// Returns the updated (video, text).
  std::pair<torch::Tensor, torch::Tensor> forward(const torch::Tensor& video, const torch::Tensor& text,
                                                  const torch::Tensor& vec, const JointKeys& keys,
                                                  const RopeTable& rope);
  /// Its parameters and its LoRA adapters' (no submodules): what a block graph differentiates.
  std::vector<torch::Tensor> graph_tensors();
  /// Recomputed for its backward (model/activation_checkpoint.h) with gates that need no gradient (a
  /// frozen base under LoRA), the block's last Linears (the MLPs' down-projections) feed only gated
  /// residuals whose values nobody reads: their base GEMMs are skipped (gelu_then_linear's
  /// output_unread). On by default; the gradients are the same either way.
  void set_recompute_skips_unread(bool on) { skip_unread_ = on; }

 private:
  Modulation norm1_{nullptr}, norm1_context_{nullptr};  // 6 chunks each
  Attention attn_{nullptr};
  FeedForward ff_{nullptr}, ff_context_{nullptr};
  bool fused_kernels_ = false;
  bool skip_unread_ = true;
};
TORCH_MODULE(DoubleBlock);

/// Single-stream block over cat(video, text): attention and MLP in parallel from one norm.
class SingleBlockImpl : public torch::nn::Module {
 public:
  /// fused_kernels: as DoubleBlockImpl's.
  SingleBlockImpl(int64_t heads, int64_t head_dim, int64_t mlp_hidden, bool fused_kernels = false);
  /// x: (B, N+L, hidden) with the N video tokens first.
  torch::Tensor forward(const torch::Tensor& x, int64_t video_tokens, const torch::Tensor& vec,
                        const JointKeys& keys, const RopeTable& rope);

  /// LoRA adapters (model/lora.h) on linear1 (parts attn.to_q, attn.to_k, attn.to_v, proj_mlp) and
  /// proj_out (linear2); empty: none.
  LoraAdapter lora_linear1{nullptr}, lora_proj_out{nullptr};
  /// Its parameters and its LoRA adapters' (no submodules): what a block graph differentiates.
  std::vector<torch::Tensor> graph_tensors();
  /// As DoubleBlockImpl's: here proj_out (linear2) is the Linear skipped.
  void set_recompute_skips_unread(bool on) { skip_unread_ = on; }

 private:
  friend class HunyuanVideoTransformerImpl;  // lora_hosts()
  Attention attn_{nullptr};
  Modulation norm_{nullptr};  // (shift, scale, gate)
  torch::nn::Linear linear1_{nullptr}, proj_out_{nullptr};
  int64_t hidden_ = 0;
  bool fused_kernels_ = false;
  bool skip_unread_ = true;
};
TORCH_MODULE(SingleBlock);

struct TransformerInputs {
  torch::Tensor hidden_states;           // (B, in_channels, T, H, W) noisy latents
  torch::Tensor timestep;                // (B) sigma * 1000
  torch::Tensor encoder_hidden_states;   // (B, L, text_embed_dim)
  torch::Tensor encoder_attention_mask;  // (B, L) bool, text right-padded
  torch::Tensor pooled_projections;      // (B, pooled_projection_dim)
  torch::Tensor guidance;                // (B) guidance * 1000; undefined when guidance_embeds off
  /// Host-side promise that every text token is valid (e.g. after trim_text_padding): attention
  /// then runs without a mask, which lets SDPA use its fastest (flash/cuDNN) kernels.
  bool text_all_valid = false;
  /// Host-side promise that each mask row is a valid prefix followed by padding (trim_text_padding
  /// says so): the joint attention may then run as segments (HunyuanVideoConfig::segment_attention).
  bool text_right_padded = false;
  /// Host-side valid text tokens per sample, each mask row being that many valid tokens then
  /// padding; empty when not known. With HunyuanVideoConfig::per_sample_attention and a mask, the
  /// joint attention then runs per sample without the mask.
  std::vector<int64_t> text_lengths;
};

class HunyuanVideoTransformerImpl : public torch::nn::Module {
 public:
  explicit HunyuanVideoTransformerImpl(const HunyuanVideoConfig& config);
  /// Built block by block straight onto `device` in `dtype`: each block moves (converted on the way)
  /// as soon as it is made, so the host never holds more than one block in fp32 (the 13B's fp32
  /// weights are 51 GB) and the device never an fp32 copy of a model it keeps in bf16. The same
  /// initial values as building on the host and moving afterwards.
  HunyuanVideoTransformerImpl(const HunyuanVideoConfig& config, const torch::Device& device,
                              torch::Dtype dtype);
  /// Returns the prediction (B, out_channels, T, H, W) (flow-matching velocity eps - x0).
  torch::Tensor forward(const TransformerInputs& inputs);

  const HunyuanVideoConfig& config() const { return config_; }
  int64_t parameter_count() const;

  /// Every parameter under its diffusers key. Fused tensors (to_qkv, add_qkv_proj, single-block
  /// linear1) appear as views named to_q/to_k/to_v, add_{q,k,v}_proj and proj_mlp: reading them
  /// gives diffusers' tensors, copying into them loads diffusers weights.
  std::map<std::string, torch::Tensor> diffusers_parameters();
  /// The parameters' .grad() under the same names (undefined where there is none yet).
  std::map<std::string, torch::Tensor> diffusers_gradients();

  /// Attaches LoRA adapters to every Linear of the double and single blocks that `options.targets`
  /// names (model/lora.h), freezes every base parameter (requires_grad false) and returns the
  /// adapters, created on the model's device in fp32. A target that names no module of these
  /// blocks is a kConfig error listing the modules that can take one. Call once.
  LoraSet attach_lora(const LoraOptions& options);

  /// Recompute every n-th block (double and single, counted together, doubles first) in backward
  /// instead of keeping its activations; 0 = off.
  void set_activation_checkpointing(int64_t every_n);
  /// Recompute the first `doubles` double-stream and the first `singles` single-stream blocks
  /// (model.activation_checkpointing: auto's plan, app/memory_estimate.h); counts are capped.
  void set_checkpointed_blocks(int64_t doubles, int64_t singles);
  /// How many double-stream and single-stream blocks are recomputed in backward.
  std::pair<int64_t, int64_t> checkpointed_blocks() const;
  /// Every block's set_recompute_skips_unread (on by default; off: the recompute runs every GEMM).
  void set_recompute_skips_unread(bool on);
  /// Blocks not checkpointed run through these (CUDA graphs of single blocks, core/block_graphs.h)
  /// while they are active; nullptr = always eagerly.
  void set_block_graphs(std::shared_ptr<BlockGraphs> graphs) { block_graphs_ = std::move(graphs); }

 private:
  torch::Tensor condition_vector(const TransformerInputs& inputs);
  std::map<std::string, torch::Tensor> diffusers_view(bool gradients);
  /// A Linear that can take a LoRA adapter: its diffusers parts and the slot the adapter goes in.
  struct LoraHost {
    int64_t in_features = 0;
    std::vector<LoraPart> parts;
    LoraAdapter* slot = nullptr;
  };
  std::vector<LoraHost> lora_hosts();

  HunyuanVideoConfig config_;
  torch::nn::Conv3d patch_embed_{nullptr};  // x_embedder.proj
  TokenRefiner context_embedder_{nullptr};
  MlpEmbedder timestep_embedder_{nullptr}, text_embedder_{nullptr}, guidance_embedder_{nullptr};
  std::vector<DoubleBlock> double_blocks_;
  std::vector<SingleBlock> single_blocks_;
  Modulation norm_out_{nullptr};  // (scale, shift) — diffusers' order
  torch::nn::Linear proj_out_{nullptr};
  std::shared_ptr<RopeCache> rope_cache_;
  std::vector<bool> checkpointed_;  // per block, doubles then singles: recomputed in backward
  std::shared_ptr<BlockGraphs> block_graphs_;
};
TORCH_MODULE(HunyuanVideoTransformer);

}  // namespace tt
