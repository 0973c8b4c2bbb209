// Autograd functions over the fused Transformer kernels and their dispatch (see fused_ops.h).
#include "model/fused_ops.h"

#include <torch/autograd.h>
#include <torch/torch.h>

#include "cuda/ops.h"

namespace tt {

bool fused_kernels_take(const torch::Tensor& x) {
  return kernels_built() && x.is_cuda() &&
         (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32);
}

namespace {

bool same_kind(const torch::Tensor& a, const torch::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.device() == b.device();
}

// x + gate * y; autograd's addcmul keeps the same y and gate, but its backward materialises g * y
// (B, N, C) before reducing it, which the kernel's backward does in one pass.
class GatedResidual : public torch::autograd::Function<GatedResidual> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& y, const torch::Tensor& gate) {
    ctx->save_for_backward({y, gate});
    return gated_residual_forward(x, y, gate);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& grad = grads[0];  // (B, N, C), x's dtype
    auto [grad_y, grad_gate] = gated_residual_backward(grad, saved[0], saved[1]);
    return {grad, grad_y, grad_gate};
  }
};

// RMSNorm + RoPE: keeps x and rstd (B, H, N) fp32; weight and the RoPE table are parameters and
// cached constants, not activations.
class RmsNormRope : public torch::autograd::Function<RmsNormRope> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& rope, int64_t rope_tokens,
                               double eps) {
    auto [out, rstd] = rms_norm_rope_forward(x, weight, rope, rope_tokens, eps);
    ctx->save_for_backward({x, weight, rstd, rope});
    ctx->saved_data["rope_tokens"] = rope_tokens;
    return out;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const int64_t rope_tokens = ctx->saved_data["rope_tokens"].toInt();
    auto [grad_x, grad_weight] =
        rms_norm_rope_backward(grads[0], saved[0], saved[1], saved[2], saved[3], rope_tokens);
    return {grad_x, grad_weight, torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

class GeluTanh : public torch::autograd::Function<GeluTanh> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    ctx->save_for_backward({x});
    return gelu_tanh_forward(x);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    return {gelu_tanh_backward(grads[0], saved[0])};
  }
};

void check_rope_rows(const torch::Tensor& x, const RopeTable* rope, int64_t rope_tokens) {
  TORCH_CHECK(rope_tokens >= 0 && rope_tokens <= x.size(2), "rms_norm_rope: rope_tokens must be in [0, ",
              x.size(2), "], got ", rope_tokens);
  if (rope_tokens == 0) return;
  TORCH_CHECK(rope != nullptr && rope->freqs.size(0) == rope_tokens,
              "rms_norm_rope: expected a RoPE table of ", rope_tokens, " tokens, got ",
              rope == nullptr ? int64_t{0} : rope->freqs.size(0));
}

}  // namespace

torch::Tensor gated_residual_fused(const torch::Tensor& x, const torch::Tensor& y,
                                   const torch::Tensor& gate) {
  return GatedResidual::apply(x, y, gate);
}

torch::Tensor gated_residual_reference(const torch::Tensor& x, const torch::Tensor& y,
                                       const torch::Tensor& gate) {
  return torch::addcmul(x, y, gate.unsqueeze(1));
}

torch::Tensor gated_residual(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                             bool fused) {
  if (fused && fused_kernels_take(x) && same_kind(x, y) && same_kind(x, gate)) {
    return gated_residual_fused(x, y, gate);
  }
  return gated_residual_reference(x, y, gate);
}

torch::Tensor rms_norm(const torch::Tensor& x, const torch::Tensor& weight, double eps) {
  if (x.is_cuda()) {
    // One fused kernel (fp32 accumulation inside), input and output in x's dtype.
    return std::get<0>(at::_fused_rms_norm(x, {x.size(-1)}, weight.to(x.scalar_type()), eps));
  }
  auto x32 = x.to(torch::kFloat32);
  auto normed = x32 * torch::rsqrt(x32.pow(2).mean(-1, /*keepdim=*/true) + eps);
  return (normed * weight.to(torch::kFloat32)).to(x.scalar_type());
}

torch::Tensor rms_norm_rope_fused(const torch::Tensor& x, const torch::Tensor& weight, const RopeTable* rope,
                                  int64_t rope_tokens, double eps) {
  check_rope_rows(x, rope, rope_tokens);
  // (N, D/2, 2) fp32 (cos, sin); without RoPE an empty tensor (autograd functions take no undefined inputs).
  const torch::Tensor table = rope_tokens > 0 ? torch::view_as_real(rope->freqs)
                                              : torch::empty({0}, x.options().dtype(torch::kFloat32));
  return RmsNormRope::apply(x, weight, table, rope_tokens, eps);
}

torch::Tensor rms_norm_rope_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                      const RopeTable* rope, int64_t rope_tokens, double eps) {
  check_rope_rows(x, rope, rope_tokens);
  auto normed = rms_norm(x, weight, eps);
  if (rope_tokens == 0) return normed;
  if (rope_tokens == x.size(2)) return apply_rope(normed, *rope);
  return torch::cat({apply_rope(normed.slice(2, 0, rope_tokens), *rope), normed.slice(2, rope_tokens)}, 2);
}

torch::Tensor rms_norm_rope(const torch::Tensor& x, const torch::Tensor& weight, const RopeTable* rope,
                            int64_t rope_tokens, double eps, bool fused) {
  if (fused && fused_kernels_take(x) && x.size(-1) % 2 == 0 && x.size(-1) <= 256) {
    return rms_norm_rope_fused(x, weight, rope, rope_tokens, eps);
  }
  return rms_norm_rope_reference(x, weight, rope, rope_tokens, eps);
}

torch::Tensor gelu_tanh_fused(const torch::Tensor& x) {
  return GeluTanh::apply(x);
}

torch::Tensor gelu_tanh_reference(const torch::Tensor& x) {
  return torch::gelu(x, "tanh");
}

torch::Tensor gelu_tanh(const torch::Tensor& x, bool fused) {
  if (fused && fused_kernels_take(x)) return gelu_tanh_fused(x);
  return gelu_tanh_reference(x);
}

}  // namespace tt
