// Activation checkpointing gives the same outputs and gradients as running the block directly,
// also under autocast (the recomputation casts as the forward did).
#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#include "core/autocast.h"
#include "model/activation_checkpoint.h"

TEST_CASE("checkpointed block: same outputs, input and parameter gradients", "[model][checkpoint]") {
  torch::manual_seed(4);
  torch::nn::Linear a(6, 8), b(8, 6);
  auto block = [&](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
    auto h = torch::gelu(a(in[0])) * in[1];
    return {b(h) + in[0], h.sum(-1)};
  };
  auto x = torch::randn({3, 6}, torch::requires_grad());
  auto scale = torch::randn({3, 8}, torch::requires_grad());
  auto mask = torch::ones({3}, torch::kBool);  // a non-differentiable input rides along

  auto direct = block({x, scale});
  (direct[0].pow(2).sum() + direct[1].sum()).backward();
  auto grad_x = x.grad().clone(), grad_scale = scale.grad().clone(), grad_a = a->weight.grad().clone();
  x.mutable_grad() = torch::Tensor();
  scale.mutable_grad() = torch::Tensor();
  a->weight.mutable_grad() = torch::Tensor();
  b->weight.mutable_grad() = torch::Tensor();

  auto saved = tt::checkpointed([&](const std::vector<torch::Tensor>& in) { return block({in[0], in[1]}); },
                                {x, scale, mask});
  CHECK(torch::allclose(saved[0], direct[0]));
  CHECK(saved[0].requires_grad());
  (saved[0].pow(2).sum() + saved[1].sum()).backward();
  CHECK(torch::allclose(x.grad(), grad_x, 1e-6, 1e-6));
  CHECK(torch::allclose(scale.grad(), grad_scale, 1e-6, 1e-6));
  CHECK(torch::allclose(a->weight.grad(), grad_a, 1e-6, 1e-6));
}

TEST_CASE("checkpointed block under CPU autocast: recomputed in bf16 as its forward ran, same gradients",
          "[model][checkpoint][bf16]") {
  torch::manual_seed(5);
  torch::nn::Linear a(6, 8), b(8, 6);
  auto block = [&](const std::vector<torch::Tensor>& in) -> std::vector<torch::Tensor> {
    return {b(torch::gelu(a(in[0])))};
  };
  auto x = torch::randn({4, 6}, torch::requires_grad());
  // Output and gradients of x and a.weight; the backward runs outside the autocast scope, as the
  // trainer's does, so a recomputation that did not restore it would run in fp32.
  auto run = [&](bool checkpoint) {
    x.mutable_grad() = torch::Tensor();
    a->weight.mutable_grad() = torch::Tensor();
    torch::Tensor out;
    {
      tt::AutocastScope autocast(true, at::kBFloat16, at::kCPU);
      out = checkpoint ? tt::checkpointed(block, {x})[0] : block({x})[0];
    }
    out.to(torch::kFloat32).pow(2).sum().backward();
    return std::vector<torch::Tensor>{out.detach(), x.grad().clone(), a->weight.grad().clone()};
  };
  const auto direct = run(false);
  const auto saved = run(true);
  CHECK(direct[0].scalar_type() == torch::kBFloat16);
  for (size_t i = 0; i < direct.size(); ++i) {
    INFO("tensor " << i);
    CHECK(torch::equal(saved[i], direct[i]));
  }
}
