// Per-sample joint attention (model/per_sample_attention.h): its definition against SDPA with the
// key mask (CPU, fp64), the small model with model.per_sample_attention on against off (CPU, with
// and without checkpointed blocks), cuDNN's calls against the definition and the mask kept while a
// CUDA graph is captured (CUDA) or an emulated one replays.
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "core/graph_capture.h"
#include "model/per_sample_attention.h"
#include "test/model/masked_attention.h"
#include "test/model/small_model.h"
#include "test/test_util.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace {

using tt::test::masked_attention;
using tt::test::relative;
using tt::test::valid_rows;

// q, k, v (B, H, S, D) as the model makes them: views of (B, S, H, D) projections.
torch::Tensor heads_view(int64_t batch, int64_t heads, int64_t tokens, int64_t d,
                         torch::TensorOptions options) {
  return torch::randn({batch, tokens, heads, d}, options).transpose(1, 2).detach().requires_grad_();
}

// The small model's output and gradients for `in`, with `config`.
std::pair<torch::Tensor, std::map<std::string, torch::Tensor>> run_small(const tt::HunyuanVideoConfig& config,
                                                                         const tt::TransformerInputs& in,
                                                                         bool checkpointed, bool autocast) {
  tt::HunyuanVideoTransformer model(config);
  tt::test::randomise_weights(model, 3);
  model->to(in.hidden_states.device());
  model->train();
  if (checkpointed) model->set_activation_checkpointing(1);
  torch::Tensor out;
  {
    tt::AutocastScope scope(autocast);
    out = model->forward(in);
  }
  out.to(torch::kFloat32).square().sum().backward();
  return {out.detach().to(torch::kFloat32), model->diffusers_gradients()};
}

// The small model with per-sample attention (`on`) and without, on `in`: the outputs within
// `out_bound` and every gradient within `grad_bound` of each other. Returns the output without it.
torch::Tensor on_matches_off(const tt::HunyuanVideoConfig& on, const tt::TransformerInputs& in,
                             bool checkpointed, bool autocast, double out_bound, double grad_bound) {
  tt::HunyuanVideoConfig off = on;
  off.per_sample_attention = false;
  const auto [out_on, grads_on] = run_small(on, in, checkpointed, autocast);
  const auto [out_off, grads_off] = run_small(off, in, checkpointed, autocast);
  const double out_error = relative(out_on, out_off);
  INFO("output relative error " << out_error);
  CHECK(out_error <= out_bound);
  const auto errors = tt::test::gradient_errors(grads_on, grads_off);
  REQUIRE(!errors.empty());
  for (const auto& [key, error] : errors) {
    INFO(key << " gradient error " << error);
    CHECK(error <= grad_bound);
  }
  return out_off;
}

}  // namespace

TEST_CASE(
    "per-sample attention's definition: valid rows and every gradient equal the masked attention's, padding "
    "rows are zero",
    "[model][per_sample]") {
  torch::manual_seed(3);
  // A padded sample, a full one, one with a single valid token.
  const std::vector<int64_t> lengths = {6, 9, 1};
  const int64_t batch = 3, heads = 2, tokens = 9, d = 8;
  const auto options = torch::TensorOptions().dtype(torch::kFloat64);
  auto q = heads_view(batch, heads, tokens, d, options), k = heads_view(batch, heads, tokens, d, options),
       v = heads_view(batch, heads, tokens, d, options);
  auto valid = valid_rows(lengths, tokens);
  auto upstream = torch::randn({batch, tokens, heads * d}, options) * valid.unsqueeze(2);

  auto split = tt::per_sample_attention(q, k, v, lengths);
  auto masked = masked_attention(q, k, v, valid);
  REQUIRE(split.sizes() == masked.sizes());
  auto rows = valid.unsqueeze(2).expand_as(split);
  CHECK(torch::allclose(split.masked_select(rows), masked.masked_select(rows), 0, 1e-12));
  CHECK(split.masked_select(~rows).abs().max().item<double>() == 0.0);

  auto grads_of = [&](const torch::Tensor& out) {
    return torch::autograd::grad({(out * upstream).sum()}, {q, k, v});
  };
  auto g_split = grads_of(split), g_masked = grads_of(masked);
  for (size_t i = 0; i < 3; ++i) {
    INFO("gradient of "
         << "qkv"[i]);
    CHECK(torch::allclose(g_split[i], g_masked[i], 0, 1e-12));
  }
  // A length per sample, each in [1, S].
  CHECK_THROWS(tt::per_sample_attention(q, k, v, {6, 9}));
  CHECK_THROWS(tt::per_sample_attention(q, k, v, {6, 10, 1}));
  CHECK_THROWS(tt::per_sample_attention(q, k, v, {0, 9, 1}));
  // An emulated graph replay (core/graph_capture.h) keeps the mask, as a real replay does.
  CHECK(tt::per_sample_attention_allowed(q));
  {
    const tt::EmulatedReplayScope replaying;
    CHECK_FALSE(tt::per_sample_attention_allowed(q));
  }
  CHECK(tt::per_sample_attention_allowed(q));
}

TEST_CASE(
    "the small model with per-sample attention matches the key mask, forward and backward, checkpointed or "
    "not",
    "[model][per_sample]") {
  tt::HunyuanVideoConfig on = tt::test::small_model_config(), off = on;
  on.per_sample_attention = true;
  const bool checkpointed = GENERATE(false, true);
  INFO((checkpointed ? "every block checkpointed" : "no checkpointing"));
  auto in = tt::test::small_model_inputs(on, 2, 8);  // sample 0: 4 valid text tokens, sample 1: 8
  in.text_lengths = {4, 8};
  const torch::Tensor out_off = on_matches_off(on, in, checkpointed, false, 1e-5, 1e-4);

  // The lengths are what the blocks attend with: short ones cut valid keys off (the output moves),
  // and with the option off they are not read.
  auto cut = in;
  cut.text_lengths = {1, 1};
  CHECK(relative(run_small(on, cut, checkpointed, false).first, out_off) > 1e-3);
  CHECK(relative(run_small(off, cut, checkpointed, false).first, out_off) <= 1e-6);
  // Lengths that do not fit the batch are refused.
  auto wrong = in;
  wrong.text_lengths = {4};
  CHECK_THROWS(run_small(on, wrong, checkpointed, false));
}

TEST_CASE("per-sample attention on CUDA: cuDNN's calls equal the definition, forward and backward",
          "[gpu][model][per_sample]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(5);
  const torch::Device cuda(torch::kCUDA);
  // Lengths: padded, full, short; S past one 128-token kernel block.
  const int64_t heads = 4, tokens = 333, d = 64;
  for (const auto& [autocast, lengths] : std::vector<std::pair<bool, std::vector<int64_t>>>{
           {false, {300, 333, 17}}, {true, {300, 333, 17}}, {false, {300}}}) {
    const auto batch = static_cast<int64_t>(lengths.size());
    INFO((autocast ? "fp32 inputs under bf16 autocast" : "bf16 inputs") << ", batch " << batch);
    const auto options =
        torch::TensorOptions().dtype(autocast ? torch::kFloat32 : torch::kBFloat16).device(cuda);
    auto q = heads_view(batch, heads, tokens, d, options), k = heads_view(batch, heads, tokens, d, options),
         v = heads_view(batch, heads, tokens, d, options);
    auto valid = valid_rows(lengths, tokens).to(cuda);
    auto upstream =
        (torch::randn({batch, tokens, heads * d}, cuda) * valid.unsqueeze(2)).to(torch::kBFloat16);
    torch::Tensor fast;
    std::vector<torch::Tensor> g_fast;
    {
      tt::AutocastScope scope(autocast);
      fast = tt::per_sample_attention(q, k, v, lengths);
      g_fast =
          torch::autograd::grad({(fast.to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum()}, {q, k, v});
    }
    // The masked attention in fp64 from the same (bf16-rounded) inputs.
    auto as64 = [](const torch::Tensor& t) {
      return t.detach().to(torch::kBFloat16).to(torch::kFloat64).requires_grad_();
    };
    auto q64 = as64(q), k64 = as64(k), v64 = as64(v);
    auto reference = masked_attention(q64, k64, v64, valid);
    auto g_reference =
        torch::autograd::grad({(reference * upstream.to(torch::kFloat64)).sum()}, {q64, k64, v64});
    CHECK(fast.scalar_type() == torch::kBFloat16);
    auto rows = valid.unsqueeze(2).expand_as(fast);
    const double out_error = relative(fast.masked_select(rows), reference.masked_select(rows));
    INFO("valid rows' relative error " << out_error);
    CHECK(out_error <= 1e-2);
    CHECK(fast.masked_select(~rows).abs().max().item<float>() == 0.0f);
    for (size_t i = 0; i < 3; ++i) {
      const double error = relative(g_fast[i], g_reference[i]);
      INFO("gradient of "
           << "qkv"[i] << ": relative error " << error);
      CHECK(error <= 2e-2);
    }
  }
}

TEST_CASE(
    "the small model on CUDA: per-sample attention matches the key mask, and a graph capture keeps the mask",
    "[gpu][model][per_sample]") {
  TT_REQUIRE_GPU();
  const torch::Device cuda(torch::kCUDA);
  tt::HunyuanVideoConfig on = tt::test::small_model_config();
  on.per_sample_attention = true;
  auto in = tt::test::inputs_on(tt::test::small_model_inputs(on, 2, 8), cuda);
  in.text_lengths = {4, 8};
  // bf16 autocast on both sides with their own roundings (cuDNN with and without a bias) through
  // three blocks: the segment test's bounds.
  const torch::Tensor out_off = on_matches_off(on, in, false, true, 5e-2, 1.5e-1);
  auto cut = in;
  cut.text_lengths = {1, 1};
  CHECK(relative(run_small(on, cut, false, true).first, out_off) > 5e-2);

#ifdef TELETRON_WITH_CUDA
  // While the current stream captures a graph, the lengths would be baked into it: not taken.
  auto q = torch::zeros({1, 1, 8, 8}, torch::TensorOptions().device(cuda));
  CHECK(tt::per_sample_attention_allowed(q));
  bool inside = true;
  {
    const auto side = c10::cuda::getStreamFromPool(false, q.device().index());
    c10::cuda::CUDAStreamGuard guard(side);
    at::cuda::CUDAGraph graph;
    graph.capture_begin();
    inside = tt::per_sample_attention_allowed(q);
    graph.capture_end();
  }
  CHECK_FALSE(inside);
  CHECK(tt::per_sample_attention_allowed(q));
#endif
}
