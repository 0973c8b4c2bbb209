// The fused Transformer ops (model/fused_ops.h): on the CPU, each autograd function's own backward
// (the kernels' CPU references) against autograd of the unfused composition in fp32 and bf16, and
// against central finite differences in fp64; the model's dispatch keeps CPU tensors on the
// composition bit for bit. [gpu]: the autograd functions on CUDA (the kernels) against autograd of
// the composition on CUDA, and the small model with fused_kernels on against off.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>

#include <algorithm>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "model/fused_ops.h"
#include "model/layers.h"
#include "model/rope.h"
#include "model/transformer.h"
#include "test/model/small_model.h"
#include "test/test_util.h"

namespace {

using Fn = std::function<torch::Tensor(const std::vector<torch::Tensor>&)>;

struct Result {
  torch::Tensor out;
  std::vector<torch::Tensor> grads;  // one per input
};

// f(inputs) and the gradients of sum(f * upstream) with respect to every input.
Result run(const Fn& f, const std::vector<torch::Tensor>& inputs0, const torch::Tensor& upstream) {
  std::vector<torch::Tensor> inputs;
  for (const auto& t : inputs0) inputs.push_back(t.detach().clone().requires_grad_(true));
  auto out = f(inputs);
  (out.to(upstream.scalar_type()) * upstream).sum().backward();
  Result r{out.detach(), {}};
  for (const auto& t : inputs) r.grads.push_back(t.grad());
  return r;
}

double max_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.cpu().to(torch::kFloat64) - b.cpu().to(torch::kFloat64)).abs().max().item<double>();
}

// |a - b| / (1 + max |b|): absolute for small values, relative to the tensor's scale for sums.
double scaled_error(const torch::Tensor& a, const torch::Tensor& b) {
  return max_error(a, b) / (1.0 + b.cpu().to(torch::kFloat64).abs().max().item<double>());
}

// Compares the fused function's output and every input gradient with the reference's.
void compare(const Fn& fused, const Fn& reference, const std::vector<torch::Tensor>& inputs,
             double tolerance) {
  auto upstream = torch::randn(reference(inputs).sizes(), inputs[0].options().dtype(torch::kFloat32));
  const Result ours = run(fused, inputs, upstream);
  const Result theirs = run(reference, inputs, upstream);
  CHECK(ours.out.scalar_type() == theirs.out.scalar_type());
  const double out_error = scaled_error(ours.out, theirs.out);
  INFO("output error " << out_error);
  CHECK(out_error <= tolerance);
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!theirs.grads[i].defined()) continue;
    REQUIRE(ours.grads[i].defined());
    CHECK(ours.grads[i].scalar_type() == theirs.grads[i].scalar_type());
    const double error = scaled_error(ours.grads[i], theirs.grads[i]);
    INFO("gradient of input " << i << ": error " << error);
    CHECK(error <= tolerance);
  }
}

// Central differences of sum(f * upstream) in fp64 against the autograd function's gradients;
// h = 1e-6 leaves truncation and rounding errors near 1e-9 for these O(1) functions.
void check_finite_differences(const Fn& f, const std::vector<torch::Tensor>& inputs) {
  auto upstream = torch::randn(f(inputs).sizes(), torch::kFloat64);
  const Result analytic = run(f, inputs, upstream);
  const double h = 1e-6;
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    std::vector<torch::Tensor> probe;
    for (const auto& t : inputs) probe.push_back(t.clone());
    auto flat = probe[i].view({-1});
    auto numeric = torch::zeros_like(flat);
    for (int64_t j = 0; j < flat.numel(); ++j) {
      const double saved = flat[j].item<double>();
      flat[j] = saved + h;
      const double plus = (f(probe) * upstream).sum().item<double>();
      flat[j] = saved - h;
      const double minus = (f(probe) * upstream).sum().item<double>();
      flat[j] = saved;
      numeric[j] = (plus - minus) / (2 * h);
    }
    const double error = max_error(analytic.grads[i].reshape({-1}), numeric);
    INFO("input " << i << ": max |analytic - finite difference| " << error);
    CHECK(error <= 1e-6);
  }
}

// Tolerances: fp32 1e-5 of the tensor's scale (reassociated fp32 sums); bf16 1/64 of it (a few bf16
// ulps: the composition rounds intermediates to bf16 where the fused path keeps fp32).
double tolerance_for(torch::Dtype dtype) {
  return dtype == torch::kBFloat16 ? 1.0 / 64 : 1e-5;
}

tt::RopeTable small_rope(int64_t tokens_per_axis, const torch::Device& device) {
  // (2, 2, tokens_per_axis) grid, RoPE dims (4, 6, 6) of head_dim 16, as small_model_config.
  return tt::build_rope_table(2, 2, tokens_per_axis, {4, 6, 6}, 256.0, device);
}

// q as the attention slices it from the fused projection: (B, N, 3 * H * D) -> (B, H, N, D) view.
torch::Tensor q_of(const torch::Tensor& qkv, int64_t heads, int64_t head_dim) {
  return qkv.unflatten(2, {3, heads, head_dim}).permute({2, 0, 3, 1, 4}).select(0, 0);
}

Fn gated_fused() {
  return [](const std::vector<torch::Tensor>& in) { return tt::gated_residual_fused(in[0], in[1], in[2]); };
}
Fn gated_reference() {
  return
      [](const std::vector<torch::Tensor>& in) { return tt::gated_residual_reference(in[0], in[1], in[2]); };
}
// The gate frozen (a modulation without adapters, as under LoRA): it gets no gradient and the
// fused function keeps no y.
Fn gated_fused_frozen_gate() {
  return [](const std::vector<torch::Tensor>& in) {
    return tt::gated_residual_fused(in[0], in[1], in[2].detach());
  };
}
Fn gated_reference_frozen_gate() {
  return [](const std::vector<torch::Tensor>& in) {
    return tt::gated_residual_reference(in[0], in[1], in[2].detach());
  };
}
Fn gelu_fused() {
  return [](const std::vector<torch::Tensor>& in) { return tt::gelu_tanh_fused(in[0]); };
}
Fn gelu_reference() {
  return [](const std::vector<torch::Tensor>& in) { return tt::gelu_tanh_reference(in[0]); };
}
// in[0]: qkv (B, N, 3 * H * D); in[1]: weight (D).
Fn norm_rope(bool fused, const tt::RopeTable* rope, int64_t rope_tokens, int64_t heads, int64_t head_dim) {
  return [=](const std::vector<torch::Tensor>& in) {
    auto q = q_of(in[0], heads, head_dim);
    return fused ? tt::rms_norm_rope_fused(q, in[1], rope, rope_tokens, 1e-6)
                 : tt::rms_norm_rope_reference(q, in[1], rope, rope_tokens, 1e-6);
  };
}

// joint_qkv through one path, with a loss that weighs the `used` first of q, k, v: the outputs and
// the gradients of video qkv, text qkv and the four norm weights (undefined where none flowed).
enum class JointPath { kFused, kKernelsComposed, kUnfused };
struct JointRun {
  std::vector<torch::Tensor> outputs, grads;
};
JointRun run_joint(JointPath path, const std::vector<torch::Tensor>& inputs, const tt::RopeTable* rope,
                   int64_t rope_tokens, int64_t heads, int64_t head_dim, int used,
                   const std::vector<torch::Tensor>& upstream) {
  std::vector<torch::Tensor> in;
  for (const auto& t : inputs) in.push_back(t.detach().clone().requires_grad_(true));
  const tt::JointQkvNorms norms{in[2], in[3], in[4], in[5], 1e-6};
  std::vector<torch::Tensor> outputs;
  if (path == JointPath::kFused) {
    outputs = tt::joint_qkv_fused(in[0], in[1], norms, heads, head_dim, rope, rope_tokens);
  } else if (path == JointPath::kUnfused) {
    outputs = tt::joint_qkv_reference(in[0], in[1], norms, heads, head_dim, rope, rope_tokens, false);
  } else {  // the kernels (on the CPU their references) per stream, then cat
    const auto video = tt::qkv_heads(in[0], heads, head_dim, true);
    const auto text = tt::qkv_heads(in[1], heads, head_dim, true);
    for (int i = 0; i < 2; ++i) {
      const auto v = tt::rms_norm_rope_fused(video[static_cast<size_t>(i)], in[static_cast<size_t>(2 + i)],
                                             rope, rope_tokens, 1e-6);
      const auto t = tt::rms_norm_rope_fused(text[static_cast<size_t>(i)], in[static_cast<size_t>(4 + i)],
                                             nullptr, 0, 1e-6);
      outputs.push_back(torch::cat({v, t}, 2));
    }
    outputs.push_back(torch::cat({video[2], text[2]}, 2));
  }
  torch::Tensor loss = torch::zeros({}, torch::kFloat32).to(inputs[0].device());
  for (int i = 0; i < used; ++i)
    loss =
        loss + (outputs[static_cast<size_t>(i)].to(torch::kFloat32) * upstream[static_cast<size_t>(i)]).sum();
  loss.backward();
  JointRun r;
  for (const auto& o : outputs) r.outputs.push_back(o.detach());
  for (const auto& t : in) r.grads.push_back(t.grad());
  return r;
}

// Inputs of joint_qkv: video qkv (2, video, 3 H D), text qkv (2, text, 3 H D), four weights (D) fp32.
std::vector<torch::Tensor> joint_inputs(int64_t video, int64_t text, int64_t heads, int64_t head_dim,
                                        torch::Dtype dtype, const torch::Device& device) {
  std::vector<torch::Tensor> in = {(torch::randn({2, video, 3 * heads * head_dim}) * 2 + 0.3).to(dtype),
                                   (torch::randn({2, text, 3 * heads * head_dim}) * 2 - 0.2).to(dtype)};
  for (int i = 0; i < 4; ++i) in.push_back(0.5 + torch::rand({head_dim}));
  for (auto& t : in) t = t.to(device);
  return in;
}

// The fused joint q, k, v against the same kernels composed (qkv_heads, rms_norm_rope, cat): equal
// bit for bit, outputs and every gradient; the outputs token-major (attention reads them so).
void check_joint_equal(const torch::Device& device) {
  const int64_t heads = 2, head_dim = 16;
  const tt::RopeTable rope = small_rope(3, device);  // 12 video tokens
  const int64_t video = rope.freqs.size(0), text = 5;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const int used : {3, 2, 1}) {
      INFO("dtype " << dtype << ", " << used << " of q, k, v in the loss");
      const auto inputs = joint_inputs(video, text, heads, head_dim, dtype, device);
      std::vector<torch::Tensor> upstream;
      for (int i = 0; i < 3; ++i)
        upstream.push_back(torch::randn({2, heads, video + text, head_dim}).to(device));
      const JointRun fused =
          run_joint(JointPath::kFused, inputs, &rope, video, heads, head_dim, used, upstream);
      const JointRun composed =
          run_joint(JointPath::kKernelsComposed, inputs, &rope, video, heads, head_dim, used, upstream);
      REQUIRE(fused.outputs.size() == 3);
      for (size_t i = 0; i < 3; ++i) {
        INFO("output " << i);
        CHECK(fused.outputs[i].sizes() == composed.outputs[i].sizes());
        CHECK(fused.outputs[i].stride(2) == heads * head_dim);  // token-major
        CHECK(fused.outputs[i].stride(3) == 1);
        CHECK(torch::equal(fused.outputs[i], composed.outputs[i]));
      }
      for (size_t i = 0; i < fused.grads.size(); ++i) {
        INFO("gradient of input " << i);
        REQUIRE(fused.grads[i].defined() == composed.grads[i].defined());
        if (composed.grads[i].defined()) CHECK(torch::equal(fused.grads[i], composed.grads[i]));
      }
      // The thirds of q, k, v that no loss term reads get zero gradients, the others do not.
      for (size_t stream = 0; stream < 2; ++stream) {
        const auto thirds = fused.grads[stream].view({2, -1, 3, heads * head_dim});
        for (int i = 0; i < 3; ++i)
          CHECK((thirds.select(2, i).abs().sum().item<double>() == 0.0) == (i >= used));
      }
    }
  }
}

// The single blocks' q, k, v and MLP input through single_qkv_mlp_fused against the same kernels
// composed (qkv_mlp_split and rms_norm_rope_fused): equal bit for bit, outputs
// and the gradients of linear1's output and both norm weights, with every part in the loss, only
// the MLP's input, or only q, k, v (a part outside the loss gives zeros in its columns).
void check_single_equal(const torch::Device& device) {
  const int64_t heads = 2, head_dim = 16, mlp = 40, width = 3 * heads * head_dim + mlp;
  const tt::RopeTable rope = small_rope(3, device);  // 12 video tokens
  const int64_t video = rope.freqs.size(0), tokens = video + 5;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    for (const auto& used : std::vector<std::vector<int>>{{0, 1, 2, 3}, {3}, {0, 1, 2}, {1}}) {
      INFO("dtype " << dtype << ", " << used.size() << " parts in the loss, the first " << used[0]);
      const auto x = ((torch::randn({2, tokens, width}) * 2 + 0.3).to(dtype)).to(device);
      const std::vector<torch::Tensor> weights = {(0.5 + torch::rand({head_dim})).to(device),
                                                  (0.5 + torch::rand({head_dim})).to(device)};
      std::vector<torch::Tensor> upstream;
      for (int i = 0; i < 3; ++i) upstream.push_back(torch::randn({2, heads, tokens, head_dim}).to(device));
      upstream.push_back(torch::randn({2, tokens, mlp}).to(device));
      auto run = [&](bool fused) {
        std::vector<torch::Tensor> in = {x.clone().requires_grad_(true),
                                         weights[0].clone().requires_grad_(true),
                                         weights[1].clone().requires_grad_(true)};
        std::vector<torch::Tensor> parts;
        if (fused) {
          parts = tt::single_qkv_mlp_fused(in[0], in[1], in[2], 1e-6, heads, head_dim, &rope, video);
        } else {  // the kernels (on the CPU their references) after the fused split
          parts = tt::qkv_mlp_split(in[0], heads, head_dim, true);
          for (size_t i = 0; i < 2; ++i)
            parts[i] = tt::rms_norm_rope_fused(parts[i], in[1 + i], &rope, video, 1e-6);
        }
        REQUIRE(parts.size() == 4);
        torch::Tensor loss = torch::zeros({}, torch::kFloat32).to(device);
        for (const int i : used) {
          const auto k = static_cast<size_t>(i);
          loss = loss + (parts[k].to(torch::kFloat32) * upstream[k]).sum();
        }
        loss.backward();
        std::vector<torch::Tensor> grads;
        for (const auto& t : in) grads.push_back(t.grad());
        return std::make_pair(parts, grads);
      };
      const auto [fused_parts, fused_grads] = run(true);
      const auto [composed_parts, composed_grads] = run(false);
      for (size_t i = 0; i < 4; ++i) {
        INFO("output " << i);
        CHECK(fused_parts[i].sizes() == composed_parts[i].sizes());
        CHECK(torch::equal(fused_parts[i], composed_parts[i]));
      }
      // v and the MLP's input stay views of linear1's output.
      CHECK(fused_parts[2].strides() == composed_parts[2].strides());
      CHECK(fused_parts[3].strides() == composed_parts[3].strides());
      for (size_t i = 0; i < 3; ++i) {
        INFO("gradient of input " << i);
        REQUIRE(fused_grads[i].defined() == composed_grads[i].defined());
        if (composed_grads[i].defined()) CHECK(torch::equal(fused_grads[i], composed_grads[i]));
      }
      REQUIRE(fused_grads[0].defined());
      const auto thirds =
          fused_grads[0].narrow(2, 0, 3 * heads * head_dim).view({2, tokens, 3, heads * head_dim});
      for (int i = 0; i < 3; ++i) {
        const bool in_loss = std::find(used.begin(), used.end(), i) != used.end();
        CHECK((thirds.select(2, i).abs().sum().item<double>() == 0.0) == !in_loss);
      }
    }
  }
}

}  // namespace

TEST_CASE("gated residual: own backward gives autograd's gradients of addcmul", "[model][fused]") {
  torch::manual_seed(21);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    const std::vector<torch::Tensor> inputs = {torch::randn({2, 9, 24}).to(dtype),
                                               torch::randn({2, 9, 24}).to(dtype),
                                               torch::randn({2, 24}).to(dtype)};
    compare(gated_fused(), gated_reference(), inputs, tolerance_for(dtype));
    compare(gated_fused_frozen_gate(), gated_reference_frozen_gate(), inputs, tolerance_for(dtype));
  }
  check_finite_differences(
      gated_fused(), {torch::randn({2, 3, 4}, torch::kFloat64), torch::randn({2, 3, 4}, torch::kFloat64),
                      torch::randn({2, 4}, torch::kFloat64)});
}

TEST_CASE("GELU-tanh: own backward gives autograd's gradients of torch::gelu", "[model][fused]") {
  torch::manual_seed(22);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    auto wide = (torch::randn({2, 5, 20}) * 3).to(dtype);
    compare(gelu_fused(), gelu_reference(), {wide}, tolerance_for(dtype));
    // A column slice, as the single blocks pass it.
    compare([](const std::vector<torch::Tensor>& in) { return tt::gelu_tanh_fused(in[0].slice(2, 7)); },
            [](const std::vector<torch::Tensor>& in) { return tt::gelu_tanh_reference(in[0].slice(2, 7)); },
            {wide}, tolerance_for(dtype));
  }
  check_finite_differences(gelu_fused(), {torch::randn({3, 5}, torch::kFloat64) * 2});
}

// in: [a (or nothing), u, weight, bias]: linear(cat(a, gelu(u))) through the function or autograd.
Fn gelu_linear_fn(bool ours, bool with_a, bool autocast) {
  return [=](const std::vector<torch::Tensor>& in) {
    const torch::Tensor a = with_a ? in[0] : torch::Tensor();
    const size_t first = with_a ? 1 : 0;
    tt::AutocastScope scope(autocast, torch::kBFloat16, torch::kCPU);
    return ours ? tt::gelu_linear(a, in[first], in[first + 1], in[first + 2])
                : tt::gelu_linear_reference(a, in[first], in[first + 1], in[first + 2]);
  };
}

TEST_CASE(
    "GELU + down-projection (gelu_linear): own backward gives autograd's gradients of the composition, with "
    "and without the attention beside it, in fp32, bf16 and under autocast",
    "[model][fused]") {
  torch::manual_seed(26);
  const int64_t attn = 6, mlp = 10, out = 7;
  for (const bool with_a : {false, true}) {
    const int64_t in = mlp + (with_a ? attn : 0);
    auto a = torch::randn({2, 5, attn});
    // u as the single blocks pass it: a column slice of the up-projection's output.
    auto up = torch::randn({2, 5, 3 + mlp}) * 2;
    auto weight = torch::randn({out, in}) * 0.3, bias = torch::randn({out});
    auto inputs = [&](torch::Dtype dtype, torch::Dtype weights) {
      std::vector<torch::Tensor> v;
      if (with_a) v.push_back(a.to(dtype));
      v.push_back(up.to(dtype));
      v.push_back(weight.to(weights));
      v.push_back(bias.to(weights));
      return v;
    };
    auto sliced = [](Fn f, bool with_a_) {  // the function sees u as a slice of its input
      return Fn([f, with_a_](const std::vector<torch::Tensor>& in) {
        std::vector<torch::Tensor> v(in);
        v[with_a_ ? 1 : 0] = in[with_a_ ? 1 : 0].slice(2, 3);
        return f(v);
      });
    };
    INFO("with a: " << with_a);
    compare(sliced(gelu_linear_fn(true, with_a, false), with_a),
            sliced(gelu_linear_fn(false, with_a, false), with_a), inputs(torch::kFloat32, torch::kFloat32),
            tolerance_for(torch::kFloat32));
    compare(sliced(gelu_linear_fn(true, with_a, false), with_a),
            sliced(gelu_linear_fn(false, with_a, false), with_a), inputs(torch::kBFloat16, torch::kBFloat16),
            tolerance_for(torch::kBFloat16));
    // As the model runs it: bf16 activations, fp32 weights, CPU autocast to bf16.
    compare(sliced(gelu_linear_fn(true, with_a, true), with_a),
            sliced(gelu_linear_fn(false, with_a, true), with_a), inputs(torch::kBFloat16, torch::kFloat32),
            tolerance_for(torch::kBFloat16));
    // No bias.
    std::vector<torch::Tensor> without_bias = inputs(torch::kFloat32, torch::kFloat32);
    without_bias.pop_back();
    compare(
        [&](const std::vector<torch::Tensor>& v) {
          return tt::gelu_linear(with_a ? v[0] : torch::Tensor(), v[with_a ? 1 : 0].slice(2, 3),
                                 v[with_a ? 2 : 1], {});
        },
        [&](const std::vector<torch::Tensor>& v) {
          return tt::gelu_linear_reference(with_a ? v[0] : torch::Tensor(), v[with_a ? 1 : 0].slice(2, 3),
                                           v[with_a ? 2 : 1], {});
        },
        without_bias, tolerance_for(torch::kFloat32));
  }
  // fp64 central differences through the function, with a.
  check_finite_differences(
      gelu_linear_fn(true, true, false),
      {torch::randn({1, 3, 2}, torch::kFloat64), torch::randn({1, 3, 4}, torch::kFloat64),
       torch::randn({3, 6}, torch::kFloat64), torch::randn({3}, torch::kFloat64)});
}

// in: [x, shift, scale, weight, bias]: linear(norm_modulate(x, shift, scale)).
Fn modulate_linear_fn(bool ours, bool autocast) {
  return [=](const std::vector<torch::Tensor>& in) {
    tt::AutocastScope scope(autocast, torch::kBFloat16, torch::kCPU);
    return ours ? tt::modulate_linear(in[0], in[1], in[2], in[3], in[4])
                : torch::linear(tt::norm_modulate_reference(in[0], in[1], in[2]), in[3], in[4]);
  };
}

TEST_CASE(
    "modulated LayerNorm + Linear (modulate_linear): own backward gives autograd's gradients of the "
    "composition in fp32, bf16 and under autocast",
    "[model][fused]") {
  torch::manual_seed(27);
  const int64_t channels = 12, out = 9;
  auto x = torch::randn({2, 5, channels}) * 2 + 0.5, shift = torch::randn({2, channels}),
       scale = torch::randn({2, channels}) * 0.5, weight = torch::randn({out, channels}) * 0.3,
       bias = torch::randn({out});
  auto inputs = [&](torch::Dtype dtype, torch::Dtype weights) {
    return std::vector<torch::Tensor>{x.to(dtype), shift.to(dtype), scale.to(dtype), weight.to(weights),
                                      bias.to(weights)};
  };
  compare(modulate_linear_fn(true, false), modulate_linear_fn(false, false),
          inputs(torch::kFloat32, torch::kFloat32), tolerance_for(torch::kFloat32));
  compare(modulate_linear_fn(true, false), modulate_linear_fn(false, false),
          inputs(torch::kBFloat16, torch::kBFloat16), tolerance_for(torch::kBFloat16));
  // As the model runs it: bf16 activations and modulation, fp32 weights, CPU autocast to bf16.
  compare(modulate_linear_fn(true, true), modulate_linear_fn(false, true),
          inputs(torch::kBFloat16, torch::kFloat32), tolerance_for(torch::kBFloat16));
  check_finite_differences(modulate_linear_fn(true, false),
                           {torch::randn({1, 3, 4}, torch::kFloat64), torch::randn({1, 4}, torch::kFloat64),
                            torch::randn({1, 4}, torch::kFloat64), torch::randn({3, 4}, torch::kFloat64),
                            torch::randn({3}, torch::kFloat64)});
}

TEST_CASE("QK RMSNorm + RoPE: own backward gives autograd's gradients of RmsNorm then apply_rope",
          "[model][fused]") {
  torch::manual_seed(23);
  const int64_t heads = 2, head_dim = 16;
  const tt::RopeTable rope = small_rope(3, torch::kCPU);  // 12 video tokens
  const int64_t video = rope.freqs.size(0);
  struct Case {
    int64_t tokens, rope_tokens;  // double blocks: all video or none (text); single blocks: video + text
  };
  for (const Case& k : {Case{video, video}, Case{5, 0}, Case{video + 5, video}}) {
    for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
      INFO("dtype " << dtype << " tokens " << k.tokens << " rope_tokens " << k.rope_tokens);
      const tt::RopeTable* table = k.rope_tokens > 0 ? &rope : nullptr;
      auto qkv = (torch::randn({2, k.tokens, 3 * heads * head_dim}) * 2 + 0.3).to(dtype);
      auto weight = 0.5 + torch::rand({head_dim});  // fp32, as the parameter
      compare(norm_rope(true, table, k.rope_tokens, heads, head_dim),
              norm_rope(false, table, k.rope_tokens, heads, head_dim), {qkv, weight}, tolerance_for(dtype));
    }
  }
  // fp64 (the RoPE table stays fp32, as the model's): 1 x 7 tokens, 4 of them rotated.
  const tt::RopeTable few = tt::build_rope_table(1, 1, 4, {4, 6, 6}, 256.0, torch::kCPU);
  check_finite_differences(norm_rope(true, &few, 4, heads, head_dim),
                           {torch::randn({1, 7, 3 * heads * head_dim}, torch::kFloat64),
                            0.5 + torch::rand({head_dim}, torch::kFloat64)});
}

TEST_CASE("qkv heads: the fused function's views and gradients equal the composition's bit for bit",
          "[model][fused]") {
  torch::manual_seed(31);
  const int64_t heads = 3, head_dim = 8;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    // Each case uses q, k, v with its own weight, or leaves v (then also k) out of the loss: an
    // output that gets no gradient must give zeros in its third of qkv's gradient.
    for (const int used : {3, 2, 1}) {
      INFO(dtype << ", " << used << " of q, k, v used");
      const auto qkv = (torch::randn({2, 5, 3 * heads * head_dim}) * 2).to(dtype);
      const auto weights = torch::randn({3, 2, heads, 5, head_dim}).to(dtype);
      auto run = [&](bool fused) {
        auto input = qkv.clone().requires_grad_(true);
        const auto parts = tt::qkv_heads(input, heads, head_dim, fused);
        REQUIRE(parts.size() == 3);
        torch::Tensor loss = torch::zeros({}, qkv.options());
        for (int i = 0; i < used; ++i) loss = loss + (parts[static_cast<size_t>(i)] * weights[i]).sum();
        loss.backward();
        return std::make_pair(parts, input.grad());
      };
      const auto [fused_parts, fused_grad] = run(true);
      const auto [plain_parts, plain_grad] = run(false);
      for (size_t i = 0; i < 3; ++i) {
        CHECK(fused_parts[i].sizes() == plain_parts[i].sizes());
        CHECK(fused_parts[i].strides() == plain_parts[i].strides());
        CHECK(torch::equal(fused_parts[i], plain_parts[i]));
      }
      REQUIRE(fused_grad.defined());
      CHECK(fused_grad.sizes() == qkv.sizes());
      CHECK(fused_grad.is_contiguous());
      CHECK(torch::equal(fused_grad, plain_grad));
      // The unused thirds are zero, the used ones are not.
      const auto thirds = fused_grad.view({2, 5, 3, heads * head_dim});
      for (int i = 0; i < 3; ++i)
        CHECK((thirds.select(2, i).abs().sum().item<double>() == 0.0) == (i >= used));
    }
  }
  CHECK_THROWS(tt::qkv_heads(torch::randn({2, 5, 7}), heads, head_dim, true));
}

TEST_CASE("joint q, k, v: the fused function equals qkv_heads, QK-norm + RoPE and cat bit for bit",
          "[model][fused]") {
  torch::manual_seed(37);
  check_joint_equal(torch::kCPU);
  // And the autograd composition without the kernels' references (ATen's RMSNorm, apply_rope, cat).
  const int64_t heads = 2, head_dim = 16;
  const tt::RopeTable rope = small_rope(3, torch::kCPU);
  const int64_t video = rope.freqs.size(0);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    const auto inputs = joint_inputs(video, 5, heads, head_dim, dtype, torch::kCPU);
    std::vector<torch::Tensor> upstream;
    for (int i = 0; i < 3; ++i) upstream.push_back(torch::randn({2, heads, video + 5, head_dim}));
    const JointRun fused = run_joint(JointPath::kFused, inputs, &rope, video, heads, head_dim, 3, upstream);
    const JointRun plain = run_joint(JointPath::kUnfused, inputs, &rope, video, heads, head_dim, 3, upstream);
    for (size_t i = 0; i < 3; ++i)
      CHECK(scaled_error(fused.outputs[i], plain.outputs[i]) <= tolerance_for(dtype));
    for (size_t i = 0; i < fused.grads.size(); ++i) {
      INFO("gradient of input " << i);
      REQUIRE(fused.grads[i].defined());
      CHECK(scaled_error(fused.grads[i], plain.grads[i]) <= tolerance_for(dtype));
    }
  }
  CHECK_THROWS(tt::joint_qkv_fused(
      torch::randn({2, 4, 96}), torch::randn({2, 3, 90}),
      tt::JointQkvNorms{torch::ones({16}), torch::ones({16}), torch::ones({16}), torch::ones({16})}, heads,
      head_dim, nullptr, 0));
}

TEST_CASE("qkv + MLP split: the fused function's views and gradients equal the composition's bit for bit",
          "[model][fused]") {
  torch::manual_seed(32);
  const int64_t heads = 2, head_dim = 8, mlp = 24, width = 3 * heads * head_dim + mlp;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    // q, k, v and the MLP's input each with its own weight; or the MLP alone, or q, k, v alone: a part
    // without a gradient gives zeros in its columns.
    for (const auto& used : std::vector<std::vector<int>>{{0, 1, 2, 3}, {3}, {0, 1, 2}}) {
      INFO(dtype << ", " << used.size() << " parts used, the first " << used[0]);
      const auto x = (torch::randn({2, 5, width}) * 2).to(dtype);
      const auto weights = torch::randn({3, 2, heads, 5, head_dim}).to(dtype);
      const auto mlp_weight = torch::randn({2, 5, mlp}).to(dtype);
      auto run = [&](bool fused) {
        auto input = x.clone().requires_grad_(true);
        const auto parts = tt::qkv_mlp_split(input, heads, head_dim, fused);
        REQUIRE(parts.size() == 4);
        torch::Tensor loss = torch::zeros({}, x.options());
        for (const int i : used)
          loss = loss + (parts[static_cast<size_t>(i)] * (i < 3 ? weights[i] : mlp_weight)).sum();
        loss.backward();
        return std::make_pair(parts, input.grad());
      };
      const auto [fused_parts, fused_grad] = run(true);
      const auto [plain_parts, plain_grad] = run(false);
      for (size_t i = 0; i < 4; ++i) {
        CHECK(fused_parts[i].sizes() == plain_parts[i].sizes());
        CHECK(fused_parts[i].strides() == plain_parts[i].strides());
        CHECK(torch::equal(fused_parts[i], plain_parts[i]));
      }
      REQUIRE(fused_grad.defined());
      CHECK(fused_grad.is_contiguous());
      CHECK(torch::equal(fused_grad, plain_grad));
    }
  }
  CHECK_THROWS(tt::qkv_mlp_split(torch::randn({2, 5, 48}), heads, head_dim, true));
}

TEST_CASE(
    "single q, k, v + MLP: the fused function equals the split and QK-norm + RoPE composed, bit for bit",
    "[model][fused]") {
  torch::manual_seed(43);
  check_single_equal(torch::kCPU);
  // And the autograd composition without the kernels' references (ATen's RMSNorm, apply_rope, split).
  const int64_t heads = 2, head_dim = 16, mlp = 40, width = 3 * heads * head_dim + mlp;
  const tt::RopeTable rope = small_rope(3, torch::kCPU);
  const int64_t video = rope.freqs.size(0), tokens = video + 4;
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    const auto x = (torch::randn({2, tokens, width}) * 2 - 0.1).to(dtype);
    const auto wq = 0.5 + torch::rand({head_dim}), wk = 0.5 + torch::rand({head_dim});
    std::vector<torch::Tensor> upstream;
    for (int i = 0; i < 3; ++i) upstream.push_back(torch::randn({2, heads, tokens, head_dim}));
    upstream.push_back(torch::randn({2, tokens, mlp}));
    auto run = [&](bool fused) {
      std::vector<torch::Tensor> in = {x.clone().requires_grad_(true), wq.clone().requires_grad_(true),
                                       wk.clone().requires_grad_(true)};
      const auto parts =
          fused
              ? tt::single_qkv_mlp(in[0], in[1], in[2], 1e-6, heads, head_dim, &rope, video, true)
              : tt::single_qkv_mlp_reference(in[0], in[1], in[2], 1e-6, heads, head_dim, &rope, video, false);
      torch::Tensor loss = torch::zeros({});
      for (size_t i = 0; i < 4; ++i) loss = loss + (parts[i].to(torch::kFloat32) * upstream[i]).sum();
      loss.backward();
      std::vector<torch::Tensor> out;
      for (const auto& p : parts) out.push_back(p.detach());
      for (const auto& t : in) out.push_back(t.grad());
      return out;
    };
    const auto fused = run(true), plain = run(false);
    for (size_t i = 0; i < fused.size(); ++i) {
      INFO("output or gradient " << i);
      REQUIRE(fused[i].defined());
      CHECK(scaled_error(fused[i], plain[i]) <= tolerance_for(dtype));
    }
  }
  CHECK_THROWS(tt::single_qkv_mlp_fused(torch::randn({2, 5, 96}), torch::ones({16}), torch::ones({16}), 1e-6,
                                        heads, head_dim, nullptr, 0));
}

TEST_CASE(
    "qkv + MLP split: an MLP gradient in a buffer of linear1's width is completed in place, only when "
    "nothing else holds that buffer",
    "[model][fused]") {
  const int64_t heads = 2, head_dim = 8, mlp = 24, qkv_width = 3 * heads * head_dim;
  const int64_t width = qkv_width + mlp;
  const auto x = torch::randn({2, 5, width});
  const auto mlp_grad = torch::randn({2, 5, mlp});
  const auto expected = torch::cat({torch::zeros({2, 5, qkv_width}), mlp_grad}, 2);
  for (const bool shared : {false, true}) {
    INFO((shared ? "the buffer is still held elsewhere" : "the gradient is the buffer's only holder"));
    auto input = x.clone().requires_grad_(true);
    const auto parts = tt::qkv_mlp_split(input, heads, head_dim, true);
    // The layout GeluLinear's backward gives on CUDA: the MLP columns of a (B, N, width) buffer
    // whose other columns hold garbage, set onto its storage (a view would keep the buffer).
    auto buffer = torch::full({2, 5, width}, 7.0);
    torch::Tensor grad = torch::empty({0}).set_(buffer.storage(), qkv_width, {2, 5, mlp}, buffer.strides());
    grad.copy_(mlp_grad);
    const auto* block_start = static_cast<const float*>(grad.data_ptr()) - qkv_width;
    if (!shared) buffer = torch::Tensor();
    torch::autograd::backward({parts[3]}, {std::move(grad)});
    REQUIRE(input.grad().defined());
    CHECK(torch::equal(input.grad(), expected));
    // In place: the gradient is the buffer itself (autograd keeps it as the leaf's gradient). Shared:
    // a new buffer, the held one untouched.
    CHECK((input.grad().data_ptr() == block_start) == !shared);
    if (shared) CHECK(torch::equal(buffer.narrow(2, 0, qkv_width), torch::full({2, 5, qkv_width}, 7.0)));
  }
}

TEST_CASE("fused ops on CPU tensors take the unfused composition bit for bit", "[model][fused]") {
  torch::manual_seed(24);
  auto x = torch::randn({2, 12, 96}), y = torch::randn({2, 12, 96}), gate = torch::randn({2, 96});
  CHECK(torch::equal(tt::gated_residual(x, y, gate, true), torch::addcmul(x, y, gate.unsqueeze(1))));
  CHECK(torch::equal(tt::gelu_tanh(x, true), torch::gelu(x, "tanh")));
  const tt::RopeTable rope = small_rope(3, torch::kCPU);
  auto q = q_of(x, 2, 16);
  CHECK(torch::equal(tt::rms_norm_rope(q, torch::ones({16}), &rope, 12, 1e-6, true),
                     tt::rms_norm_rope_reference(q, torch::ones({16}), &rope, 12, 1e-6)));
  // The model: fused_kernels on and off give the same CPU output.
  tt::HunyuanVideoConfig on = tt::test::small_model_config(), off = on;
  on.fused_kernels = true;
  off.fused_kernels = false;
  tt::HunyuanVideoTransformer a(on), b(off);
  tt::test::randomise_weights(a, 3);
  tt::test::randomise_weights(b, 3);
  auto in = tt::test::small_model_inputs(on, 2, 8);
  CHECK(torch::equal(a->forward(in), b->forward(in)));
  // Backward: the MLPs' GELU + down-projection (gelu_linear) run on the CPU too, with their own
  // backward: the gradients agree to fp32 summation order.
  {
    torch::AutoGradMode grad_on(true);
    a->forward(in).square().sum().backward();
    b->forward(in).square().sum().backward();
  }
  const auto errors = tt::test::gradient_errors(a->diffusers_gradients(), b->diffusers_gradients());
  REQUIRE(!errors.empty());
  for (const auto& [key, error] : errors) {
    INFO(key << " gradient error " << error);
    CHECK(error <= 1e-5);
  }
}

// ---- [gpu] ----

namespace {

const torch::Device kCuda(torch::kCUDA);

std::vector<torch::Tensor> on_gpu(const std::vector<torch::Tensor>& inputs) {
  std::vector<torch::Tensor> out;
  for (const auto& t : inputs) out.push_back(t.to(kCuda));
  return out;
}

}  // namespace

TEST_CASE("fused ops on CUDA give the composition's outputs and gradients", "[gpu][model][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(25);
  const int64_t heads = 2, head_dim = 16;
  const tt::RopeTable rope = small_rope(5, kCuda);  // 20 video tokens
  const int64_t video = rope.freqs.size(0);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    // fp32: the same math in another order (ATen's fused RMSNorm, TF32 is not involved: no GEMM);
    // bf16: a few ulps of the tensor's scale.
    const double tolerance = dtype == torch::kBFloat16 ? 1.0 / 32 : 1e-5;
    {
      INFO("gated residual");
      const std::vector<torch::Tensor> inputs =
          on_gpu({torch::randn({2, 300, 72}).to(dtype), torch::randn({2, 300, 72}).to(dtype),
                  torch::randn({2, 72}).to(dtype)});
      compare(gated_fused(), gated_reference(), inputs, tolerance);
      compare(gated_fused_frozen_gate(), gated_reference_frozen_gate(), inputs, tolerance);
    }
    {
      INFO("GELU-tanh on a column slice");
      compare(
          [](const std::vector<torch::Tensor>& in) { return tt::gelu_tanh_fused(in[0].slice(2, 30)); },
          [](const std::vector<torch::Tensor>& in) { return tt::gelu_tanh_reference(in[0].slice(2, 30)); },
          on_gpu({(torch::randn({2, 50, 100}) * 3).to(dtype)}), tolerance);
    }
    {
      INFO("QK RMSNorm + RoPE: video only, text only, video + text");
      for (const auto& [tokens, rope_tokens] :
           std::vector<std::pair<int64_t, int64_t>>{{video, video}, {7, 0}, {video + 7, video}}) {
        INFO("tokens " << tokens << " rope_tokens " << rope_tokens);
        const tt::RopeTable* table = rope_tokens > 0 ? &rope : nullptr;
        auto qkv = (torch::randn({2, tokens, 3 * heads * head_dim}) * 2 + 0.3).to(dtype).to(kCuda);
        auto weight = (0.5 + torch::rand({head_dim})).to(kCuda);
        compare(norm_rope(true, table, rope_tokens, heads, head_dim),
                norm_rope(false, table, rope_tokens, heads, head_dim), {qkv, weight}, tolerance);
      }
    }
  }
}

TEST_CASE("joint q, k, v on CUDA: the fused function equals the same kernels composed, bit for bit",
          "[gpu][model][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(41);
  check_joint_equal(kCuda);
}

TEST_CASE("single q, k, v + MLP on CUDA: the fused function equals the same kernels composed, bit for bit",
          "[gpu][model][fused]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(44);
  check_single_equal(kCuda);
}

TEST_CASE("the small model on CUDA: fused_kernels on matches off, forward and backward",
          "[gpu][model][fused]") {
  TT_REQUIRE_GPU();
  tt::HunyuanVideoConfig on = tt::test::small_model_config(), off = on;
  on.fused_kernels = true;
  off.fused_kernels = false;
  auto relative = [](const torch::Tensor& a, const torch::Tensor& b) {
    auto d = (a.to(torch::kFloat64) - b.to(torch::kFloat64)).norm().item<double>();
    return d / (b.to(torch::kFloat64).norm().item<double>() + 1e-12);
  };
  for (const bool autocast : {false, true}) {
    INFO((autocast ? "bf16 autocast" : "fp32"));
    std::vector<torch::Tensor> outputs;
    std::vector<std::map<std::string, torch::Tensor>> grads;
    for (const auto* config : {&on, &off}) {
      tt::HunyuanVideoTransformer model(*config);
      tt::test::randomise_weights(model, 3);
      model->to(kCuda);
      auto in = tt::test::inputs_on(tt::test::small_model_inputs(*config, 2, 8), kCuda);
      torch::Tensor out;
      {
        tt::AutocastScope scope(autocast);
        out = model->forward(in);
      }
      out.to(torch::kFloat32).square().sum().backward();
      outputs.push_back(out.detach().to(torch::kFloat32));
      grads.push_back(model->diffusers_gradients());
    }
    // fp32: the fused kernels reorder fp32 sums. bf16 autocast: intermediates rounded at other
    // places, through three blocks; of the order of the parity test's bf16-vs-fp32 bounds (2e-2 and
    // 1e-1), since both sides carry their own bf16 error. A wrong kernel (a sign, a missing gate or
    // term) moves the output by O(1) relative; the op-level tests bound the ulps.
    const double tolerance = autocast ? 5e-2 : 1e-4;
    const double out_error = relative(outputs[0], outputs[1]);
    INFO("output relative error " << out_error);
    CHECK(out_error <= tolerance);
    const auto errors = tt::test::gradient_errors(grads[0], grads[1]);
    REQUIRE(!errors.empty());
    for (const auto& [key, error] : errors) {
      INFO(key << " gradient error " << error << " (tt::test::gradient_errors)");
      CHECK(error <= tolerance * 3);
    }
  }
}
