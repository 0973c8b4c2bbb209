// Building blocks shared by the HunyuanVideo VAE's encoder (model/vae.cpp) and decoder
// (model/vae_decoder.cpp), as diffusers' autoencoder_kl_hunyuan_video.py defines them and under its
// parameter names: the causal 3D convolution, the resnet block, the mid block (resnet, frame-causal
// single-head attention, resnet), GroupNorm(+SiLU) and the tile blend. Activations are (B, C, T, H, W)
// in NCDHW or channels-last (NDHWC) memory; every block keeps its input's layout.
#pragma once

#include <torch/nn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "cuda/ops.h"
#include "model/vae.h"

namespace tt {

/// GroupNorm, then SiLU when `silu`: teletron's fused kernel on CUDA when the runtime asks for it
/// (one read for the statistics, one read + write for the output, any memory format), else
/// LibTorch's GroupNorm and silu. x (B, C, T, H, W) -> same shape, dtype and layout.
torch::Tensor vae_norm(torch::nn::GroupNorm& module, const torch::Tensor& x, bool silu, const VaeRuntime& rt);

/// Replicate padding that keeps the input's memory format: `time` copies of the first frame in
/// front, `space` edge rows/columns on each side. (B, C, T, H, W) -> (B, C, T + time, H + 2 space,
/// W + 2 space).
torch::Tensor vae_causal_pad(const torch::Tensor& x, int64_t time, int64_t space);

/// diffusers' blend_v / blend_h / blend_t: the first `extent` entries of b along `dim` fade from a's
/// last ones to b's own, in place on b (later tiles then blend against the already blended b).
/// extent is capped by both sizes along `dim`. Returns b.
torch::Tensor vae_blend(const torch::Tensor& a, torch::Tensor b, int64_t dim, int64_t extent);

// Conv3d with causal replicate padding: time gets kernel - 1 copies of the first frame in front, space
// kernel / 2 on each side. Holds the convolution as `conv` (diffusers: `<name>.conv.weight`).
class CausalConv3dImpl : public torch::nn::Module {
 public:
  CausalConv3dImpl(int64_t in, int64_t out, int64_t kernel, std::vector<int64_t> stride = {1, 1, 1})
      : pad_{kernel / 2, kernel / 2, kernel / 2, kernel / 2, kernel - 1, 0} {
    conv =
        register_module("conv", torch::nn::Conv3d(torch::nn::Conv3dOptions(in, out, kernel).stride(stride)));
  }
  /// True when the convolution pads (kernel > 1); time_pad() frames in front, space_pad() each side.
  bool pads() const { return pad_[0] > 0 || pad_[4] > 0; }
  int64_t time_pad() const { return pad_[4]; }
  int64_t space_pad() const { return pad_[0]; }
  torch::Tensor forward(const torch::Tensor& x) { return forward_consuming(x); }
  /// forward that lets go of `x` once the padded copy exists: moved in (std::move), the caller's
  /// activation is freed before the convolution allocates its output (one activation less at the
  /// peak than a caller holding it, as diffusers' callers do).
  /// `with_bias` false leaves the bias out of the output (the caller adds it where it reads the output).
  torch::Tensor forward_consuming(torch::Tensor x, bool with_bias = true) {
    if (pad_[0] == 0 && pad_[4] == 0) return convolve(x, with_bias);
    namespace F = torch::nn::functional;
    torch::Tensor padded = x.is_contiguous() ? F::pad(x, F::PadFuncOptions(pad_).mode(torch::kReplicate))
                                             : vae_causal_pad(x, pad_[4], pad_[0]);
    x.reset();
    return convolve(padded, with_bias);
  }
  /// The convolution of an already padded input, with or without its bias.
  torch::Tensor convolve(const torch::Tensor& padded, bool with_bias = true) {
    if (with_bias) return conv(padded);
    namespace F = torch::nn::functional;
    return F::conv3d(padded, conv->weight, F::Conv3dFuncOptions().stride(conv->options.stride()));
  }
  torch::nn::Conv3d conv{nullptr};

 private:
  std::vector<int64_t> pad_;
};
TORCH_MODULE(CausalConv3d);

/// GroupNorm(+SiLU) then the causal convolution `conv`. With VaeRuntime::norm_pads (and the fused
/// kernel on CUDA) the norm writes straight into the padded buffer the convolution reads
/// (group_norm_silu_padded: one full read + write of the activation fewer); otherwise vae_norm, then
/// conv's own padding. The same values either way. Moved in (std::move), `x` is freed once the norm
/// has read it, and the norm's output once it is padded, so neither is held while the convolution
/// writes its output. `pre_bias` (C): the bias of the convolution that made x, not yet added (the
/// fused norm adds it as it reads x); `with_bias` false leaves conv's own bias out of the output.
torch::Tensor vae_norm_conv(torch::nn::GroupNorm& norm, CausalConv3dImpl& conv, torch::Tensor x, bool silu,
                            const VaeRuntime& rt, const torch::Tensor& pre_bias = {}, bool with_bias = true);

// GroupNorm -> SiLU -> conv, twice, plus a 1x1x1 shortcut when the channel count changes.
class VaeResnetImpl : public torch::nn::Module {
 public:
  VaeResnetImpl(int64_t in, int64_t out, int64_t groups) {
    norm1 = register_module("norm1", torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, in).eps(1e-6)));
    conv1 = register_module("conv1", CausalConv3d(in, out, 3));
    norm2 =
        register_module("norm2", torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, out).eps(1e-6)));
    conv2 = register_module("conv2", CausalConv3d(out, out, 3));
    if (in != out) conv_shortcut = register_module("conv_shortcut", CausalConv3d(in, out, 1));
  }
  torch::Tensor forward(const torch::Tensor& x, const VaeRuntime& rt) {
    Sum sum = sum_parts(x, rt);
    // The sum lands in conv2's output, which nothing else reads.
    if (sum.bias.defined()) return add_residual_bias_(sum.h, sum.residual, sum.bias);
    return sum.h.add_(sum.residual);
  }
  /// forward's output padded for the causal convolution after it (`time` frames in front, `space` on
  /// each side, replicate), the sum written straight into the padded buffer: the same values as
  /// vae_causal_pad(forward(x)). x goes once it has been read.
  torch::Tensor forward_padded(torch::Tensor x, const VaeRuntime& rt, int64_t time, int64_t space) {
    Sum sum = sum_parts(x, rt);
    x.reset();
    if (!sum.bias.defined()) sum.bias = torch::zeros({sum.h.size(1)}, sum.h.options().dtype(torch::kFloat32));
    return add_residual_bias_padded(sum.h, sum.residual, sum.bias, time, space);
  }
  torch::nn::GroupNorm norm1{nullptr}, norm2{nullptr};
  CausalConv3d conv1{nullptr}, conv2{nullptr}, conv_shortcut{nullptr};

 private:
  // The resnet's output is h + residual (+ bias): conv2's output, x or its shortcut convolution, and
  // with fold_bias the biases left out of the convolutions (conv1's goes into norm2's read, conv2's
  // and the shortcut's into the residual sum, fp32; never a pass of their own). Without fold_bias
  // the convolutions add their own and bias is undefined.
  struct Sum {
    torch::Tensor h, residual, bias;
  };
  Sum sum_parts(const torch::Tensor& x, const VaeRuntime& rt) {
    const bool fold = rt.fold_bias;
    Sum sum;
    sum.h = vae_norm_conv(norm1, *conv1, x, true, rt, {}, /*with_bias=*/!fold);
    // conv1's output goes once norm2 has read it, before conv2 allocates (diffusers' rebinding of
    // hidden_states frees it there too).
    sum.h =
        vae_norm_conv(norm2, *conv2, std::move(sum.h), true, rt, fold ? conv1->conv->bias : torch::Tensor(),
                      /*with_bias=*/!fold);
    sum.residual = conv_shortcut ? conv_shortcut->forward_consuming(x, /*with_bias=*/!fold) : x;
    if (fold) {
      sum.bias = conv2->conv->bias.to(torch::kFloat32);
      if (conv_shortcut) sum.bias = sum.bias + conv_shortcut->conv->bias.to(torch::kFloat32);
    }
    return sum;
  }
};
TORCH_MODULE(VaeResnet);

// diffusers' Attention as the mid block uses it: GroupNorm over channels, one head as wide as the
// channels, a frame-causal mask (a token sees every token of its own and earlier frames), output
// projection, residual. The mask is never built: the queries of frame f attend to the keys of frames
// 0..f, one attention call per latent frame, which is the same softmax without the N x N mask
// (diffusers materialises it: 56,160^2 entries for a 33x480x832 clip).
class VaeAttentionImpl : public torch::nn::Module {
 public:
  VaeAttentionImpl(int64_t channels, int64_t groups) {
    group_norm = register_module(
        "group_norm", torch::nn::GroupNorm(torch::nn::GroupNormOptions(groups, channels).eps(1e-6)));
    to_q = register_module("to_q", torch::nn::Linear(channels, channels));
    to_k = register_module("to_k", torch::nn::Linear(channels, channels));
    to_v = register_module("to_v", torch::nn::Linear(channels, channels));
    to_out = register_module("to_out", torch::nn::ModuleList());
    to_out->push_back(torch::nn::Linear(channels, channels));
  }
  torch::Tensor forward(const torch::Tensor& x, const VaeRuntime& rt) {  // (B, C, T, H, W)
    const int64_t frames = x.size(2);
    const int64_t per_frame = x.size(3) * x.size(4);
    // Tokens (B, N, C): a view when x is channels-last, a copy otherwise.
    torch::Tensor tokens = x.permute({0, 2, 3, 4, 1}).flatten(1, 3);
    torch::Tensor h = vae_norm(group_norm, x, false, rt).permute({0, 2, 3, 4, 1}).flatten(1, 3);
    torch::Tensor q = to_q(h).unsqueeze(1);  // (B, 1, N, C): one head
    torch::Tensor k = to_k(h).unsqueeze(1);
    torch::Tensor v = to_v(h).unsqueeze(1);
    std::vector<torch::Tensor> outputs;
    outputs.reserve(static_cast<size_t>(frames));
    const bool gemm = rt.gemm_first_and_attention && x.is_cuda() && x.scalar_type() != torch::kFloat32;
    const double scale = 1.0 / std::sqrt(static_cast<double>(x.size(1)));
    for (int64_t f = 0; f < frames; ++f) {
      const int64_t visible = (f + 1) * per_frame;
      if (gemm) {
        // One head as wide as the channels (512) is past the flash and cuDNN kernels' head sizes;
        // the memory-efficient kernel SDPA falls back to runs at a few percent of the matmul rate.
        // As two cuBLAS products instead: the scores in fp32 (scaled in the GEMM's epilogue), the
        // softmax in fp32, the probabilities rounded to x's dtype for the second product.
        // Queries in chunks of at most 2^26 scores (256 MiB in fp32), so that a long whole clip
        // never holds a (frame x clip) score matrix at once.
        const int64_t batch = q.size(0);
        const int64_t rows =
            std::max<int64_t>(1, std::min(per_frame, (int64_t{1} << 26) / (batch * visible)));
        const torch::Tensor kt = k.narrow(2, 0, visible).squeeze(1).transpose(1, 2);  // (B, C, V)
        const torch::Tensor vv = v.narrow(2, 0, visible).squeeze(1);                  // (B, V, C)
        for (int64_t r = 0; r < per_frame; r += rows) {
          const int64_t count = std::min(rows, per_frame - r);
          const torch::Tensor qf = q.narrow(2, f * per_frame + r, count).squeeze(1);  // (B, count, C)
          torch::Tensor scores = torch::empty({batch, count, visible}, qf.options().dtype(torch::kFloat32));
          at::baddbmm_out(scores, scores, qf, kt, torch::kFloat32, /*beta=*/0.0, /*alpha=*/scale);
          torch::Tensor probabilities = at::_softmax(scores, -1, false).to(qf.scalar_type());
          scores.reset();
          outputs.push_back(at::bmm(probabilities, vv).unsqueeze(1));
        }
        continue;
      }
      outputs.push_back(at::scaled_dot_product_attention(q.narrow(2, f * per_frame, per_frame),
                                                         k.narrow(2, 0, visible), v.narrow(2, 0, visible)));
    }
    torch::Tensor attended = torch::cat(outputs, 2).squeeze(1);  // (B, N, C)
    torch::Tensor out = to_out[0]->as<torch::nn::LinearImpl>()->forward(attended) + tokens;
    // Back to (B, C, T, H, W) in x's memory format (for channels-last input the permute is already it).
    return out.unflatten(1, {frames, x.size(3), x.size(4)})
        .permute({0, 4, 1, 2, 3})
        .contiguous(x.suggest_memory_format());
  }
  torch::nn::GroupNorm group_norm{nullptr};
  torch::nn::Linear to_q{nullptr}, to_k{nullptr}, to_v{nullptr};
  torch::nn::ModuleList to_out{nullptr};
};
TORCH_MODULE(VaeAttention);

class VaeMidBlockImpl : public torch::nn::Module {
 public:
  VaeMidBlockImpl(int64_t channels, int64_t groups, bool attention) {
    resnets = register_module("resnets", torch::nn::ModuleList());
    resnets->push_back(VaeResnet(channels, channels, groups));
    resnets->push_back(VaeResnet(channels, channels, groups));
    if (attention) {
      attentions = register_module("attentions", torch::nn::ModuleList());
      attentions->push_back(VaeAttention(channels, groups));
    }
  }
  torch::Tensor forward(torch::Tensor x, const VaeRuntime& rt) {
    x = resnets[0]->as<VaeResnetImpl>()->forward(x, rt);
    if (attentions) x = attentions[0]->as<VaeAttentionImpl>()->forward(x, rt);
    return resnets[1]->as<VaeResnetImpl>()->forward(x, rt);
  }
  torch::nn::ModuleList resnets{nullptr}, attentions{nullptr};
};
TORCH_MODULE(VaeMidBlock);

}  // namespace tt
