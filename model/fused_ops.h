// Transformer block ops with fused CUDA kernels and backwards of their own: the gated residual
// x + gate * y, QK RMSNorm + RoPE, GELU-tanh (issue 12). Each op comes three ways:
// - `foo_fused`: a torch::autograd::Function over cuda/ops.h's forward/backward entries (CUDA
//   tensors: the kernels; CPU tensors: their plain-torch references, which the CPU tests check
//   against autograd of the composition);
// - `foo_reference`: the composition of torch ops the model ran before, through autograd;
// - `foo(..., fused)`: what the model calls: `foo_fused` for CUDA tensors the kernels take (bf16 or
//   fp32, one dtype) when `fused` is on, `foo_reference` otherwise, so the CPU model is unchanged
//   bit for bit.
#pragma once

#include <torch/types.h>

#include <utility>

#include "model/rope.h"

namespace tt {

/// Whether the fused kernels take x: built with CUDA kernels, x on CUDA, bf16 or fp32.
bool fused_kernels_take(const torch::Tensor& x);

// ---- gated residual: x + gate.unsqueeze(1) * y ----

/// x, y (B, N, C), gate (B, C), one dtype -> (B, N, C). Backward: dx = g, dy = g * gate, dgate =
/// sum_N g * y (fp32 accumulation); keeps y and gate (y only when the gate needs a gradient).
torch::Tensor gated_residual_fused(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate);
/// torch::addcmul(x, y, gate.unsqueeze(1)).
torch::Tensor gated_residual_reference(const torch::Tensor& x, const torch::Tensor& y,
                                       const torch::Tensor& gate);
torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                             bool fused);

// ---- QK RMSNorm + RoPE ----

/// RMSNorm over the last dim with `weight` (D), fp32 math, output in x's dtype: the QK-norm of the
/// attention (RmsNorm's forward; on CUDA ATen's fused kernel).
torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps);

/// q or k (B, H, N, D), possibly a permuted view: RMSNorm over D with weight (D), then the first
/// `rope_tokens` tokens rotated by `rope` (a table of exactly rope_tokens tokens; may be null when
/// rope_tokens is 0), the other tokens (text) only normalised. Returns (B, H, N, D) in x's dtype.
/// Keeps x and the per-row rstd (B, H, N) fp32 for backward.
torch::Tensor rms_norm_rope_fused(const torch::Tensor& x, const torch::Tensor& weight, const RopeTable* rope,
                                  int64_t rope_tokens, double eps);
/// rms_norm, then apply_rope on the first rope_tokens tokens and torch::cat with the rest.
torch::Tensor rms_norm_rope_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                      const RopeTable* rope, int64_t rope_tokens, double eps);
torch::Tensor rms_norm_rope(const torch::Tensor& x, const torch::Tensor& weight, const RopeTable* rope,
                            int64_t rope_tokens, double eps, bool fused);

// ---- GELU, tanh approximation ----

/// Elementwise; a column slice of a row-major matrix is read in place. Keeps x for backward.
torch::Tensor gelu_tanh_fused(const torch::Tensor& x);
/// torch::gelu(x, "tanh").
torch::Tensor gelu_tanh_reference(const torch::Tensor& x);
torch::Tensor gelu_tanh(const torch::Tensor& x, bool fused);

/// (B, N, 3 * heads * head_dim) -> q, k, v (B, heads, N, head_dim), permuted views of qkv. With
/// `fused`, one autograd function whose backward copies the three gradients straight into one
/// (B, N, 3, heads, head_dim) buffer (an undefined one as zeros); autograd of the composition stacks
/// them (unbind's backward) and then copies the permuted stack into the projection's layout (the
/// reshape's backward): two passes over the (B, N, 3 hidden) gradient instead of one. The values
/// and gradients are the same bit for bit.
std::vector<torch::Tensor> qkv_heads(const torch::Tensor& qkv, int64_t heads, int64_t head_dim, bool fused);

/// The single blocks' linear1 output (B, N, 3 * heads * head_dim + mlp) -> q, k, v (as qkv_heads) and
/// the MLP's input (B, N, mlp), all views of it. Unfused: split_with_sizes, then qkv_heads (autograd
/// concatenates the two parts' gradients). With `fused`, one autograd function whose backward
/// writes q, k, v's gradients into the first columns of one (B, N, width) buffer; when the MLP's
/// gradient already is the other columns of such a buffer that nothing else refers to (GeluLinear's
/// backward writes it so on CUDA), that buffer is completed in place and nothing is concatenated.
/// The values and gradients are the same bit for bit.
std::vector<torch::Tensor> qkv_mlp_split(const torch::Tensor& x, int64_t heads, int64_t head_dim, bool fused);

/// The single blocks' q, k, v and MLP input from linear1's output x (B, N, 3 * heads * head_dim +
/// mlp): qkv_mlp_split, then QK-norm (rms_norm_rope with weight_q / weight_k and eps; RoPE on the
/// first rope_tokens tokens, `rope` a table of that many) on q and k. Fused: one autograd function
/// whose backward writes q and k's input gradients straight into the columns of linear1's gradient
/// (the unfused-split composition copies them there from the norms' own buffers) and v's beside
/// them; v and the MLP's input stay views of x. Same values and gradients as the reference (the same
/// kernels, in other buffers).
std::vector<torch::Tensor> single_qkv_mlp_fused(const torch::Tensor& x, const torch::Tensor& weight_q,
                                                const torch::Tensor& weight_k, double eps, int64_t heads,
                                                int64_t head_dim, const RopeTable* rope, int64_t rope_tokens);
/// qkv_mlp_split and rms_norm_rope (each `fused` or not).
std::vector<torch::Tensor> single_qkv_mlp_reference(const torch::Tensor& x, const torch::Tensor& weight_q,
                                                    const torch::Tensor& weight_k, double eps, int64_t heads,
                                                    int64_t head_dim, const RopeTable* rope,
                                                    int64_t rope_tokens, bool fused);
std::vector<torch::Tensor> single_qkv_mlp(const torch::Tensor& x, const torch::Tensor& weight_q,
                                          const torch::Tensor& weight_k, double eps, int64_t heads,
                                          int64_t head_dim, const RopeTable* rope, int64_t rope_tokens,
                                          bool fused);

/// The QK-norm weights of a double block's attention (video's q and k, text's added q and k) and
/// their epsilon.
struct JointQkvNorms {
  torch::Tensor q, k, added_q, added_k;
  double eps = 1e-6;
};

/// The double blocks' joint q, k, v (B, H, N + L, D) of video qkv (B, N, 3 H D) and text qkv (B, L,
/// 3 H D): qkv_heads of each, QK-norm (rms_norm_rope; RoPE on the first rope_tokens video tokens,
/// `rope` a table of that many, none on text), then the video and text tokens concatenated.
/// Fused: one autograd function whose kernels write the normalised q and k and the copied v
/// straight into three token-major joint buffers (no concatenation), and whose backward writes q and
/// k's input gradients straight into each projection's gradient (no copies). Same values and
/// gradients as the reference (the same kernels, in other buffers).
std::vector<torch::Tensor> joint_qkv_fused(const torch::Tensor& video_qkv, const torch::Tensor& text_qkv,
                                           const JointQkvNorms& norms, int64_t heads, int64_t head_dim,
                                           const RopeTable* rope, int64_t rope_tokens);
/// qkv_heads and rms_norm_rope (each `fused` or not) on each stream, then torch::cat.
std::vector<torch::Tensor> joint_qkv_reference(const torch::Tensor& video_qkv, const torch::Tensor& text_qkv,
                                               const JointQkvNorms& norms, int64_t heads, int64_t head_dim,
                                               const RopeTable* rope, int64_t rope_tokens, bool fused);
std::vector<torch::Tensor> joint_qkv(const torch::Tensor& video_qkv, const torch::Tensor& text_qkv,
                                     const JointQkvNorms& norms, int64_t heads, int64_t head_dim,
                                     const RopeTable* rope, int64_t rope_tokens, bool fused);

/// The MLP's GELU-tanh and down-projection as one autograd function that keeps only its inputs:
/// linear(gelu_tanh(u)), or linear(cat(a, gelu_tanh(u), -1)) when `a` is defined (the single
/// blocks' attention output beside the MLP), with `weight` (out, in) and `bias` (out) or undefined.
/// Autograd of the composition keeps the GELU's input and output (and the concatenation): this
/// keeps a and u (a view of the up-projection's output is kept as a view) and recomputes the GELU
/// and the concatenation in backward, saving (tokens x in) of the linear's input per call. Under
/// autocast the GEMMs run in autocast's dtype, the weight cast in forward and again in backward.
/// The GELU is the CUDA kernel where fused_kernels_take(u), else ATen's.
/// output_unread: the caller never reads the result's values, only backpropagates through it (a
/// block recomputed for its backward, model/activation_checkpoint.h): the GELU and the GEMM are
/// skipped and the result is uninitialised memory of its shape; the gradients are the same.
torch::Tensor gelu_linear(const torch::Tensor& a, const torch::Tensor& u, const torch::Tensor& weight,
                          const torch::Tensor& bias, bool output_unread = false);

/// gelu_linear and, in the same function, linear(cat(a, gelu_tanh(u)), down) with a second, bias-free
/// weight (the LoRA adapters' stacked A): the GELU and the concatenation are made once in forward
/// and at most once in backward (for the weights' gradients), where two functions made them twice.
/// Returns (gelu_linear's result, the second). output_unread concerns the first only.
std::pair<torch::Tensor, torch::Tensor> gelu_linear_with_down(const torch::Tensor& a, const torch::Tensor& u,
                                                              const torch::Tensor& weight,
                                                              const torch::Tensor& bias,
                                                              const torch::Tensor& down,
                                                              bool output_unread = false);

/// torch::linear(x, weight, bias) for a caller that never reads the result's values, only
/// backpropagates through it: no GEMM in forward (the result is uninitialised memory of its shape,
/// in the dtype the Linear would give under autocast); backward gives x's gradient, and the
/// weight's and bias's where they need one, as the Linear's. Keeps x only for the weight's
/// gradient.
torch::Tensor linear_output_unread(const torch::Tensor& x, const torch::Tensor& weight,
                                   const torch::Tensor& bias);
/// The composition autograd keeps everything of: linear(cat(a, gelu(u))) (a undefined: no cat).
torch::Tensor gelu_linear_reference(const torch::Tensor& a, const torch::Tensor& u,
                                    const torch::Tensor& weight, const torch::Tensor& bias);

/// A Linear on the modulated LayerNorm of x, linear(norm_modulate(x, shift, scale)), as one
/// autograd function keeping x, shift and scale (and the weights) only: the modulated input, which
/// the composition keeps for the weight's gradient (one (B, N, C) activation per call), is
/// recomputed in backward with the same LayerNorm kernel (bit for bit the forward's). Under autocast
/// the GEMMs run in autocast's dtype, as the Linear would.
torch::Tensor modulate_linear(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                              const torch::Tensor& weight, const torch::Tensor& bias);

/// modulate_linear and, in the same function, linear(norm_modulate(x, shift, scale), down) with a
/// second, bias-free weight (the LoRA adapters' stacked A): the modulated input is made once in
/// forward and at most once in backward. Returns (modulate_linear's result, the second).
std::pair<torch::Tensor, torch::Tensor> modulate_linear_with_down(
    const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
    const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& down);

}  // namespace tt
