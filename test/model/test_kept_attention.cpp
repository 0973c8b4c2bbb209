// Checkpointed blocks that keep their attention (model/kept_attention.h): the recompute runs no
// attention forward for a kept call, and the outputs and every gradient equal the plain recompute's;
// attention with a key mask is recomputed as before. On the CPU (flash for the CPU) and on the GPU
// in bf16 (the backend SDPA chooses there: cuDNN or flash).
#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#include <map>
#include <string>

#include "core/autocast.h"
#include "core/profiler.h"
#include "model/activation_checkpoint.h"
#include "model/kept_attention.h"
#include "model/layers.h"
#include "model/transformer.h"
#include "test/model/small_model.h"
#include "test/test_util.h"

namespace {

using tt::test::small_model_config;
using tt::test::small_model_inputs;

// Attention forwards that ran in a trace (SDPA's backends' forward ops, host side).
int64_t attention_forwards(const nlohmann::json& trace) {
  int64_t count = 0;
  for (const auto& e : trace["traceEvents"]) {
    if (e.value("cat", std::string()) != "cpu_op") continue;
    const std::string name = e.value("name", std::string());
    if (name == "aten::_scaled_dot_product_flash_attention_for_cpu" ||
        name == "aten::_scaled_dot_product_flash_attention" || name == "aten::_scaled_dot_product_cudnn_attention" ||
        name == "aten::_scaled_dot_product_efficient_attention")
      ++count;
  }
  return count;
}

double max_difference(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat32) - b.to(torch::kFloat32)).abs().max().item<double>();
}

// Every block checkpointed, the step's attention forwards counted and its gradients kept, with the
// attention kept or recomputed; `padded`: text with padding (a key mask: nothing kept).
void check_kept_attention(const torch::Device& device, bool autocast, double tolerance, bool padded) {
  tt::HunyuanVideoConfig c = small_model_config();
  c.num_layers = 2;
  c.num_single_layers = 3;
  tt::TransformerInputs inputs = tt::test::inputs_on(small_model_inputs(c, 2, 6), device);
  if (!padded) {
    inputs.encoder_attention_mask.fill_(true);
    inputs.text_all_valid = true;
  }
  tt::test::TempDir dir("tt_kept_attention");
  struct Run {
    int64_t forwards = 0;
    torch::Tensor out;
    std::map<std::string, torch::Tensor> grads;
  };
  auto run = [&](bool keep) {
    c.checkpoint_keeps_attention = keep;
    tt::HunyuanVideoTransformer model = tt::test::checkpointed_model_on(c, device, 5);
    Run r;
    const nlohmann::json trace = tt::trace_work(device, dir / "trace.json", false, [&] {
      {
        tt::AutocastScope scope(autocast, torch::kBFloat16, device.type());
        r.out = model->forward(inputs);
      }
      r.out.to(torch::kFloat32).square().mean().backward();
    });
    r.forwards = attention_forwards(trace);
    for (const auto& [name, grad] : model->diffusers_gradients())
      if (grad.defined()) r.grads[name] = grad.to(torch::kFloat32).cpu();
    return r;
  };
  const Run plain = run(false);
  const Run kept = run(true);
  const int64_t blocks = c.num_layers + c.num_single_layers;
  INFO("attention forwards: " << plain.forwards << " recomputing, " << kept.forwards << " keeping");
  // The recompute of each block ran its attention again, unless it was kept.
  CHECK(plain.forwards - kept.forwards == (padded ? 0 : blocks));
  CHECK(max_difference(kept.out, plain.out) <= tolerance * (1.0 + plain.out.abs().max().item<double>()));
  REQUIRE(kept.grads.size() == plain.grads.size());
  for (const auto& [name, grad] : plain.grads) {
    INFO(name);
    CHECK(max_difference(kept.grads.at(name), grad) <= tolerance * (1.0 + grad.abs().max().item<double>()));
  }
}

}  // namespace

TEST_CASE("checkpointed blocks that keep their attention skip it in the recompute; the same gradients",
          "[model][checkpoint][kept_attention]") {
  check_kept_attention(torch::kCPU, false, 1e-6, /*padded=*/false);
}

TEST_CASE("attention with a key mask is not kept: recomputed as before, the same gradients",
          "[model][checkpoint][kept_attention]") {
  check_kept_attention(torch::kCPU, false, 1e-6, /*padded=*/true);
}

TEST_CASE("a recompute whose calls do not match what was kept runs them as usual", "[model][kept_attention]") {
  // Kept: one call of (1, 2, 8, 16); the replay asks for another shape, then for more calls than
  // were kept: SDPA runs for both, with gradients.
  const auto store = tt::make_kept_attention_store();
  const torch::Tensor q = torch::randn({1, 2, 8, 16}), k = torch::randn({1, 2, 8, 16}), v = torch::randn({1, 2, 8, 16});
  {
    torch::NoGradGuard no_grad;
    const tt::KeptAttentionScope record(store.get(), false);
    tt::kept_or_sdpa(q, k, v, std::nullopt);
  }
  const tt::KeptAttentionScope replay(store.get(), true);
  const torch::Tensor q2 = torch::randn({1, 2, 4, 16}).requires_grad_(true);
  const torch::Tensor other = tt::kept_or_sdpa(q2, k, v, std::nullopt);
  CHECK(torch::allclose(other, at::scaled_dot_product_attention(q2, k, v), 1e-6, 1e-6));
  const torch::Tensor extra = tt::kept_or_sdpa(q2, k, v, std::nullopt);
  extra.sum().backward();
  CHECK(q2.grad().defined());
}

TEST_CASE("on the GPU in bf16, kept attention skips the recompute's attention; the same gradients",
          "[model][checkpoint][kept_attention][gpu]") {
  TT_REQUIRE_GPU();
  // The same kernels run on the same inputs, forward and backward: 1e-3 leaves room for nothing more
  // than the kernels' own run-to-run choice.
  check_kept_attention(torch::Device(torch::kCUDA, 0), true, 1e-3, /*padded=*/false);
  check_kept_attention(torch::Device(torch::kCUDA, 0), true, 1e-3, /*padded=*/true);
}
