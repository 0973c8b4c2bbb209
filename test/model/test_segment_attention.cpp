// Segment attention (model/segment_attention.h): its offsets, its definition against SDPA with the
// key mask (CPU, fp64), flash attention's variable-length kernels against that definition (CUDA),
// and the small model with model.segment_attention on against off (CUDA, bf16 autocast).
#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>
#include <catch2/generators/catch_generators.hpp>

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/autocast.h"
#include "model/segment_attention.h"
#include "model/text_padding.h"
#include "test/model/masked_attention.h"
#include "test/model/small_model.h"
#include "test/test_util.h"

using tt::test::masked_attention;
using tt::test::relative;
using tt::test::valid_rows;

TEST_CASE("segment offsets: each sample's valid tokens, then its padding", "[model][segments]") {
  auto offsets = tt::segment_offsets(torch::tensor({5, 7, 0, 3}), 7);
  CHECK(offsets.scalar_type() == torch::kInt32);
  const std::vector<int32_t> want = {0, 5, 7, 14, 14, 14, 21, 24, 28};
  REQUIRE(offsets.numel() == static_cast<int64_t>(want.size()));
  for (size_t i = 0; i < want.size(); ++i) CHECK(offsets[static_cast<int64_t>(i)].item<int32_t>() == want[i]);
}

TEST_CASE("right padding is told apart from masks with holes", "[model][segments]") {
  CHECK(tt::is_right_padded(torch::tensor({{1, 1, 0, 0}, {1, 1, 1, 1}}).to(torch::kBool)));
  CHECK(tt::is_right_padded(torch::tensor({{1, 0, 0}, {0, 0, 0}})));
  CHECK_FALSE(tt::is_right_padded(torch::tensor({{1, 0, 1, 0}})));
  CHECK_FALSE(tt::is_right_padded(torch::tensor({{1, 1}, {0, 1}})));
  // Trimming keeps a mask's form: right padding stays right padding, a hole stays a hole.
  auto trimmed = tt::trim_text_padding(torch::randn({2, 4, 3}), torch::tensor({{1, 1, 0, 0}, {1, 0, 0, 0}}));
  CHECK(tt::is_right_padded(trimmed.mask));
  CHECK_FALSE(tt::is_right_padded(tt::trim_text_padding(torch::randn({1, 4, 3}), torch::tensor({{0, 1, 1, 0}})).mask));
}

TEST_CASE("segment attention's definition: valid rows and every gradient equal the masked attention's",
          "[model][segments]") {
  torch::manual_seed(3);
  // A padded sample, a full one (empty padding segment), one with a single valid token.
  const std::vector<int64_t> lengths = {6, 9, 1};
  const int64_t batch = 3, heads = 2, tokens = 9, d = 8;
  auto q = torch::randn({batch, heads, tokens, d}, torch::kFloat64).requires_grad_();
  auto k = torch::randn({batch, heads, tokens, d}, torch::kFloat64).requires_grad_();
  auto v = torch::randn({batch, heads, tokens, d}, torch::kFloat64).requires_grad_();
  auto valid = valid_rows(lengths, tokens);
  auto offsets = tt::segment_offsets(valid.sum(1), tokens);
  auto upstream = torch::randn({batch, tokens, heads * d}, torch::kFloat64) * valid.unsqueeze(2);

  auto segments = tt::segment_attention(q, k, v, offsets);  // CPU: the reference
  auto masked = masked_attention(q, k, v, valid);
  auto rows = valid.unsqueeze(2).expand_as(segments);
  CHECK(torch::allclose(segments.masked_select(rows), masked.masked_select(rows), 0, 1e-12));
  // Padding rows attend to padding only: not the masked path's values.
  CHECK_FALSE(torch::allclose(segments.masked_select(~rows), masked.masked_select(~rows), 0, 1e-3));

  // The loss reads valid rows only (as the model's does): then every gradient is the same.
  auto grads_of = [&](const torch::Tensor& out) {
    return torch::autograd::grad({(out * upstream).sum()}, {q, k, v});
  };
  auto g_segments = grads_of(segments), g_masked = grads_of(masked);
  for (size_t i = 0; i < 3; ++i) {
    INFO("gradient of " << "qkv"[i]);
    CHECK(torch::allclose(g_segments[i], g_masked[i], 0, 1e-12));
  }
}

TEST_CASE("segment attention on CUDA: flash's variable-length kernels equal the definition, forward and backward",
          "[gpu][model][segments]") {
  TT_REQUIRE_GPU();
  torch::manual_seed(5);
  const torch::Device cuda(torch::kCUDA);
  // Lengths: padded, full (empty padding segment), short; S past one 128-token kernel block.
  // Batch 1 too: there the packed (B S, H, D) layout of a transposed input is a strided view.
  const int64_t heads = 4, tokens = 333, d = 64;
  for (const auto& [autocast, lengths] : std::vector<std::pair<bool, std::vector<int64_t>>>{
           {false, {300, 333, 17}}, {true, {300, 333, 17}}, {false, {300}}, {true, {300}}}) {
    const auto batch = static_cast<int64_t>(lengths.size());
    INFO((autocast ? "fp32 inputs under bf16 autocast" : "bf16 inputs") << ", batch " << batch);
    const auto dtype = autocast ? torch::kFloat32 : torch::kBFloat16;
    auto make = [&] { return torch::randn({batch, heads, tokens, d}).to(dtype).to(cuda).requires_grad_(); };
    auto q = make(), k = make(), v = make();
    auto valid = valid_rows(lengths, tokens).to(cuda);
    auto offsets = tt::segment_offsets(valid.sum(1), tokens);
    REQUIRE(tt::segment_attention_takes(q) == !autocast);  // fp32 without autocast: no kernel
    auto upstream = (torch::randn({batch, tokens, heads * d}).to(cuda) * valid.unsqueeze(2)).to(torch::kBFloat16);
    torch::Tensor fast, reference;
    std::vector<torch::Tensor> g_fast, g_reference;
    {
      tt::AutocastScope scope(autocast);
      REQUIRE(tt::segment_attention_takes(q));
      fast = tt::segment_attention(q, k, v, offsets);
      g_fast = torch::autograd::grad({(fast.to(torch::kFloat32) * upstream.to(torch::kFloat32)).sum()}, {q, k, v});
    }
    // The definition in fp64 from the same (bf16-rounded) inputs.
    auto q64 = q.detach().to(torch::kBFloat16).to(torch::kFloat64).requires_grad_();
    auto k64 = k.detach().to(torch::kBFloat16).to(torch::kFloat64).requires_grad_();
    auto v64 = v.detach().to(torch::kBFloat16).to(torch::kFloat64).requires_grad_();
    reference = tt::segment_attention_reference(q64, k64, v64, offsets);
    g_reference = torch::autograd::grad({(reference * upstream.to(torch::kFloat64)).sum()}, {q64, k64, v64});
    CHECK(fast.scalar_type() == torch::kBFloat16);
    // Valid rows: the ones that matter; bf16 output rounding (2^-8 relative) plus fp32 accumulation.
    auto rows = valid.unsqueeze(2).expand_as(fast);
    const double out_error = relative(fast.masked_select(rows), reference.masked_select(rows));
    INFO("valid rows' relative error " << out_error);
    CHECK(out_error <= 1e-2);
    // Padding rows are finite (they flow on through the blocks).
    CHECK(torch::isfinite(fast.to(torch::kFloat32)).all().item<bool>());
    for (size_t i = 0; i < 3; ++i) {
      const double error = relative(g_fast[i], g_reference[i]);
      INFO("gradient of " << "qkv"[i] << ": relative error " << error);
      CHECK(error <= 2e-2);
    }
  }
}

TEST_CASE("the small model on CUDA: segment attention on matches the key mask, forward and backward",
          "[gpu][model][segments]") {
  TT_REQUIRE_GPU();
  const torch::Device cuda(torch::kCUDA);
  tt::HunyuanVideoConfig on = tt::test::small_model_config(), off = on;
  on.segment_attention = true;
  // Batch 2 (sample 0 padded, sample 1 full) and batch 1 (padded), where the packing differs.
  const int64_t batch = GENERATE(2, 1);
  INFO("batch " << batch);
  std::vector<torch::Tensor> outputs;
  std::vector<std::map<std::string, torch::Tensor>> grads;
  for (const auto* config : {&on, &off}) {
    tt::HunyuanVideoTransformer model(*config);
    tt::test::randomise_weights(model, 3);
    model->to(cuda);
    auto in = tt::test::inputs_on(tt::test::small_model_inputs(*config, batch, 8), cuda);
    in.text_right_padded = true;
    torch::Tensor out;
    {
      tt::AutocastScope scope(true);
      out = model->forward(in);
    }
    out.to(torch::kFloat32).square().sum().backward();
    outputs.push_back(out.detach().to(torch::kFloat32));
    grads.push_back(model->diffusers_gradients());
  }
  // Both sides are bf16 autocast with their own roundings (flash vs SDPA's masked kernel) through
  // three blocks: the fused-kernel test's bf16 bounds. Padding rows differ by design, and reach
  // neither the output nor any gradient.
  const double out_error = relative(outputs[0], outputs[1]);
  INFO("output relative error " << out_error);
  CHECK(out_error <= 5e-2);
  const auto errors = tt::test::gradient_errors(grads[0], grads[1]);
  REQUIRE(!errors.empty());
  for (const auto& [key, error] : errors) {
    INFO(key << " gradient error " << error);
    CHECK(error <= 1.5e-1);
  }
}
