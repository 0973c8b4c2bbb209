// The shared VAE helpers (see vae_blocks.h): GroupNorm(+SiLU), layout-keeping causal padding, tile blend.
#include "model/vae_blocks.h"

#include <torch/torch.h>

#include <algorithm>

#include "cuda/ops.h"

namespace tt {

torch::Tensor vae_norm(torch::nn::GroupNorm& module, const torch::Tensor& x, bool silu,
                       const VaeRuntime& rt) {
  if (rt.fused_norm && x.is_cuda() && kernels_built())
    return group_norm_silu(x, module->weight, module->bias, module->options.num_groups(),
                           module->options.eps(), silu);
  torch::Tensor h = module(x);
  return silu ? torch::silu(h) : h;
}

// Replicate padding that keeps the input's memory format (F::pad's replicate mode returns NCDHW,
// which would undo channels-last before every convolution): one copy of the interior, then the
// borders copied from the edge rows, columns and the first frame.
torch::Tensor vae_causal_pad(const torch::Tensor& x, int64_t time, int64_t space) {
  const int64_t t = x.size(2), h = x.size(3), w = x.size(4);
  torch::Tensor out = torch::empty({x.size(0), x.size(1), t + time, h + 2 * space, w + 2 * space},
                                   x.options().memory_format(x.suggest_memory_format()));
  out.narrow(2, time, t).narrow(3, space, h).narrow(4, space, w).copy_(x);
  replicate_pad_borders(out, time, space);
  return out;
}

torch::Tensor vae_norm_conv(torch::nn::GroupNorm& norm, CausalConv3dImpl& conv, torch::Tensor x, bool silu,
                            const VaeRuntime& rt, const torch::Tensor& pre_bias, bool with_bias) {
  // x (moved in by a caller that needs it no more) goes as soon as the norm has read it, and the
  // norm's output as soon as it is padded: the convolution's output never meets either.
  if (rt.norm_pads && rt.fused_norm && x.is_cuda() && kernels_built() && conv.pads()) {
    const torch::Tensor padded =
        group_norm_silu_padded(x, norm->weight, norm->bias, norm->options.num_groups(), norm->options.eps(),
                               silu, conv.time_pad(), conv.space_pad(), pre_bias,
                               /*borders_by_norm=*/!rt.border_kernel);
    x.reset();
    return conv.convolve(padded, with_bias);
  }
  if (pre_bias.defined()) x = x + pre_bias.to(x.scalar_type()).view({1, -1, 1, 1, 1});
  torch::Tensor normed = vae_norm(norm, x, silu, rt);
  x.reset();
  return conv.forward_consuming(std::move(normed), with_bias);
}

torch::Tensor vae_blend(const torch::Tensor& a, torch::Tensor b, int64_t dim, int64_t extent) {
  extent = std::min({a.size(dim), b.size(dim), extent});
  if (extent <= 0) return b;
  // All `extent` slices at once, with the slice loop's roundings (diffusers blends slice by slice:
  // each product with its weight as a float scalar, rounded to the tensor's dtype, then the sum):
  // the same bits in three kernels instead of four per slice.
  std::vector<int64_t> shape(static_cast<size_t>(b.dim()), 1);
  shape[static_cast<size_t>(c10::maybe_wrap_dim(dim, b.dim()))] = extent;
  // Made on b's device (a copy from the host would wait for the stream), in float64 as the loop's
  // double weights, then as the float scalars its products take.
  const torch::Tensor w =
      torch::arange(extent, torch::TensorOptions().device(b.device()).dtype(torch::kFloat64)) /
      static_cast<double>(extent);
  const torch::Tensor from_a = (1.0 - w).to(torch::kFloat32).view(shape);
  const torch::Tensor from_b = w.to(torch::kFloat32).view(shape);
  torch::Tensor head = b.narrow(dim, 0, extent);
  head.copy_((a.narrow(dim, a.size(dim) - extent, extent) * from_a).to(b.scalar_type()) +
             (head * from_b).to(b.scalar_type()));
  return b;
}

}  // namespace tt
