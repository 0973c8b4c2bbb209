// Building blocks of the HunyuanVideo Transformer (see layers.h).
#include "model/layers.h"

#include <torch/autograd.h>

#include <cmath>

#include "core/errors.h"
#include "model/fused_ops.h"
#include "model/kept_attention.h"

namespace tt {

torch::Tensor timestep_sinusoid(const torch::Tensor& t, int64_t dim) {
  const int64_t half = dim / 2;
  auto exponent = torch::arange(half, t.options().dtype(torch::kFloat32)) *
                  (-std::log(10000.0) / static_cast<double>(half));
  auto angles = t.to(torch::kFloat32).unsqueeze(1) * torch::exp(exponent).unsqueeze(0);  // (B, half)
  return torch::cat({torch::cos(angles), torch::sin(angles)}, 1);
}

MlpEmbedderImpl::MlpEmbedderImpl(int64_t in_features, int64_t hidden) {
  linear_1 = register_module("linear_1", torch::nn::Linear(in_features, hidden));
  linear_2 = register_module("linear_2", torch::nn::Linear(hidden, hidden));
}

torch::Tensor MlpEmbedderImpl::forward(const torch::Tensor& x) {
  return linear_2(torch::silu(linear_1(x)));
}

namespace {

// `net.0` of diffusers' FeedForward is a module holding `proj`; `net.1` (dropout) has no weights.
struct ProjHolderImpl : torch::nn::Module {
  ProjHolderImpl(int64_t in, int64_t out) { proj = register_module("proj", torch::nn::Linear(in, out)); }
  torch::nn::Linear proj{nullptr};
};
TORCH_MODULE(ProjHolder);

}  // namespace

FeedForwardImpl::FeedForwardImpl(int64_t dim, int64_t inner, FeedForwardActivation activation,
                                 bool fused_kernels)
    : activation_(activation), fused_kernels_(fused_kernels) {
  auto net = register_module("net", torch::nn::ModuleList());
  ProjHolder holder(dim, inner);
  proj_ = holder->proj;
  out_ = torch::nn::Linear(inner, dim);
  net->push_back(holder);
  net->push_back(torch::nn::Identity());
  net->push_back(out_);
}

torch::Tensor FeedForwardImpl::forward(const torch::Tensor& x) {
  return after_projection(lora_linear(proj_, lora_proj, x), false);
}

torch::Tensor FeedForwardImpl::forward_modulated(const torch::Tensor& x, const torch::Tensor& shift,
                                                 const torch::Tensor& scale, bool output_unread) {
  return after_projection(modulated_linear(proj_, lora_proj, x, shift, scale, fused_kernels_), output_unread);
}

torch::Tensor FeedForwardImpl::after_projection(torch::Tensor h, bool output_unread) {
  // With fused kernels, the GELU and the down-projection keep only the up-projection's output.
  if (activation_ == FeedForwardActivation::kGeluTanh)
    return gelu_then_linear(out_, lora_out, {}, h, fused_kernels_, output_unread);
  return lora_linear(out_, lora_out, torch::silu(h));
}

RmsNormImpl::RmsNormImpl(int64_t dim, double eps) : eps_(eps) {
  weight = register_parameter("weight", torch::ones({dim}));
}

torch::Tensor RmsNormImpl::forward(const torch::Tensor& x) {
  return rms_norm(x, weight, eps_);
}

ModulationImpl::ModulationImpl(int64_t hidden, int64_t chunks) : chunks_(chunks) {
  linear = register_module("linear", torch::nn::Linear(hidden, chunks * hidden));
  torch::NoGradGuard no_grad;
  linear->weight.zero_();
  linear->bias.zero_();
}

std::vector<torch::Tensor> ModulationImpl::forward(const torch::Tensor& vec) {
  return lora_linear(linear, lora, torch::silu(vec)).chunk(chunks_, 1);
}

torch::Tensor layer_norm_plain(const torch::Tensor& x) {
  // native_layer_norm rather than layer_norm: autocast would run layer_norm with an fp32 output,
  // doubling the traffic of the largest activations; this one accumulates in fp32 and returns
  // x's dtype.
  return std::get<0>(at::native_layer_norm(x, {x.size(-1)}, {}, {}, 1e-6));
}

namespace {

// LayerNorm + modulation with a backward of its own: autograd would keep the normalised x̂ (B, N, C)
// for the scale's gradient; this keeps x, the per-token statistics and the scale, and recomputes x̂.
class NormModulate : public torch::autograd::Function<NormModulate> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& shift, const torch::Tensor& scale) {
    auto [normed, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, {}, {}, 1e-6);
    ctx->save_for_backward({x, mean, rstd, scale});
    ctx->saved_data["shift_dtype"] = static_cast<int64_t>(shift.scalar_type());
    return torch::addcmul(shift.unsqueeze(1), normed, 1 + scale.unsqueeze(1));
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& x = saved[0];     // (B, N, C)
    const torch::Tensor& mean = saved[1];  // (B, N, 1) fp32 statistics
    const torch::Tensor& rstd = saved[2];
    const torch::Tensor& scale = saved[3];  // (B, C)
    const torch::Tensor& grad = grads[0];   // (B, N, C)
    // Shift and scale need gradients unless they come from a frozen modulation (LoRA's default
    // targets): then neither the sums over tokens nor x̂ are made.
    torch::Tensor grad_shift, grad_scale;
    if (ctx->needs_input_grad(1)) {
      const auto shift_dtype = static_cast<c10::ScalarType>(ctx->saved_data["shift_dtype"].toInt());
      grad_shift = grad.sum(1).to(shift_dtype);
    }
    if (ctx->needs_input_grad(2)) {
      // x̂ again from the same LayerNorm kernel: the forward's bit for bit, in one pass over x (the
      // statistics' arithmetic in fp32 took four elementwise passes).
      const torch::Tensor normed = std::get<0>(at::native_layer_norm(x, {x.size(-1)}, {}, {}, 1e-6));
      grad_scale = (grad * normed).sum(1).to(scale.scalar_type());
    }
    torch::Tensor grad_x;
    if (ctx->needs_input_grad(0)) {
      const torch::Tensor grad_normed = (grad * (1 + scale.unsqueeze(1))).to(x.scalar_type());
      grad_x = std::get<0>(at::native_layer_norm_backward(grad_normed, x, {x.size(-1)}, mean, rstd, {}, {},
                                                          {true, false, false}));
    }
    return {grad_x, grad_shift, grad_scale};
  }
};

}  // namespace

torch::Tensor norm_modulate(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return NormModulate::apply(x, shift, scale);
}

torch::Tensor norm_modulate_reference(const torch::Tensor& x, const torch::Tensor& shift,
                                      const torch::Tensor& scale) {
  return torch::addcmul(shift.unsqueeze(1), layer_norm_plain(x), 1 + scale.unsqueeze(1));
}

std::pair<torch::Tensor, torch::Tensor> split_at(const torch::Tensor& x, int64_t dim, int64_t index) {
  const std::vector<torch::Tensor> parts = x.split_with_sizes({index, x.size(dim) - index}, dim);
  return {parts[0], parts[1]};
}

torch::Tensor modulated_linear(torch::nn::Linear& base, const LoraAdapter& lora, const torch::Tensor& x,
                               const torch::Tensor& shift, const torch::Tensor& scale, bool fused) {
  if (!fused) return lora_linear(base, lora, norm_modulate(x, shift, scale));
  if (!lora) return modulate_linear(x, shift, scale, base->weight, base->bias);
  if (lora->has_dropout()) {  // dropout needs the modulated input itself
    const torch::Tensor out = modulate_linear(x, shift, scale, base->weight, base->bias);
    return lora->add_up(out, lora->down(norm_modulate(x, shift, scale)));
  }
  // Base and adapters in one function: the modulated input made, and remade in backward, once.
  const auto [out, down] =
      modulate_linear_with_down(x, shift, scale, base->weight, base->bias, lora->down_weight());
  return lora->add_up(out, down);
}

torch::Tensor gelu_then_linear(torch::nn::Linear& base, const LoraAdapter& lora, const torch::Tensor& a,
                               const torch::Tensor& u, bool fused, bool output_unread) {
  // The Linear's input itself, cat(a, gelu(u)), for the paths that need it materialised.
  auto linear_input = [&](bool fused_gelu) {
    const torch::Tensor g = gelu_tanh(u, fused_gelu);
    return a.defined() ? torch::cat({a, g}, -1) : g;
  };
  if (!fused) {
    const torch::Tensor h = linear_input(false);
    if (!output_unread) return lora_linear(base, lora, h);
    return with_lora(lora, linear_output_unread(h, base->weight, base->bias), h);
  }
  if (!lora) return gelu_linear(a, u, base->weight, base->bias, output_unread);
  if (lora->has_dropout()) {  // dropout needs the GELU's output itself
    const torch::Tensor out = gelu_linear(a, u, base->weight, base->bias, output_unread);
    return lora->add_up(out, lora->down(linear_input(true)));
  }
  // Base and adapters in one function: the GELU (and the concatenation) made, and remade in
  // backward, once.
  const auto [out, down] =
      gelu_linear_with_down(a, u, base->weight, base->bias, lora->down_weight(), output_unread);
  return lora->add_up(out, down);
}

AttentionImpl::AttentionImpl(const AttentionOptions& options) : options_(options) {
  const int64_t hidden = options.heads * options.head_dim;
  if (options.input_projection) to_qkv_ = register_module("to_qkv", torch::nn::Linear(hidden, 3 * hidden));
  if (options.qk_norm) {
    norm_q_ = register_module("norm_q", RmsNorm(options.head_dim, 1e-6));
    norm_k_ = register_module("norm_k", RmsNorm(options.head_dim, 1e-6));
  }
  if (options.added_stream) {
    add_qkv_ = register_module("add_qkv_proj", torch::nn::Linear(hidden, 3 * hidden));
    if (options.qk_norm) {
      norm_added_q_ = register_module("norm_added_q", RmsNorm(options.head_dim, 1e-6));
      norm_added_k_ = register_module("norm_added_k", RmsNorm(options.head_dim, 1e-6));
    }
  }
  if (options.output_projection) {
    auto to_out = register_module("to_out", torch::nn::ModuleList());
    to_out_ = torch::nn::Linear(hidden, hidden);
    to_out->push_back(to_out_);
    if (options.added_stream) to_add_out_ = register_module("to_add_out", torch::nn::Linear(hidden, hidden));
  }
}

std::vector<torch::Tensor> AttentionImpl::heads_and_norm(const torch::Tensor& qkv, RmsNorm& norm_q,
                                                         RmsNorm& norm_k, const RopeTable* rope,
                                                         int64_t rope_tokens) {
  // (B, N, 3*hidden) -> 3 x (B, heads, N, head_dim), permuted views of qkv
  return norm_heads(qkv_heads(qkv, options_.heads, options_.head_dim, options_.fused_kernels), norm_q, norm_k,
                    rope, rope_tokens);
}

std::vector<torch::Tensor> AttentionImpl::norm_heads(std::vector<torch::Tensor> parts, RmsNorm& norm_q,
                                                     RmsNorm& norm_k, const RopeTable* rope,
                                                     int64_t rope_tokens) {
  const bool fused = options_.fused_kernels;
  if (!options_.qk_norm) {
    TT_ASSERT(rope_tokens == 0, "RoPE is applied with QK-norm only");
    return parts;
  }
  return {rms_norm_rope(parts[0], norm_q->weight, rope, rope_tokens, norm_q->eps(), fused),
          rms_norm_rope(parts[1], norm_k->weight, rope, rope_tokens, norm_k->eps(), fused), parts[2]};
}

std::vector<torch::Tensor> AttentionImpl::project(const torch::Tensor& x, const RopeTable* rope,
                                                  int64_t rope_tokens) {
  return heads_and_norm(lora_linear(to_qkv_, lora_qkv, x), norm_q_, norm_k_, rope, rope_tokens);
}

std::vector<torch::Tensor> AttentionImpl::project_joint_modulated(
    const torch::Tensor& video, const torch::Tensor& shift, const torch::Tensor& scale,
    const torch::Tensor& text, const torch::Tensor& shift_added, const torch::Tensor& scale_added,
    const RopeTable* rope, int64_t rope_tokens) {
  TT_ASSERT(options_.added_stream && options_.qk_norm,
            "project_joint_modulated needs the text stream's projection and QK-norm (the double blocks')");
  const bool fused = options_.fused_kernels;
  const torch::Tensor video_qkv = modulated_linear(to_qkv_, lora_qkv, video, shift, scale, fused);
  const torch::Tensor text_qkv =
      modulated_linear(add_qkv_, lora_added_qkv, text, shift_added, scale_added, fused);
  // The four norms are made alike (eps 1e-6 in the constructor): one eps serves them.
  const JointQkvNorms norms{norm_q_->weight, norm_k_->weight, norm_added_q_->weight, norm_added_k_->weight,
                            norm_q_->eps()};
  return joint_qkv(video_qkv, text_qkv, norms, options_.heads, options_.head_dim, rope, rope_tokens, fused);
}

std::vector<torch::Tensor> AttentionImpl::split_single(const torch::Tensor& linear1_out,
                                                       const RopeTable* rope, int64_t rope_tokens) {
  TT_ASSERT(options_.qk_norm, "split_single needs QK-norm (the single blocks')");
  // norm_q and norm_k are made alike (eps 1e-6 in the constructor): one eps serves both.
  return single_qkv_mlp(linear1_out, norm_q_->weight, norm_k_->weight, norm_q_->eps(), options_.heads,
                        options_.head_dim, rope, rope_tokens, options_.fused_kernels);
}

torch::Tensor AttentionImpl::output(const torch::Tensor& x) {
  return lora_linear(to_out_, lora_out, x);
}
torch::Tensor AttentionImpl::output_added(const torch::Tensor& x) {
  return lora_linear(to_add_out_, lora_added_out, x);
}

torch::Tensor attend(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                     const torch::Tensor& key_mask) {
  std::optional<torch::Tensor> mask;
  if (key_mask.defined()) mask = key_mask;
  // SDPA, or inside a checkpointed block that keeps its attention, kept / replayed.
  auto out = kept_or_sdpa(q, k, v, mask);  // (B, H, N, D)
  return out.transpose(1, 2).flatten(2, 3);
}

}  // namespace tt
