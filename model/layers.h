// Building blocks of the HunyuanVideo Transformer, named so that their parameters carry
// diffusers' key names (`linear_1`, `net.0.proj`, `to_out.0`, `norm_q`, ...).
#pragma once

#include <torch/nn.h>

#include <vector>

#include "model/lora.h"

namespace tt {

struct RopeTable;

/// Sinusoidal timestep features, cos half first (diffusers flip_sin_to_cos=True, shift 0,
/// max period 10000). t: (B) any float dtype -> (B, dim) fp32.
torch::Tensor timestep_sinusoid(const torch::Tensor& t, int64_t dim = 256);

/// Linear -> SiLU -> Linear with diffusers' `linear_1` / `linear_2` names (TimestepEmbedding and
/// PixArtAlphaTextProjection share this layout).
class MlpEmbedderImpl : public torch::nn::Module {
 public:
  MlpEmbedderImpl(int64_t in_features, int64_t hidden);
  torch::Tensor forward(const torch::Tensor& x);  // (B, in) -> (B, hidden)

  torch::nn::Linear linear_1{nullptr}, linear_2{nullptr};
};
TORCH_MODULE(MlpEmbedder);

enum class FeedForwardActivation { kGeluTanh, kSilu };

/// diffusers FeedForward: net.0.proj (dim -> inner), activation, net.2 (inner -> dim).
/// `fused_kernels`: GELU-tanh through the fused kernel on CUDA (model/fused_ops.h).
class FeedForwardImpl : public torch::nn::Module {
 public:
  FeedForwardImpl(int64_t dim, int64_t inner, FeedForwardActivation activation, bool fused_kernels = false);
  torch::Tensor forward(const torch::Tensor& x);  // (B, N, dim) -> (B, N, dim)
  /// forward(norm_modulate(x, shift, scale)); with fused kernels the modulated input is not kept
  /// (modulate_linear, model/fused_ops.h). output_unread: as gelu_then_linear's.
  torch::Tensor forward_modulated(const torch::Tensor& x, const torch::Tensor& shift,
                                  const torch::Tensor& scale, bool output_unread = false);

  /// LoRA adapters on net.0.proj and net.2 (model/lora.h); empty: none.
  LoraAdapter lora_proj{nullptr}, lora_out{nullptr};
  int64_t dim() const { return proj_->weight.size(1); }
  int64_t inner() const { return proj_->weight.size(0); }

 private:
  torch::Tensor after_projection(torch::Tensor h, bool output_unread);
  FeedForwardActivation activation_;
  bool fused_kernels_ = false;
  torch::nn::Linear proj_{nullptr}, out_{nullptr};
};
TORCH_MODULE(FeedForward);

/// RMSNorm over the last dim with a weight, computed in fp32 (QK-norm, eps 1e-6).
class RmsNormImpl : public torch::nn::Module {
 public:
  RmsNormImpl(int64_t dim, double eps);
  torch::Tensor forward(const torch::Tensor& x);
  double eps() const { return eps_; }

  torch::Tensor weight;  // (dim) fp32

 private:
  double eps_;
};
TORCH_MODULE(RmsNorm);

/// adaLN modulation: `linear(SiLU(vec))` split into `chunks` parts, zero-initialised so every
/// block starts as the identity (as the official model initialises it).
class ModulationImpl : public torch::nn::Module {
 public:
  ModulationImpl(int64_t hidden, int64_t chunks);
  std::vector<torch::Tensor> forward(const torch::Tensor& vec);  // (B, hidden) -> chunks x (B, hidden)

  torch::nn::Linear linear{nullptr};
  LoraAdapter lora{nullptr};  // on `linear` (model/lora.h); empty: none

 private:
  int64_t chunks_;
};
TORCH_MODULE(Modulation);

/// Affine-free LayerNorm (eps 1e-6) then `x * (1 + scale) + shift` with per-sample (B, C) vectors;
/// x (B, N, C). Its backward keeps x and the per-token statistics instead of the normalised
/// activation (one (B, N, C) tensor fewer per call) and recomputes the latter.
torch::Tensor norm_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale);
/// The same through autograd's own composition: the reference the tests compare against.
torch::Tensor norm_modulate_reference(const torch::Tensor& x, const torch::Tensor& shift,
                                      const torch::Tensor& scale);
/// Affine-free LayerNorm, eps 1e-6, over the last dim.
torch::Tensor layer_norm_plain(const torch::Tensor& x);

/// x cut along `dim` at `index` into [0, index) and [index, end), views. One autograd node joins the
/// two gradients (a concatenation) where two slices would each fill a gradient as large as x with
/// zeros and then be summed: a full-size buffer fewer at the peak of backward, and less traffic.
std::pair<torch::Tensor, torch::Tensor> split_at(const torch::Tensor& x, int64_t dim, int64_t index);

/// base(norm_modulate(x, shift, scale)) with the host's LoRA adapter when there is one; `fused`:
/// through modulate_linear (model/fused_ops.h), the adapters' input projection too, so that the
/// modulated input is kept by neither.
torch::Tensor modulated_linear(torch::nn::Linear& base, const LoraAdapter& lora, const torch::Tensor& x,
                               const torch::Tensor& shift, const torch::Tensor& scale, bool fused);
/// base(cat(a, gelu_tanh(u))) (a undefined: base(gelu_tanh(u))) with the host's adapter; `fused`:
/// through gelu_linear (model/fused_ops.h), which keeps only a and u. output_unread: the caller
/// only backpropagates through the result, never reads it (a recomputed block's last Linear when
/// its gate needs no gradient): the base's GEMM is skipped (and, fused, its GELU), the adapters'
/// down-projection still runs; the gradients are the same.
torch::Tensor gelu_then_linear(torch::nn::Linear& base, const LoraAdapter& lora, const torch::Tensor& a,
                               const torch::Tensor& u, bool fused, bool output_unread = false);

struct AttentionOptions {
  int64_t heads = 24;
  int64_t head_dim = 128;
  /// QK RMSNorm (double and single blocks); the refiner has none.
  bool qk_norm = true;
  /// The block projects q, k, v itself (single blocks fuse them into linear1).
  bool input_projection = true;
  /// Second (text) stream projections + to_add_out (double blocks).
  bool added_stream = false;
  /// Output projection to_out.0 (absent in single blocks, whose linear2 does it).
  bool output_projection = true;
  /// On CUDA, QK RMSNorm + RoPE in one fused kernel with its own backward (model/fused_ops.h).
  bool fused_kernels = false;
};

/// Multi-head attention. Q, K and V come from one fused GEMM (`to_qkv`, and `add_qkv_proj` for the
/// text stream); model.diffusers_parameters() exposes them under diffusers' to_q/to_k/to_v names.
/// Tensors are (B, N, hidden).
class AttentionImpl : public torch::nn::Module {
 public:
  explicit AttentionImpl(const AttentionOptions& options);

  /// Projects x to (B, heads, N, head_dim) q, k, v, with QK-norm applied, then RoPE (`rope`, a
  /// table of rope_tokens tokens) on the first `rope_tokens` tokens of q and k.
  std::vector<torch::Tensor> project(const torch::Tensor& x, const RopeTable* rope = nullptr,
                                     int64_t rope_tokens = 0);
  /// The double blocks' joint q, k, v (B, heads, N + L, head_dim): project(norm_modulate(video,
  /// shift, scale), rope, rope_tokens) and the text stream's the same way through add_qkv_proj and
  /// its own QK-norm, without RoPE (norm_modulate(text, shift_added, scale_added)), video tokens
  /// first. With fused kernels the modulated inputs are not kept (modulate_linear) and QK-norm writes
  /// straight into the joint tensors (joint_qkv, model/fused_ops.h).
  std::vector<torch::Tensor> project_joint_modulated(const torch::Tensor& video, const torch::Tensor& shift,
                                                     const torch::Tensor& scale, const torch::Tensor& text,
                                                     const torch::Tensor& shift_added,
                                                     const torch::Tensor& scale_added, const RopeTable* rope,
                                                     int64_t rope_tokens);
  /// The single blocks' q, k, v (B, heads, N, head_dim), with QK-norm and RoPE as project() applies
  /// them, and the MLP's input (B, N, mlp), from linear1's output (B, N, 3 hidden + mlp)
  /// (single_qkv_mlp in model/fused_ops.h). Needs QK-norm.
  std::vector<torch::Tensor> split_single(const torch::Tensor& linear1_out, const RopeTable* rope,
                                          int64_t rope_tokens);
  /// to_out.0 / to_add_out on (B, N, hidden).
  torch::Tensor output(const torch::Tensor& x);
  torch::Tensor output_added(const torch::Tensor& x);

  const AttentionOptions& options() const { return options_; }

  /// LoRA adapters (model/lora.h) on to_qkv (parts to_q, to_k, to_v), add_qkv_proj, to_out.0 and
  /// to_add_out; empty: none.
  LoraAdapter lora_qkv{nullptr}, lora_added_qkv{nullptr}, lora_out{nullptr}, lora_added_out{nullptr};

 private:
  std::vector<torch::Tensor> heads_and_norm(const torch::Tensor& qkv, RmsNorm& norm_q, RmsNorm& norm_k,
                                            const RopeTable* rope, int64_t rope_tokens);
  std::vector<torch::Tensor> norm_heads(std::vector<torch::Tensor> parts, RmsNorm& norm_q, RmsNorm& norm_k,
                                        const RopeTable* rope, int64_t rope_tokens);

  AttentionOptions options_;
  torch::nn::Linear to_qkv_{nullptr}, add_qkv_{nullptr};
  RmsNorm norm_q_{nullptr}, norm_k_{nullptr};
  RmsNorm norm_added_q_{nullptr}, norm_added_k_{nullptr};
  torch::nn::Linear to_out_{nullptr}, to_add_out_{nullptr};
};
TORCH_MODULE(Attention);

/// Scaled dot-product attention through at::scaled_dot_product_attention (never materialises the
/// score matrix on the GPU backends). q, k, v: (B, H, N, D); key_mask: (B, 1, 1|Nq, Nk) bool or
/// undefined. Returns (B, N, H*D).
torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& key_mask);

}  // namespace tt
