// Activation checkpointing gives the same outputs and gradients as running the block directly.
#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

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
