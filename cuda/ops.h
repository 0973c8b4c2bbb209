// torch-facing entry points of teletron's kernels. Each checks dtypes/devices/contiguity, runs the
// CUDA kernel on the current stream for CUDA tensors, and the plain-torch CPU reference otherwise.
#pragma once

#include <torch/types.h>

#include <functional>
#include <tuple>
#include <utility>

#include "cuda/colour.h"

namespace tt {

/// Flow-matching mix in one pass: x0, noise (B, ...) fp32, sigmas (B) fp32 ->
/// (noisy = (1 - s) x0 + s noise, target = noise - x0), both fp32 like x0.
std::pair<torch::Tensor, torch::Tensor> flow_matching_mix(const torch::Tensor& x0, const torch::Tensor& noise,
                                                          const torch::Tensor& sigmas);

/// The plain-torch reference of flow_matching_mix (any device).
std::pair<torch::Tensor, torch::Tensor> flow_matching_mix_reference(const torch::Tensor& x0,
                                                                    const torch::Tensor& noise,
                                                                    const torch::Tensor& sigmas);

/// True when this build has the CUDA kernels compiled in.
bool kernels_built();

// ---- keyed random numbers ----

/// Standard normals keyed per row (cuda/keyed_random.h): keys (B) int64 -> (B, *row_shape) fp32 on
/// keys' device, where element i of row b depends only on (seed, keys[b], draw, i), never on B or the
/// row's place in the batch. CUDA keys run the kernel on the current stream (keys read on the device:
/// no host sync, safe to capture in a CUDA Graph); CPU keys compute the same arithmetic on the host
/// (the [gpu] test's reference; libm and CUDA's maths may differ in the last bits).
torch::Tensor keyed_normal(const torch::Tensor& keys, at::IntArrayRef row_shape, uint64_t seed,
                           uint32_t draw);

/// As keyed_normal, uniform in (0, 1] (24 random bits each).
torch::Tensor keyed_uniform(const torch::Tensor& keys, at::IntArrayRef row_shape, uint64_t seed,
                            uint32_t draw);

/// x (fp32) -> bf16 rounded stochastically: away from zero with probability equal to x's distance
/// from its truncation in units of the bf16 gap there, so E[round(x)] = x (unbiased, where
/// round-to-nearest drops every update smaller than half a gap). The 16 random bits per element
/// come from keyed_uniform(key, x.numel(), seed, keyed::kStochasticRounding): a replay, a resumed
/// run or another batching rounds alike. key: (1) int64 on x's device (no host read).
torch::Tensor stochastic_round_bf16(const torch::Tensor& x, const torch::Tensor& key, uint64_t seed);

/// How AdamW rounds a bf16 parameter's fp32 update (core/adamw.h's Bf16Rounding, the same
/// signature): (updated value fp32, the parameter's index, its step count after this step, 0-d
/// fp32 on the device) -> stochastic_round_bf16 keyed by (step << 32) | index under `seed`, so every
/// parameter and step draws its own bits, and a replay or a resume draws the same ones. The key
/// is made on the device (no host read: a captured step holds it).
std::function<torch::Tensor(const torch::Tensor&, int64_t, const torch::Tensor&)> keyed_bf16_rounding(
    uint64_t seed);

// ---- colour conversion ----

/// YUV 4:2:0 -> RGB. y (T, H, W) and interleaved uv (T, ceil(H/2), ceil(W/2), 2): uint8 when
/// format.bit_depth is 8 (NV12), uint16 holding the value in the high 10 bits when it is 10 (P010).
/// Returns (T, H, W, 3) uint8 RGB, chroma upsampled as cuda/colour.h says (8-bit: replicated 2x2;
/// 10-bit: vertical cubic, as the ffmpeg CLI), rounded and clamped. CUDA tensors run the
/// kernel on the current stream and are read in place when rows are unit-stride (pitched views of
/// NVDEC surfaces included); CPU tensors run the reference.
torch::Tensor yuv420_to_rgb(const torch::Tensor& y, const torch::Tensor& uv, const YuvFormat& format);

/// The plain-torch reference of yuv420_to_rgb (any device, same math and rounding).
torch::Tensor yuv420_to_rgb_reference(const torch::Tensor& y, const torch::Tensor& uv,
                                      const YuvFormat& format);

}  // namespace tt

// ---- augmentation ----

#include "cuda/augment_args.h"

namespace tt {

/// The fused augmentation kernel (see pipeline/augment.h for the definition and how args are made):
/// rgb (T, H, W, 3) uint8 CUDA -> (3, T, out_h, out_w) `dtype` (bf16 or fp32) in [-1, 1], on the
/// current stream. Refuses CPU tensors: the CPU path is pipeline's augment_reference.
torch::Tensor augment_clip_cuda(const torch::Tensor& rgb, const AugmentKernelArgs& args, int64_t out_h,
                                int64_t out_w, torch::Dtype dtype);

/// The kernel's per-pixel code run on the host: rgb (T, H, W, 3) uint8 CPU -> (3, T, out_h, out_w)
/// fp32. Lets machines without a GPU test the kernel's arithmetic; needs kernels_built().
torch::Tensor augment_clip_emulated(const torch::Tensor& rgb, const AugmentKernelArgs& args, int64_t out_h,
                                    int64_t out_w);

}  // namespace tt

// ---- group norm ----

namespace tt {

/// GroupNorm then, when `silu`, SiLU: the HunyuanVideo VAE's norm + activation in one statistics
/// read and one read-write pass. x (N, C, D, H, W) (or (N, C, H, W), (N, C, L)) bf16 or fp32,
/// contiguous or channels-last; weight, bias (C) fp32 or x's dtype; C % groups == 0. Statistics per
/// (n, group) over (C/groups) x spatial values, biased variance:
/// y = (x - mean) * rsqrt(var + eps) * weight[c] + bias[c], then y * sigmoid(y).
/// Returns y with x's shape, dtype and memory format. CUDA tensors run cuda/group_norm.cu on the
/// current stream (fp32 statistics, fp64 across blocks); CPU tensors run the reference.
torch::Tensor group_norm_silu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              int64_t groups, double eps, bool silu);

/// group_norm_silu of x + pre_bias (pre_bias (C) per channel, or undefined for none: a convolution's
/// bias the caller left unapplied) inside a replicate-padded buffer (N, C, T + time, H + 2 space,
/// W + 2 space): the first `time` frames repeat the first frame, the `space` border rows and columns
/// the edge ones (the VAE's causal convolution padding). On CUDA with channels-last input the kernel
/// writes the interior and the borders directly (no separate copy of the normalised tensor, x + pre_bias
/// never stored; `borders_by_norm` false: the norm writes the interior, one border kernel the pads);
/// elsewhere it is the sum rounded to x's dtype, group_norm_silu, then one copy and the borders.
/// Returns the buffer in x's memory format.
torch::Tensor group_norm_silu_padded(const torch::Tensor& x, const torch::Tensor& weight,
                                     const torch::Tensor& bias, int64_t groups, double eps, bool silu,
                                     int64_t time, int64_t space, const torch::Tensor& pre_bias = {},
                                     bool borders_by_norm = true);

/// The causal 3x3x3 convolution of x (N, C, T, H, W) with replicate padding (two copies of the
/// first frame in front, one edge row / column each side) as one GEMM over an im2col matrix (built
/// in chunks of about 256 MiB; the bias rides as a ones column): for the few-channel first layer,
/// where cuDNN's kernels run far below the tensor cores' rate. weight (O, C, 3, 3, 3), bias (O) or
/// undefined. Returns (N, O, T, H, W) channels-last. CUDA bf16/fp32 runs the kernel + cuBLAS; others
/// F::pad + F::conv3d.
torch::Tensor causal_conv3d_gemm(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias);

/// out += other + bias[c] in place (bias (C) along dim 1, any float dtype; other like out): a
/// residual sum that also adds a convolution's bias left unapplied, in one pass. CUDA tensors of one
/// dense channels-last layout run one kernel (fp32 arithmetic, one rounding); others run ATen's adds.
/// Returns out.
torch::Tensor& add_residual_bias_(torch::Tensor& out, const torch::Tensor& other, const torch::Tensor& bias);

/// x + other + bias[c] (add_residual_bias_'s sum, x left as it is) in the interior of a new padded
/// tensor (N, C, T + time, H + 2 space, W + 2 space) in x's memory format, its pads replicated as
/// replicate_pad_borders fills them: the sum and the causal padding of the convolution after it,
/// without the copy between them. CUDA bf16/fp32 channels-last x and other of one layout: one kernel
/// for the interior, one for the pads; otherwise ATen's adds and copies (the same values).
torch::Tensor add_residual_bias_padded(const torch::Tensor& x, const torch::Tensor& other,
                                       const torch::Tensor& bias, int64_t time, int64_t space);

/// Fills the pads of `out` (N, C, T + time, H + 2 space, W + 2 space) from its interior by
/// replication: border rows and columns from the edge ones, then the first `time` frames from frame
/// `time` (so the corners repeat too). Channels-last CUDA bf16/fp32: one kernel; otherwise ATen copies.
void replicate_pad_borders(torch::Tensor& out, int64_t time, int64_t space);

/// The plain-torch reference of group_norm_silu (any device): F::group_norm in fp32, SiLU, cast back
/// to x's dtype and memory format.
torch::Tensor group_norm_silu_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                        const torch::Tensor& bias, int64_t groups, double eps, bool silu);

}  // namespace tt

// ---- spin wait (tests, diagnostics) ----

namespace tt {

/// Holds the current CUDA stream until flag (1) int32 on the same device becomes non-zero (written
/// by another stream) or `timeout_s` pass. Returns a (1) int32 tensor, written when the wait ends:
/// 1 when it timed out, 0 when the flag came. Queued without waiting on the host.
torch::Tensor spin_until_set(const torch::Tensor& flag, double timeout_s);

/// Keeps the current CUDA stream of `device` busy for `seconds` of GPU time (a kernel that waits
/// for nothing, so it cannot deadlock). Queued without waiting on the host.
void busy_for(const torch::Device& device, double seconds);

}  // namespace tt

// ---- Transformer block ops: gated residual, QK RMSNorm + RoPE, GELU-tanh ----
//
// Forward and backward entries of the kernels behind model/fused_ops.h's autograd functions. CUDA
// tensors run cuda/{gated_residual,rms_norm_rope,gelu_tanh}.cu on the current stream; CPU tensors
// run the `_reference` (plain torch, the same formulas in fp32, or fp64 for fp64 inputs, which the
// finite-difference tests use). Kernels take bf16 or fp32, every tensor of one call in one dtype
// except where noted.

namespace tt {

/// out = x + gate.unsqueeze(1) * y: x, y (B, N, C), gate (B, C), one dtype -> (B, N, C), one rounding.
torch::Tensor gated_residual_forward(const torch::Tensor& x, const torch::Tensor& y,
                                     const torch::Tensor& gate);
torch::Tensor gated_residual_forward_reference(const torch::Tensor& x, const torch::Tensor& y,
                                               const torch::Tensor& gate);

/// grad (B, N, C), y (B, N, C), gate (B, C) -> (dy = grad * gate (B, N, C), dgate = sum_N grad * y
/// (B, C), accumulated in fp32). dx is grad itself.
std::pair<torch::Tensor, torch::Tensor> gated_residual_backward(const torch::Tensor& grad,
                                                                const torch::Tensor& y,
                                                                const torch::Tensor& gate);
std::pair<torch::Tensor, torch::Tensor> gated_residual_backward_reference(const torch::Tensor& grad,
                                                                          const torch::Tensor& y,
                                                                          const torch::Tensor& gate);

/// RMSNorm over D then RoPE on the first `rope_tokens` tokens: x (B, H, N, D) bf16/fp32, unit
/// stride along D (other strides are read in place by the kernel); weight (D) any float dtype, used
/// rounded to x's dtype (as the model's CUDA RMSNorm uses it); rope (>= rope_tokens, D/2, 2) fp32
/// (cos, sin) per token and pair, undefined when rope_tokens is 0. The normalised value is rounded to
/// x's dtype before the rotation, as the unfused model stores it. Returns (out (B, H, N, D) x's dtype,
/// on CUDA stored token-major ((B, N, H, D) in memory, as the QKV projection's views and ATen's ops on
/// them are), on the CPU contiguous; rstd (B, H, N) fp32, or fp64 for fp64 x).
/// `out`, when given, is where the result goes instead (x's sizes, dtype and device, unit stride along
/// D, any other strides: e.g. a token slice of a joint q of video and text), and is returned.
std::pair<torch::Tensor, torch::Tensor> rms_norm_rope_forward(const torch::Tensor& x,
                                                              const torch::Tensor& weight,
                                                              const torch::Tensor& rope, int64_t rope_tokens,
                                                              double eps, const torch::Tensor& out = {});
std::pair<torch::Tensor, torch::Tensor> rms_norm_rope_forward_reference(const torch::Tensor& x,
                                                                        const torch::Tensor& weight,
                                                                        const torch::Tensor& rope,
                                                                        int64_t rope_tokens, double eps);

/// grad (B, H, N, D) (on CUDA any strides along B, H, N read in place), the forward's x, weight, rope
/// and rstd -> (dx (B, H, N, D) x's dtype, stored as the forward's out, dweight
/// (D) weight's dtype, summed over B, H, N in fp32). `dx_out`, when given, receives dx instead (as
/// forward's `out`: e.g. the q columns of a projection's gradient) and is returned.
std::pair<torch::Tensor, torch::Tensor> rms_norm_rope_backward(
    const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& rstd,
    const torch::Tensor& rope, int64_t rope_tokens, const torch::Tensor& dx_out = {});
std::pair<torch::Tensor, torch::Tensor> rms_norm_rope_backward_reference(
    const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& rstd,
    const torch::Tensor& rope, int64_t rope_tokens);

/// GELU, tanh approximation, elementwise: x (..., M) bf16/fp32 -> x's shape and dtype, contiguous.
/// A column slice of a wider row-major matrix (unit last stride, leading dims that flatten into
/// one row stride) is read in place.
torch::Tensor gelu_tanh_forward(const torch::Tensor& x);
torch::Tensor gelu_tanh_forward_reference(const torch::Tensor& x);

/// grad (x's shape), x -> dx = grad * gelu_tanh'(x) in x's dtype, dense or written into `out` (x's
/// shape and dtype, returned) when given. On CUDA, x, grad and out may be column slices of wider
/// matrices (rows of a stride): read and written in place.
torch::Tensor gelu_tanh_backward(const torch::Tensor& grad, const torch::Tensor& x, torch::Tensor out = {});
torch::Tensor gelu_tanh_backward_reference(const torch::Tensor& grad, const torch::Tensor& x);
/// gelu_tanh_backward and, from the same read of x, gelu_tanh(x) (dense, as gelu_tanh_forward gives
/// it): (dx, gelu(x)). A backward that needs the GELU's value again (GeluLinear's, for the
/// down-projection's weight gradient) reads x once instead of twice.
std::pair<torch::Tensor, torch::Tensor> gelu_tanh_backward_and_value(const torch::Tensor& grad,
                                                                     const torch::Tensor& x,
                                                                     torch::Tensor out = {});

// ---- adaLN modulation ----

/// x (B, N, C), shift and scale (B, C) -> (m, mean, rstd): LayerNorm over C without affine (eps), then
/// m = shift + x̂ (1 + scale) (B, N, C) in x's dtype, as model/layers.cpp's norm_modulate composes it
/// (x̂ and 1 + scale rounded to x's dtype as its ops store them); mean and rstd (B, N, 1) fp32 for
/// backward. On CUDA one kernel (x, shift, scale one dtype, bf16 or fp32, C <= 3072); on the CPU the
/// reference, ATen's LayerNorm and addcmul.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_modulate_forward(
    const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale, double eps);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_modulate_forward_reference(
    const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale, double eps);

/// grad = dL/dm (x's shape and dtype), x, scale and the forward's mean and rstd -> (dx, dshift,
/// dscale): LayerNorm's backward of round(grad (1 + scale)), and the sums over N of grad and of grad
/// x̂ (B, C) in x's dtype (fp32 accumulation). On CUDA one pass plus a small column kernel
/// (deterministic); on the CPU the reference, the composition's autograd.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_modulate_backward(
    const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& mean,
    const torch::Tensor& rstd);
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_modulate_backward_reference(
    const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& mean,
    const torch::Tensor& rstd);

// ---- a Linear's weight and bias gradients ----

/// grad (tokens, out) and x (tokens, in), CUDA, both bf16 or both fp16, rows of unit column stride:
/// writes weight_grad = grad^T x into weight_grad ((out, in) fp32, rows of unit column stride: a
/// column block of a wider matrix is fine) and, when bias_grad is defined ((out) fp32, dense), the
/// column sums of grad into it, by one cuBLASLt GEMM whose epilogue makes the sums (fp32
/// accumulation throughout). Returns false, having written nothing, for operands it does not take
/// (CPU, other dtypes or layouts, a build without CUDA) or where cuBLASLt has no kernel for them:
/// the caller then runs ATen's GEMM and sum.
bool weight_bias_grad(const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& weight_grad,
                      const torch::Tensor& bias_grad);

// ---- optical flow ----

/// One pyramid level of TV-L1 (the scheme of pipeline/optical_flow_tvl1.h) with cuda/tvl1.cu:
/// frames i0, i1 (B, H, W) and the level's starting flow (B, 2, H, W), CUDA, floating point (fp32
/// math) -> the refined flow (B, 2, H, W) fp32. The dual fields start at zero. CPU tensors are
/// refused (their reference is pipeline's tensor-op TV-L1), as is a build without kernels.
torch::Tensor tvl1_refine(const torch::Tensor& i0, const torch::Tensor& i1, const torch::Tensor& flow,
                          double lambda, double theta, double tau, int64_t warps, int64_t iterations);

}  // namespace tt
