// Autograd functions over the fused Transformer kernels and their dispatch (see fused_ops.h).
#include "model/fused_ops.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/autograd.h>
#include <torch/torch.h>

#include <array>
#include <tuple>
#include <vector>

#include "cuda/ops.h"
#include "model/layers.h"

namespace tt {

bool fused_kernels_take(const torch::Tensor& x) {
  return kernels_built() && x.is_cuda() &&
         (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32);
}

namespace {

bool same_kind(const torch::Tensor& a, const torch::Tensor& b) {
  return a.scalar_type() == b.scalar_type() && a.device() == b.device();
}

// A projection's (B, N, 3 heads head_dim) columns -> q, k, v (B, heads, N, head_dim), permuted views.
std::vector<torch::Tensor> head_views(const torch::Tensor& qkv, int64_t heads, int64_t head_dim) {
  return qkv.unflatten(2, {3, heads, head_dim}).permute({2, 0, 3, 1, 4}).unbind(0);
}

// x + gate * y; autograd's addcmul keeps the same y and gate, but its backward materialises g * y
// (B, N, C) before reducing it, which the kernel's backward does in one pass.
class GatedResidual : public torch::autograd::Function<GatedResidual> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& y, const torch::Tensor& gate) {
    // y serves the gate's gradient only: a frozen gate (a modulation without adapters under LoRA)
    // keeps none.
    const bool gate_grad = gate.requires_grad();
    ctx->save_for_backward({gate_grad ? y : torch::empty({0}, y.options()), gate});
    ctx->saved_data["gate_grad"] = gate_grad;
    return gated_residual_forward(x, y, gate);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor& grad = grads[0];        // (B, N, C), x's dtype
    if (!ctx->saved_data["gate_grad"].toBool())  // dy = grad * gate, one rounding as the kernel's
      return {grad, (grad * saved[1].unsqueeze(1)).to(grad.scalar_type()), torch::Tensor()};
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

// The first defined gradient of `grads`, or null.
const torch::Tensor* first_defined(const torch::autograd::tensor_list& grads) {
  for (const auto& g : grads)
    if (g.defined()) return &g;
  return nullptr;
}

// Writes the gradients of q, k, v (grads[0..2], (B, heads, N, head_dim); an undefined one as zeros)
// into `columns`, the (B, N, 3, heads, head_dim) view of a projection's gradient.
void write_head_grads(const torch::Tensor& columns, const torch::autograd::tensor_list& grads) {
  for (int64_t i = 0; i < 3; ++i) {
    auto part = columns.select(2, i).permute({0, 2, 1, 3});  // (B, heads, N, head_dim), as grads[i]
    if (grads[static_cast<size_t>(i)].defined()) {
      part.copy_(grads[static_cast<size_t>(i)]);
    } else {
      part.zero_();
    }
  }
}

// q, k, v as permuted views of the projection; backward writes their gradients into one buffer of
// the projection's layout.
class QkvHeads : public torch::autograd::Function<QkvHeads> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& qkv, int64_t heads, int64_t head_dim) {
    ctx->saved_data["sizes"] = qkv.sizes().vec();
    return head_views(qkv, heads, head_dim);
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();  // (B, N, 3 hidden)
    const torch::Tensor* any = first_defined(grads);
    if (any == nullptr) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    auto grad = torch::empty({sizes[0], sizes[1], 3, any->size(1), any->size(3)}, any->options());
    write_head_grads(grad, grads);
    return {grad.view(sizes), torch::Tensor(), torch::Tensor()};
  }
};

// Whether `grad` (the columns from `column` on) is that block of a row-major (B, N, width) buffer
// that no other tensor refers to (a view keeps its base, so a view never is): the buffer's other
// columns are then free to write.
bool sole_column_block(const torch::Tensor& grad, c10::IntArrayRef sizes, int64_t column) {
  const int64_t width = sizes[2];
  if (grad.dim() != 3 || grad.size(0) != sizes[0] || grad.size(1) != sizes[1] ||
      grad.size(2) != width - column || grad.stride(2) != 1 || grad.stride(1) != width ||
      grad.stride(0) != sizes[1] * width || grad.storage_offset() < column)
    return false;
  const int64_t end = grad.storage_offset() - column + sizes[0] * sizes[1] * width;
  return grad.storage().use_count() == 1 &&
         static_cast<int64_t>(grad.storage().nbytes()) >= end * static_cast<int64_t>(grad.element_size());
}

// The gradient of the single blocks' linear1 output (B, N, width): the buffer whose columns from
// qkv_width on the MLP's gradient already is (GeluLinear's backward writes it so on CUDA), or a
// new one with the MLP's gradient (zeros when undefined) copied in; q, k and v's columns left to
// the caller.
torch::Tensor linear1_grad(const torch::Tensor& grad_mlp, c10::IntArrayRef sizes, int64_t qkv_width,
                           const torch::TensorOptions& options) {
  if (grad_mlp.defined() && sole_column_block(grad_mlp, sizes, qkv_width)) {
    return torch::empty({0}, grad_mlp.options())
        .set_(grad_mlp.storage(), grad_mlp.storage_offset() - qkv_width, sizes,
              {sizes[1] * sizes[2], sizes[2], 1});
  }
  auto grad = torch::empty(sizes, options);
  auto mlp = grad.narrow(2, qkv_width, sizes[2] - qkv_width);
  if (grad_mlp.defined()) {
    mlp.copy_(grad_mlp);
  } else {
    mlp.zero_();
  }
  return grad;
}

// The single blocks' linear1 output as q, k, v (head views of its first columns) and the MLP's
// input (its other columns); backward writes q, k, v's gradients into the columns beside the MLP's
// (see qkv_mlp_split in fused_ops.h).
class QkvMlpSplit : public torch::autograd::Function<QkvMlpSplit> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                int64_t heads, int64_t head_dim) {
    const int64_t qkv_width = 3 * heads * head_dim;
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["head_dim"] = head_dim;
    auto parts = head_views(x.narrow(2, 0, qkv_width), heads, head_dim);
    parts.push_back(x.narrow(2, qkv_width, x.size(2) - qkv_width));
    return parts;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto sizes = ctx->saved_data["sizes"].toIntVector();  // (B, N, width)
    const int64_t heads = ctx->saved_data["heads"].toInt(), head_dim = ctx->saved_data["head_dim"].toInt();
    const int64_t qkv_width = 3 * heads * head_dim;
    const torch::Tensor* any = first_defined(grads);
    if (any == nullptr) return {torch::Tensor(), torch::Tensor(), torch::Tensor()};
    const torch::Tensor grad = linear1_grad(grads[3], sizes, qkv_width, any->options());
    write_head_grads(grad.narrow(2, 0, qkv_width).unflatten(2, {3, heads, head_dim}), grads);
    return {grad, torch::Tensor(), torch::Tensor()};
  }
};

// One stream's q, k, v gradients written into its projection's gradient: q's and k's through the
// QK-norm kernel's backward, whose dx lands in `columns` (head views of the gradient buffer), v's
// copied, a part that got no gradient zeroed. `inputs` are the same views of the projection,
// weights / rstds q's and k's norm weights and saved statistics. Returns q's and k's weight
// gradients (undefined where none came).
std::array<torch::Tensor, 2> qkv_norm_backward_into(const std::array<torch::Tensor, 3>& grads,
                                                    const std::vector<torch::Tensor>& inputs,
                                                    const std::vector<torch::Tensor>& columns,
                                                    const std::array<torch::Tensor, 2>& weights,
                                                    const std::array<torch::Tensor, 2>& rstds,
                                                    const torch::Tensor& rope, int64_t rope_tokens) {
  std::array<torch::Tensor, 2> dweights;
  for (size_t i = 0; i < 3; ++i) {
    if (!grads[i].defined()) {
      columns[i].zero_();
    } else if (i == 2) {
      columns[i].copy_(grads[i]);
    } else {
      [[maybe_unused]] const auto [dx, dweight] =
          rms_norm_rope_backward(grads[i], inputs[i], weights[i], rstds[i], rope, rope_tokens, columns[i]);
      dweights[i] = dweight;
    }
  }
  return dweights;
}

// Tokens [start, start + length) of a (B, H, tokens, D) gradient; undefined stays undefined.
torch::Tensor token_rows(const torch::Tensor& grad, int64_t start, int64_t length) {
  return grad.defined() ? grad.narrow(2, start, length) : torch::Tensor();
}

// The single blocks' linear1 output as q and k through QK-norm (RoPE on the first rope_tokens
// tokens), written by the kernel into token-major buffers, and v and the MLP's input as views of it
// (QkvMlpSplit, then two RmsNormRope). Backward writes q and k's input gradients straight into the
// columns of the one (B, N, width) gradient buffer (no copies), v's copied in beside the MLP's.
// Keeps linear1's output (which the MLP's input, a view of it, keeps anyway), the weights and the
// two rstd (B, H, N) fp32.
class SingleQkvMlp : public torch::autograd::Function<SingleQkvMlp> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& weight_q, const torch::Tensor& weight_k,
                                                const torch::Tensor& rope, int64_t heads, int64_t head_dim,
                                                int64_t rope_tokens, double eps) {
    ctx->set_materialize_grads(false);  // an output outside the loss: no gradient, not zeros
    const int64_t qkv_width = 3 * heads * head_dim;
    const auto parts = head_views(x.narrow(2, 0, qkv_width), heads, head_dim);
    const auto [q, rstd_q] = rms_norm_rope_forward(parts[0], weight_q, rope, rope_tokens, eps);
    const auto [k, rstd_k] = rms_norm_rope_forward(parts[1], weight_k, rope, rope_tokens, eps);
    ctx->save_for_backward({x, weight_q, weight_k, rstd_q, rstd_k, rope});
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["head_dim"] = head_dim;
    ctx->saved_data["rope_tokens"] = rope_tokens;
    return {q, k, parts[2], x.narrow(2, qkv_width, x.size(2) - qkv_width)};
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &rope = saved[5];
    const int64_t heads = ctx->saved_data["heads"].toInt(), head_dim = ctx->saved_data["head_dim"].toInt();
    const int64_t rope_tokens = ctx->saved_data["rope_tokens"].toInt();
    const int64_t qkv_width = 3 * heads * head_dim;
    torch::autograd::tensor_list out(8);
    const torch::Tensor* any = first_defined(grads);
    if (any == nullptr) return out;
    const torch::Tensor grad = linear1_grad(grads[3], x.sizes(), qkv_width, any->options());
    const auto dweights = qkv_norm_backward_into(
        {grads[0], grads[1], grads[2]}, head_views(x.narrow(2, 0, qkv_width), heads, head_dim),
        head_views(grad.narrow(2, 0, qkv_width), heads, head_dim), {saved[1], saved[2]}, {saved[3], saved[4]},
        rope, rope_tokens);
    out[0] = grad;
    out[1] = dweights[0];
    out[2] = dweights[1];
    return out;
  }
};

// The double blocks' q, k, v of video and text in one sequence: both projections split into heads,
// QK-norm (each stream its own weights) and RoPE (the video tokens) written by the kernel straight
// into three joint buffers of N + L tokens, token-major, which attention reads; v copied in beside.
// Backward writes q and k's input gradients straight into each projection's gradient buffer and
// copies v's. Inputs: video qkv (B, N, 3C), text qkv (B, L, 3C), the four norm weights, the RoPE
// table (or an empty tensor when rope_tokens is 0); keeps the two projections, the weights and the
// four rstd (B, H, tokens) fp32, as four RmsNormRope calls would.
class JointQkv : public torch::autograd::Function<JointQkv> {
 public:
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx,
                                                const torch::Tensor& video, const torch::Tensor& text,
                                                const torch::Tensor& weight_q, const torch::Tensor& weight_k,
                                                const torch::Tensor& weight_added_q,
                                                const torch::Tensor& weight_added_k,
                                                const torch::Tensor& rope, int64_t heads, int64_t head_dim,
                                                int64_t rope_tokens, double eps) {
    ctx->set_materialize_grads(false);  // an output outside the loss: no gradient, not zeros
    const int64_t batch = video.size(0), n = video.size(1), l = text.size(1);
    const auto video_parts = head_views(video, heads, head_dim);
    const auto text_parts = head_views(text, heads, head_dim);
    torch::autograd::variable_list joint;
    for (int i = 0; i < 3; ++i)  // (B, N + L, H, D) in memory, seen as (B, H, N + L, D)
      joint.push_back(torch::empty({batch, n + l, heads, head_dim}, video.options()).permute({0, 2, 1, 3}));
    const torch::Tensor video_weights[2] = {weight_q, weight_k};
    const torch::Tensor text_weights[2] = {weight_added_q, weight_added_k};
    std::vector<torch::Tensor> saved = {video,          text,           weight_q, weight_k,
                                        weight_added_q, weight_added_k, rope};
    for (int i = 0; i < 2; ++i) {  // q, then k: the rstd of the video rows, then of the text rows
      const torch::Tensor video_rows = joint[i].narrow(2, 0, n), text_rows = joint[i].narrow(2, n, l);
      [[maybe_unused]] const auto [video_out, video_rstd] =
          rms_norm_rope_forward(video_parts[i], video_weights[i], rope, rope_tokens, eps, video_rows);
      [[maybe_unused]] const auto [text_out, text_rstd] =
          rms_norm_rope_forward(text_parts[i], text_weights[i], rope, 0, eps, text_rows);
      saved.push_back(video_rstd);
      saved.push_back(text_rstd);
    }
    joint[2].narrow(2, 0, n).copy_(video_parts[2]);
    joint[2].narrow(2, n, l).copy_(text_parts[2]);
    ctx->save_for_backward(saved);
    ctx->saved_data["heads"] = heads;
    ctx->saved_data["head_dim"] = head_dim;
    ctx->saved_data["rope_tokens"] = rope_tokens;
    return joint;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &video = saved[0], &text = saved[1], &rope = saved[6];
    const int64_t heads = ctx->saved_data["heads"].toInt(), head_dim = ctx->saved_data["head_dim"].toInt();
    const int64_t rope_tokens = ctx->saved_data["rope_tokens"].toInt();
    const int64_t n = video.size(1), l = text.size(1);
    const torch::Tensor* any = first_defined(grads);
    torch::autograd::tensor_list out(11);
    if (any == nullptr) return out;
    const torch::Tensor grad_video = torch::empty(video.sizes(), any->options());
    const torch::Tensor grad_text = torch::empty(text.sizes(), any->options());
    // saved: video, text, the video q, k weights, the text q, k weights, rope, then the rstd of video q,
    // text q, video k, text k.
    const auto video_dweights = qkv_norm_backward_into(
        {token_rows(grads[0], 0, n), token_rows(grads[1], 0, n), token_rows(grads[2], 0, n)},
        head_views(video, heads, head_dim), head_views(grad_video, heads, head_dim), {saved[2], saved[3]},
        {saved[7], saved[9]}, rope, rope_tokens);
    const auto text_dweights = qkv_norm_backward_into(
        {token_rows(grads[0], n, l), token_rows(grads[1], n, l), token_rows(grads[2], n, l)},
        head_views(text, heads, head_dim), head_views(grad_text, heads, head_dim), {saved[4], saved[5]},
        {saved[8], saved[10]}, rope, 0);
    out[2] = video_dweights[0];
    out[3] = video_dweights[1];
    out[4] = text_dweights[0];
    out[5] = text_dweights[1];
    out[0] = grad_video;
    out[1] = grad_text;
    return out;
  }
};

// The dtype a Linear runs in here: autocast's for the device when it is on, else the input's.
torch::ScalarType linear_dtype(const torch::Tensor& x) {
  const auto device = x.device().type();
  if (at::autocast::is_autocast_enabled(device)) return at::autocast::get_autocast_dtype(device);
  return x.scalar_type();
}

// A Linear's backward in `dtype` (autocast's, as its forward ran): the input's gradient (input's
// shape, `dtype`) and the weight's and bias's gradients in their own dtypes (undefined without bias).
struct LinearGrads {
  torch::Tensor input, weight, bias;
};

// `sizes` with the last dimension replaced: a Linear's output shape from its input's (or back).
std::vector<int64_t> with_last(c10::IntArrayRef sizes, int64_t last) {
  std::vector<int64_t> out = sizes.vec();
  out.back() = last;
  return out;
}
// The weight's gradient grad^T x in `out_dtype` (the master weight's): on CUDA a half-precision GEMM
// writes fp32 itself (no half-precision result and cast); `columns`, when defined, is the (out, in)
// block it is written into.
torch::Tensor weight_grad_mm(const torch::Tensor& grad, const torch::Tensor& x, torch::ScalarType out_dtype,
                             torch::Tensor columns = {}) {
  const bool widen = grad.is_cuda() && out_dtype == torch::kFloat32 &&
                     (grad.scalar_type() == torch::kBFloat16 || grad.scalar_type() == torch::kFloat16);
  if (!columns.defined()) {
    return widen ? at::mm(grad.t(), x, out_dtype) : grad.t().mm(x).to(out_dtype);
  }
  if (widen) {
    at::mm_out(columns, grad.t(), x, out_dtype);
  } else if (grad.scalar_type() == out_dtype) {
    at::mm_out(columns, grad.t(), x);
  } else {
    columns.copy_(grad.t().mm(x));
  }
  return columns;
}

// The weight's and bias's gradients (g.input left undefined) from the output's gradient as a (rows,
// out) matrix in `dtype`; the input as linear_backward's input_parts.
LinearGrads linear_weight_grads(const torch::Tensor& grad, const std::vector<torch::Tensor>& input_parts,
                                int64_t in, torch::ScalarType weight_dtype, const torch::Tensor& bias,
                                bool has_bias, torch::ScalarType dtype) {
  const int64_t out = grad.size(1);
  LinearGrads g;
  // On CUDA in half precision with fp32 master weights: one cuBLASLt GEMM per column block, the
  // first also summing the bias's gradient in its epilogue (no separate pass over grad).
  if (grad.is_cuda() && weight_dtype == torch::kFloat32 &&
      (!has_bias || bias.scalar_type() == torch::kFloat32)) {
    torch::Tensor weight_grad_all = torch::empty({out, in}, grad.options().dtype(torch::kFloat32));
    torch::Tensor bias_grad = has_bias ? torch::empty({out}, weight_grad_all.options()) : torch::Tensor();
    bool done = true;
    int64_t column = 0;
    for (const auto& part : input_parts) {
      const int64_t width = part.size(-1);
      done = done && weight_bias_grad(grad, part.to(dtype).reshape({-1, width}),
                                      weight_grad_all.narrow(1, column, width),
                                      column == 0 ? bias_grad : torch::Tensor());
      column += width;
    }
    if (done) {
      g.weight = std::move(weight_grad_all);
      g.bias = std::move(bias_grad);
      return g;
    }
  }
  if (input_parts.size() == 1) {
    g.weight = weight_grad_mm(grad, input_parts[0].to(dtype).reshape({-1, in}), weight_dtype);
  } else {
    g.weight = torch::empty({out, in}, grad.options().dtype(weight_dtype));
    int64_t column = 0;
    for (const auto& part : input_parts) {
      const int64_t width = part.size(-1);
      weight_grad_mm(grad, part.to(dtype).reshape({-1, width}), weight_dtype,
                     g.weight.narrow(1, column, width));
      column += width;
    }
    TT_ASSERT(column == in, "linear_backward: input parts of ", column, " columns for an input of ", in);
  }
  // Summed in fp32 and written in the bias's dtype by one kernel.
  if (has_bias) g.bias = grad.sum(0, /*keepdim=*/false, bias.scalar_type());
  return g;
}

// A Linear's backward: the input's gradient, and the weight's and bias's unless weight_grad is false
// (the weight and bias are frozen, a LoRA run's base: their GEMM is skipped and the input is not
// read; undefined is fine, its shape is `input_sizes`). input_parts: the input as column blocks side
// by side (their last sizes add up to the input's): the weight's gradient is one GEMM per block into
// its columns, and the concatenated input is never made. weight: the master weight or its copy in
// `dtype` kept from forward; weight_dtype: the master's, the dtype of its gradient.
LinearGrads linear_backward(const torch::Tensor& grad_out, c10::IntArrayRef input_sizes,
                            const std::vector<torch::Tensor>& input_parts, const torch::Tensor& weight,
                            torch::ScalarType weight_dtype, const torch::Tensor& bias, bool has_bias,
                            torch::ScalarType dtype, bool weight_grad) {
  const torch::Tensor grad = grad_out.to(dtype).reshape({-1, weight.size(0)});
  const torch::Tensor input = grad.mm(weight.to(dtype)).view(input_sizes);
  if (!weight_grad) return {input, {}, {}};
  LinearGrads g =
      linear_weight_grads(grad, input_parts, input_sizes.back(), weight_dtype, bias, has_bias, dtype);
  g.input = input;
  return g;
}
LinearGrads linear_backward(const torch::Tensor& grad_out, c10::IntArrayRef input_sizes,
                            const torch::Tensor& input, const torch::Tensor& weight,
                            torch::ScalarType weight_dtype, const torch::Tensor& bias, bool has_bias,
                            torch::ScalarType dtype, bool weight_grad) {
  return linear_backward(grad_out, input_sizes, std::vector<torch::Tensor>{input}, weight, weight_dtype, bias,
                         has_bias, dtype, weight_grad);
}

// The backward of a Linear (weight, bias) and, beside it on the same input, the adapters' stacked A
// (`down`, no bias; grad_down undefined without one): the adapters' part first, then the base's; the
// input (moved in) is let go as soon as both have used it and the two input gradients are summed in
// place, so the input, its two gradients and their sum are never all alive (the peak of a LoRA
// step's backward, with checkpointing).
struct BaseAndDownGrads {
  LinearGrads base;  // base.input: the input's gradient, both parts summed
  torch::Tensor down;
};
BaseAndDownGrads base_and_down_backward(const torch::Tensor& grad_base, const torch::Tensor& grad_down,
                                        c10::IntArrayRef input_sizes, torch::Tensor input,
                                        const torch::Tensor& weight, torch::ScalarType weight_dtype,
                                        const torch::Tensor& bias, bool has_bias, const torch::Tensor& down,
                                        torch::ScalarType dtype, bool weight_grad, bool down_weight_grad) {
  BaseAndDownGrads out;
  torch::Tensor input_grad_down;
  if (grad_down.defined()) {
    LinearGrads d = linear_backward(grad_down, input_sizes, input, down, down.scalar_type(), {}, false, dtype,
                                    down_weight_grad);
    out.down = std::move(d.weight);
    input_grad_down = std::move(d.input);
  }
  out.base = linear_backward(grad_base, input_sizes, input, weight, weight_dtype, bias, has_bias, dtype,
                             weight_grad);
  input = torch::Tensor();
  if (input_grad_down.defined()) out.base.input.add_(input_grad_down);
  return out;
}

// GELU-tanh forward and backward: the CUDA kernel where it takes u, else ATen's (bit for bit the
// unfused model's on the CPU).
torch::Tensor gelu_of(const torch::Tensor& u) {
  return fused_kernels_take(u) ? gelu_tanh_forward(u) : torch::gelu(u, "tanh");
}
// u's gradient. The kernel reads a column slice of a wider gradient in place (ATen's gets it dense,
// as before); where u is a column block of a wider row-major tensor (the single blocks' MLP input,
// beside q, k, v in linear1's output), the gradient is written into the same columns of a buffer of
// that width, which qkv_mlp_split's backward completes in place instead of concatenating.
// With `value`, also the GELU of u (the kernel's from the same read of u; ATen's, as gelu_of).
std::pair<torch::Tensor, torch::Tensor> gelu_grad(const torch::Tensor& grad, const torch::Tensor& u,
                                                  bool value = false) {
  if (!fused_kernels_take(u))
    return {at::gelu_backward(grad.contiguous(), u, "tanh"), value ? gelu_of(u) : torch::Tensor()};
  torch::Tensor out;
  if (u.dim() == 3 && u.stride(2) == 1 && u.stride(1) > u.size(2) && u.stride(0) == u.size(1) * u.stride(1)) {
    const int64_t width = u.stride(1), column = u.storage_offset() % width;
    // Set onto the buffer's storage, not a view of it: the block is then the storage's only holder
    // (a view would keep its base), which is how qkv_mlp_split knows the other columns are free.
    if (column + u.size(2) <= width) {
      const torch::Tensor buffer = torch::empty({u.size(0), u.size(1), width}, u.options());
      out = torch::empty({0}, u.options()).set_(buffer.storage(), column, u.sizes(), u.strides());
    }
  }
  if (value) return gelu_tanh_backward_and_value(grad, u, out);
  return {gelu_tanh_backward(grad, u, out), torch::Tensor()};
}

// The GELU of u, and beside it `a` when there is one (both in their promoted dtype).
torch::Tensor gelu_input(const torch::Tensor& a, const torch::Tensor& u, bool has_a) {
  torch::Tensor h = gelu_of(u);
  if (!has_a) return h;
  const auto common = at::result_type(a, h);
  return torch::cat({a.to(common), h.to(common)}, -1);
}

// The weight in the GEMMs' dtype for forward (undefined when forward runs no GEMM with it).
torch::Tensor weight_in(const torch::Tensor& weight, torch::ScalarType dtype, bool needed) {
  return needed ? weight.to(dtype) : torch::Tensor();
}
// What backward gets of the weight: the forward's cast copy for a trained weight (its backward GEMM
// reuses it instead of casting the master again; autocast keeps the same copy for a plain Linear),
// the weight itself for a frozen one (a LoRA run's base: no copy of a whole frozen model is held
// through the step) or where forward made none.
torch::Tensor weight_for_backward(const torch::Tensor& weight, const torch::Tensor& cast) {
  return weight.requires_grad() && cast.defined() ? cast : weight;
}

// linear(cat(a, gelu(u))) keeping a and u only (see gelu_linear in fused_ops.h).
class GeluLinear : public torch::autograd::Function<GeluLinear> {
 public:
  // a: an empty tensor when there is none; bias: an empty tensor when there is none (autograd
  // functions take no undefined inputs). down (has_down): a second, bias-free weight on the same
  // input (the LoRA adapters' stacked A), a second output; the input is made and remade once for
  // both. compute_output false: the first result's values are never read (see
  // linear_output_unread): its GEMM is skipped (and the GELU, without `down`); the backward is
  // the same.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& a,
                                                const torch::Tensor& u, const torch::Tensor& weight,
                                                const torch::Tensor& bias, const torch::Tensor& down,
                                                bool has_a, bool has_bias, bool has_down,
                                                bool compute_output) {
    const torch::ScalarType dtype = linear_dtype(u);
    // The casts below are the ones autocast would make; it must not make them again.
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    torch::autograd::variable_list outputs;
    const torch::Tensor h = compute_output || has_down ? gelu_input(a, u, has_a).to(dtype) : torch::Tensor();
    const torch::Tensor weight_cast = weight_in(weight, dtype, compute_output);
    if (compute_output) {
      outputs.push_back(torch::linear(h, weight_cast, has_bias ? bias.to(dtype) : torch::Tensor()));
    } else {
      outputs.push_back(torch::empty(with_last(u.sizes(), weight.size(0)), u.options().dtype(dtype)));
    }
    if (has_down) outputs.push_back(torch::linear(h, down.to(dtype)));
    ctx->save_for_backward({a, u, weight_for_backward(weight, weight_cast), bias, down});
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["has_a"] = has_a;
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["has_down"] = has_down;
    return outputs;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &a = saved[0], &u = saved[1], &weight = saved[2], &bias = saved[3], &down = saved[4];
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto weight_dtype = static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const bool has_a = ctx->saved_data["has_a"].toBool(), has_bias = ctx->saved_data["has_bias"].toBool();
    const bool has_down = ctx->saved_data["has_down"].toBool();
    // The linear's input again only for a weight's gradient (a frozen base needs none), once.
    const bool weight_grad = ctx->needs_input_grad(2);
    const bool down_grad = has_down && ctx->needs_input_grad(4) && grads[1].defined();
    const std::vector<int64_t> h_sizes = with_last(u.sizes(), weight.size(1));
    // Without adapters: the input's gradient first, then one kernel gives u's gradient and the GELU
    // again (one read of u), and `a` and the GELU serve the weight's gradient as column blocks (one
    // GEMM each): the concatenation is not made again.
    if (!has_down) {
      const torch::Tensor grad = grads[0].to(dtype).reshape({-1, weight.size(0)});
      const torch::Tensor grad_h = grad.mm(weight.to(dtype)).view(h_sizes);
      torch::Tensor grad_a, grad_mlp = grad_h;
      if (has_a) {
        grad_a = grad_h.slice(-1, 0, a.size(-1)).to(a.scalar_type());
        grad_mlp = grad_h.slice(-1, a.size(-1));
      }
      auto [grad_u, gelu_u] = gelu_grad(grad_mlp.to(u.scalar_type()), u, weight_grad);
      LinearGrads w;
      if (weight_grad) {
        std::vector<torch::Tensor> parts;
        if (has_a) parts.push_back(a.to(dtype));
        parts.push_back(gelu_u.to(dtype));
        w = linear_weight_grads(grad, parts, weight.size(1), weight_dtype, bias, has_bias, dtype);
      }
      return {grad_a,          grad_u,          w.weight,        w.bias,         torch::Tensor(),
              torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
    }
    // With adapters: the concatenated input once for both weights' gradients.
    torch::Tensor h = weight_grad || down_grad ? gelu_input(a, u, has_a) : torch::Tensor();
    BaseAndDownGrads g =
        base_and_down_backward(grads[0], grads[1], h_sizes, std::move(h), weight, weight_dtype, bias,
                               has_bias, down, dtype, weight_grad, down_grad);
    const torch::Tensor grad_h = std::move(g.base.input);
    torch::Tensor grad_a, grad_mlp = grad_h;
    if (has_a) {
      const int64_t a_width = a.size(-1);
      grad_a = grad_h.slice(-1, 0, a_width).to(a.scalar_type());
      grad_mlp = grad_h.slice(-1, a_width);
    }
    const torch::Tensor grad_u = gelu_grad(grad_mlp.to(u.scalar_type()), u).first;
    return {grad_a,          grad_u,          g.base.weight,   g.base.bias,    g.down,
            torch::Tensor(), torch::Tensor(), torch::Tensor(), torch::Tensor()};
  }
};

// A Linear whose result nobody reads (see linear_output_unread in fused_ops.h): no GEMM in forward,
// the input's gradient (and the weight's and bias's where they need one) in backward.
class UnreadLinear : public torch::autograd::Function<UnreadLinear> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& weight, const torch::Tensor& bias, bool has_bias) {
    const torch::ScalarType dtype = linear_dtype(x);
    const bool weight_grad = weight.requires_grad() || (has_bias && bias.requires_grad());
    // The input only for the weight's gradient; otherwise its shape is all the backward needs.
    ctx->save_for_backward({weight_grad ? x : torch::empty({0}, x.options()), weight, bias});
    ctx->saved_data["sizes"] = x.sizes().vec();
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["weight_grad"] = weight_grad;
    return torch::empty(with_last(x.sizes(), weight.size(0)), x.options().dtype(dtype));
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const torch::Tensor &x = saved[0], &weight = saved[1], &bias = saved[2];
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const bool has_bias = ctx->saved_data["has_bias"].toBool();
    const std::vector<int64_t> sizes = ctx->saved_data["sizes"].toIntVector();
    const LinearGrads g = linear_backward(grads[0], sizes, x, weight, weight.scalar_type(), bias, has_bias,
                                          dtype, ctx->saved_data["weight_grad"].toBool());
    return {g.input, g.weight, g.bias, torch::Tensor()};
  }
};

// LayerNorm (no affine, eps 1e-6, statistics in fp32, output in x's dtype) then shift + x̂ (1 + scale),
// as norm_modulate (model/layers.cpp); also the statistics.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor, torch::Tensor> modulated(const torch::Tensor& x,
                                                                                 const torch::Tensor& shift,
                                                                                 const torch::Tensor& scale) {
  auto [normed, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, {}, {}, 1e-6);
  torch::Tensor m = torch::addcmul(shift.unsqueeze(1), normed, 1 + scale.unsqueeze(1));
  return {m, normed, mean, rstd};
}

// Whether the adaLN kernel (cuda/layer_norm_modulate.cu) takes x, shift and scale: CUDA, one kernel
// dtype, (B, N, C) with C within its limit. Its results are the composition's up to rounding.
bool modulate_kernel_takes(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale) {
  return fused_kernels_take(x) && same_kind(x, shift) && same_kind(x, scale) && x.dim() == 3 &&
         x.size(2) <= 3072;
}

// The modulated input and LayerNorm's statistics: the kernel's when `kernel`, else the composition's.
std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> modulated_input(const torch::Tensor& x,
                                                                        const torch::Tensor& shift,
                                                                        const torch::Tensor& scale,
                                                                        bool kernel) {
  if (kernel) return layer_norm_modulate_forward(x, shift, scale, 1e-6);
  auto [m, normed, mean, rstd] = modulated(x, shift, scale);
  return {m, mean, rstd};
}

// linear(norm_modulate(x, shift, scale)) keeping x, shift, scale (see modulate_linear in fused_ops.h).
class ModulateLinear : public torch::autograd::Function<ModulateLinear> {
 public:
  // down (has_down): a second, bias-free weight on the same modulated input (the LoRA adapters'
  // stacked A), a second output; the input is made and remade once for both.
  static torch::autograd::variable_list forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                                                const torch::Tensor& shift, const torch::Tensor& scale,
                                                const torch::Tensor& weight, const torch::Tensor& bias,
                                                const torch::Tensor& down, bool has_bias, bool has_down) {
    const torch::ScalarType dtype = linear_dtype(x);
    c10::impl::ExcludeDispatchKeyGuard no_autocast(c10::autocast_dispatch_keyset);
    const bool kernel = modulate_kernel_takes(x, shift, scale);
    const auto [m, mean, rstd] = modulated_input(x, shift, scale, kernel);
    const torch::Tensor md = m.to(dtype);
    const torch::Tensor weight_cast = weight_in(weight, dtype, true);
    torch::autograd::variable_list outputs = {
        torch::linear(md, weight_cast, has_bias ? bias.to(dtype) : torch::Tensor())};
    if (has_down) outputs.push_back(torch::linear(md, down.to(dtype)));
    // The statistics too (B, N, 1 fp32 each): x's gradient needs no recomputation then.
    ctx->save_for_backward(
        {x, shift, scale, weight_for_backward(weight, weight_cast), bias, down, mean, rstd});
    ctx->saved_data["weight_dtype"] = static_cast<int64_t>(weight.scalar_type());
    ctx->saved_data["m_dtype"] = static_cast<int64_t>(m.scalar_type());
    ctx->saved_data["dtype"] = static_cast<int64_t>(dtype);
    ctx->saved_data["has_bias"] = has_bias;
    ctx->saved_data["has_down"] = has_down;
    ctx->saved_data["kernel"] = kernel;
    return outputs;
  }

  static torch::autograd::tensor_list backward(torch::autograd::AutogradContext* ctx,
                                               torch::autograd::tensor_list grads) {
    const auto saved = ctx->get_saved_variables();
    const bool kernel = ctx->saved_data["kernel"].toBool();
    const torch::Tensor &x = saved[0], &shift = saved[1], &scale = saved[2], &weight = saved[3],
                        &bias = saved[4], &down = saved[5], &mean = saved[6], &rstd = saved[7];
    const auto dtype = static_cast<torch::ScalarType>(ctx->saved_data["dtype"].toInt());
    const auto weight_dtype = static_cast<torch::ScalarType>(ctx->saved_data["weight_dtype"].toInt());
    const bool has_bias = ctx->saved_data["has_bias"].toBool(),
               has_down = ctx->saved_data["has_down"].toBool();
    // The modulated input only for a weight's gradient, x̂ only for the scale's (both recomputed,
    // once, with the forward's kernels); a frozen base under LoRA with a frozen modulation and no
    // adapter needs neither.
    const bool weight_grad = ctx->needs_input_grad(3);
    const bool down_grad = has_down && ctx->needs_input_grad(5) && grads[1].defined();
    // With the adaLN kernel, x̂ is the backward kernel's own business.
    torch::Tensor m, normed;
    if (kernel) {
      if (weight_grad || down_grad) m = std::get<0>(layer_norm_modulate_forward(x, shift, scale, 1e-6));
    } else if (weight_grad || down_grad || ctx->needs_input_grad(2)) {
      std::tie(m, normed, std::ignore, std::ignore) = modulated(x, shift, scale);
    }
    const torch::Tensor grad_down = has_down ? grads[1] : torch::Tensor();
    BaseAndDownGrads g =
        base_and_down_backward(grads[0], grad_down, x.sizes(), std::move(m), weight, weight_dtype, bias,
                               has_bias, down, dtype, weight_grad, down_grad);
    const torch::Tensor grad_m_dtype = std::move(g.base.input);
    const torch::Tensor grad_m =
        grad_m_dtype.to(static_cast<torch::ScalarType>(ctx->saved_data["m_dtype"].toInt()));
    // norm_modulate's backward (model/layers.cpp).
    torch::Tensor grad_shift, grad_scale, grad_x;
    if (kernel && (ctx->needs_input_grad(0) || ctx->needs_input_grad(1) || ctx->needs_input_grad(2))) {
      auto [dx, dshift, dscale] = layer_norm_modulate_backward(grad_m, x, scale, mean, rstd);
      if (ctx->needs_input_grad(0)) grad_x = std::move(dx);
      if (ctx->needs_input_grad(1)) grad_shift = std::move(dshift);
      if (ctx->needs_input_grad(2)) grad_scale = std::move(dscale);
      return {grad_x,      grad_shift, grad_scale,      g.base.weight,
              g.base.bias, g.down,     torch::Tensor(), torch::Tensor()};
    }
    if (ctx->needs_input_grad(1)) grad_shift = grad_m.sum(1).to(shift.scalar_type());
    if (ctx->needs_input_grad(2)) grad_scale = (grad_m * normed).sum(1).to(scale.scalar_type());
    if (ctx->needs_input_grad(0)) {
      const torch::Tensor grad_normed = (grad_m * (1 + scale.unsqueeze(1))).to(x.scalar_type());
      grad_x = std::get<0>(at::native_layer_norm_backward(grad_normed, x, {x.size(-1)}, mean, rstd, {}, {},
                                                          {true, false, false}));
    }
    return {grad_x,      grad_shift, grad_scale,      g.base.weight,
            g.base.bias, g.down,     torch::Tensor(), torch::Tensor()};
  }
};

// The single blocks' linear1 output must be (B, N, 3 x heads x head_dim + mlp width).
void check_linear1_out(const torch::Tensor& x, int64_t heads, int64_t head_dim, const char* what) {
  TT_ASSERT(x.dim() == 3 && x.size(2) > 3 * heads * head_dim, what, ": linear1's output ", x.sizes(),
            " is not (B, N, 3 x ", heads, " x ", head_dim, " + mlp)");
}

// RoPE on the first rope_tokens of `tokens` tokens: a table of exactly that many (none for 0).
void check_rope_rows(int64_t tokens, const RopeTable* rope, int64_t rope_tokens) {
  TORCH_CHECK(rope_tokens >= 0 && rope_tokens <= tokens, "rms_norm_rope: rope_tokens must be in [0, ", tokens,
              "], got ", rope_tokens);
  if (rope_tokens == 0) return;
  TORCH_CHECK(rope != nullptr && rope->freqs.size(0) == rope_tokens,
              "rms_norm_rope: expected a RoPE table of ", rope_tokens, " tokens, got ",
              rope == nullptr ? int64_t{0} : rope->freqs.size(0));
}

// The kernels' RoPE table, (N, D/2, 2) fp32 (cos, sin); without RoPE an empty tensor on `like`'s
// device (autograd functions take no undefined inputs).
torch::Tensor rope_table(const RopeTable* rope, int64_t rope_tokens, const torch::Tensor& like) {
  return rope_tokens > 0 ? torch::view_as_real(rope->freqs)
                         : torch::empty({0}, like.options().dtype(torch::kFloat32));
}

// Whether the QK RMSNorm + RoPE kernels take x (CUDA, a kernel dtype) with this head dim.
bool norm_rope_kernel_takes(const torch::Tensor& x, int64_t head_dim) {
  return fused_kernels_take(x) && head_dim % 2 == 0 && head_dim <= 256;
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
  check_rope_rows(x.size(2), rope, rope_tokens);
  return RmsNormRope::apply(x, weight, rope_table(rope, rope_tokens, x), rope_tokens, eps);
}

torch::Tensor rms_norm_rope_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                      const RopeTable* rope, int64_t rope_tokens, double eps) {
  check_rope_rows(x.size(2), rope, rope_tokens);
  auto normed = rms_norm(x, weight, eps);
  if (rope_tokens == 0) return normed;
  if (rope_tokens == x.size(2)) return apply_rope(normed, *rope);
  const auto [video, text] = split_at(normed, 2, rope_tokens);
  return torch::cat({apply_rope(video, *rope), text}, 2);
}

torch::Tensor rms_norm_rope(const torch::Tensor& x, const torch::Tensor& weight, const RopeTable* rope,
                            int64_t rope_tokens, double eps, bool fused) {
  if (fused && norm_rope_kernel_takes(x, x.size(-1))) {
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

namespace {

// GeluLinear / ModulateLinear with their optional tensors (a, bias, down) undefined where absent:
// autograd functions take no undefined inputs, so those go in as empty tensors with a flag.
torch::autograd::variable_list apply_gelu_linear(const torch::Tensor& a, const torch::Tensor& u,
                                                 const torch::Tensor& weight, const torch::Tensor& bias,
                                                 const torch::Tensor& down, bool output_unread) {
  const torch::Tensor none = torch::empty({0}, u.options());
  return GeluLinear::apply(a.defined() ? a : none, u, weight, bias.defined() ? bias : none,
                           down.defined() ? down : none, a.defined(), bias.defined(), down.defined(),
                           !output_unread);
}

torch::autograd::variable_list apply_modulate_linear(const torch::Tensor& x, const torch::Tensor& shift,
                                                     const torch::Tensor& scale, const torch::Tensor& weight,
                                                     const torch::Tensor& bias, const torch::Tensor& down) {
  const torch::Tensor none = torch::empty({0}, x.options());
  return ModulateLinear::apply(x, shift, scale, weight, bias.defined() ? bias : none,
                               down.defined() ? down : none, bias.defined(), down.defined());
}

}  // namespace

torch::Tensor gelu_linear(const torch::Tensor& a, const torch::Tensor& u, const torch::Tensor& weight,
                          const torch::Tensor& bias, bool output_unread) {
  return apply_gelu_linear(a, u, weight, bias, {}, output_unread)[0];
}

std::pair<torch::Tensor, torch::Tensor> gelu_linear_with_down(const torch::Tensor& a, const torch::Tensor& u,
                                                              const torch::Tensor& weight,
                                                              const torch::Tensor& bias,
                                                              const torch::Tensor& down, bool output_unread) {
  const auto outputs = apply_gelu_linear(a, u, weight, bias, down, output_unread);
  return {outputs[0], outputs[1]};
}
torch::Tensor linear_output_unread(const torch::Tensor& x, const torch::Tensor& weight,
                                   const torch::Tensor& bias) {
  return UnreadLinear::apply(x, weight, bias.defined() ? bias : torch::empty({0}, x.options()),
                             bias.defined());
}

torch::Tensor gelu_linear_reference(const torch::Tensor& a, const torch::Tensor& u,
                                    const torch::Tensor& weight, const torch::Tensor& bias) {
  torch::Tensor h = gelu_tanh_reference(u);
  if (a.defined()) h = torch::cat({a, h}, -1);
  return torch::linear(h, weight, bias);
}

torch::Tensor modulate_linear(const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
                              const torch::Tensor& weight, const torch::Tensor& bias) {
  return apply_modulate_linear(x, shift, scale, weight, bias, {})[0];
}

std::pair<torch::Tensor, torch::Tensor> modulate_linear_with_down(
    const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale,
    const torch::Tensor& weight, const torch::Tensor& bias, const torch::Tensor& down) {
  const auto outputs = apply_modulate_linear(x, shift, scale, weight, bias, down);
  return {outputs[0], outputs[1]};
}
std::vector<torch::Tensor> qkv_heads(const torch::Tensor& qkv, int64_t heads, int64_t head_dim, bool fused) {
  TT_ASSERT(qkv.dim() == 3 && qkv.size(2) == 3 * heads * head_dim, "qkv_heads: qkv ", qkv.sizes(),
            " is not (B, N, 3 x ", heads, " x ", head_dim, ")");
  if (fused) return QkvHeads::apply(qkv, heads, head_dim);
  return head_views(qkv, heads, head_dim);
}

std::vector<torch::Tensor> qkv_mlp_split(const torch::Tensor& x, int64_t heads, int64_t head_dim,
                                         bool fused) {
  check_linear1_out(x, heads, head_dim, "qkv_mlp_split");
  const int64_t qkv_width = 3 * heads * head_dim;
  if (fused) return QkvMlpSplit::apply(x, heads, head_dim);
  const auto [qkv, mlp] = split_at(x, 2, qkv_width);
  auto parts = qkv_heads(qkv, heads, head_dim, false);
  parts.push_back(mlp);
  return parts;
}

std::vector<torch::Tensor> single_qkv_mlp_fused(const torch::Tensor& x, const torch::Tensor& weight_q,
                                                const torch::Tensor& weight_k, double eps, int64_t heads,
                                                int64_t head_dim, const RopeTable* rope,
                                                int64_t rope_tokens) {
  check_linear1_out(x, heads, head_dim, "single_qkv_mlp");
  check_rope_rows(x.size(1), rope, rope_tokens);
  return SingleQkvMlp::apply(x, weight_q, weight_k, rope_table(rope, rope_tokens, x), heads, head_dim,
                             rope_tokens, eps);
}

std::vector<torch::Tensor> single_qkv_mlp_reference(const torch::Tensor& x, const torch::Tensor& weight_q,
                                                    const torch::Tensor& weight_k, double eps, int64_t heads,
                                                    int64_t head_dim, const RopeTable* rope,
                                                    int64_t rope_tokens, bool fused) {
  auto parts = qkv_mlp_split(x, heads, head_dim, fused);
  parts[0] = rms_norm_rope(parts[0], weight_q, rope, rope_tokens, eps, fused);
  parts[1] = rms_norm_rope(parts[1], weight_k, rope, rope_tokens, eps, fused);
  return parts;
}

std::vector<torch::Tensor> single_qkv_mlp(const torch::Tensor& x, const torch::Tensor& weight_q,
                                          const torch::Tensor& weight_k, double eps, int64_t heads,
                                          int64_t head_dim, const RopeTable* rope, int64_t rope_tokens,
                                          bool fused) {
  if (fused && norm_rope_kernel_takes(x, head_dim)) {
    return single_qkv_mlp_fused(x, weight_q, weight_k, eps, heads, head_dim, rope, rope_tokens);
  }
  return single_qkv_mlp_reference(x, weight_q, weight_k, eps, heads, head_dim, rope, rope_tokens, fused);
}

std::vector<torch::Tensor> joint_qkv_fused(const torch::Tensor& video_qkv, const torch::Tensor& text_qkv,
                                           const JointQkvNorms& norms, int64_t heads, int64_t head_dim,
                                           const RopeTable* rope, int64_t rope_tokens) {
  TT_ASSERT(video_qkv.dim() == 3 && text_qkv.dim() == 3 && video_qkv.size(0) == text_qkv.size(0) &&
                video_qkv.size(2) == 3 * heads * head_dim && text_qkv.size(2) == video_qkv.size(2),
            "joint_qkv: video ", video_qkv.sizes(), " and text ", text_qkv.sizes(), " are not (B, N|L, 3 x ",
            heads, " x ", head_dim, ")");
  check_rope_rows(video_qkv.size(1), rope, rope_tokens);
  return JointQkv::apply(video_qkv, text_qkv, norms.q, norms.k, norms.added_q, norms.added_k,
                         rope_table(rope, rope_tokens, video_qkv), heads, head_dim, rope_tokens, norms.eps);
}

std::vector<torch::Tensor> joint_qkv_reference(const torch::Tensor& video_qkv, const torch::Tensor& text_qkv,
                                               const JointQkvNorms& norms, int64_t heads, int64_t head_dim,
                                               const RopeTable* rope, int64_t rope_tokens, bool fused) {
  const auto video = qkv_heads(video_qkv, heads, head_dim, fused);
  const auto text = qkv_heads(text_qkv, heads, head_dim, fused);
  const torch::Tensor video_q = rms_norm_rope(video[0], norms.q, rope, rope_tokens, norms.eps, fused);
  const torch::Tensor video_k = rms_norm_rope(video[1], norms.k, rope, rope_tokens, norms.eps, fused);
  const torch::Tensor text_q = rms_norm_rope(text[0], norms.added_q, nullptr, 0, norms.eps, fused);
  const torch::Tensor text_k = rms_norm_rope(text[1], norms.added_k, nullptr, 0, norms.eps, fused);
  return {torch::cat({video_q, text_q}, 2), torch::cat({video_k, text_k}, 2),
          torch::cat({video[2], text[2]}, 2)};
}

std::vector<torch::Tensor> joint_qkv(const torch::Tensor& video_qkv, const torch::Tensor& text_qkv,
                                     const JointQkvNorms& norms, int64_t heads, int64_t head_dim,
                                     const RopeTable* rope, int64_t rope_tokens, bool fused) {
  if (fused && norm_rope_kernel_takes(video_qkv, head_dim) && same_kind(video_qkv, text_qkv)) {
    return joint_qkv_fused(video_qkv, text_qkv, norms, heads, head_dim, rope, rope_tokens);
  }
  return joint_qkv_reference(video_qkv, text_qkv, norms, heads, head_dim, rope, rope_tokens, fused);
}

torch::Tensor gelu_tanh(const torch::Tensor& x, bool fused) {
  if (fused && fused_kernels_take(x)) return gelu_tanh_fused(x);
  return gelu_tanh_reference(x);
}

}  // namespace tt
