// The building blocks with backwards of their own (model/layers): norm_modulate's forward and
// gradients against autograd's composition of the same ops, in fp32 and bf16.
#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#include "model/layers.h"

namespace {

struct Grads {
  torch::Tensor out, x, shift, scale;
};

Grads run(bool custom, const torch::Tensor& x0, const torch::Tensor& shift0, const torch::Tensor& scale0,
          const torch::Tensor& upstream) {
  auto x = x0.clone().requires_grad_(true);
  auto shift = shift0.clone().requires_grad_(true);
  auto scale = scale0.clone().requires_grad_(true);
  auto out = custom ? tt::norm_modulate(x, shift, scale) : tt::norm_modulate_reference(x, shift, scale);
  (out.to(torch::kFloat32) * upstream).sum().backward();
  return {out.detach(), x.grad(), shift.grad(), scale.grad()};
}

double max_error(const torch::Tensor& a, const torch::Tensor& b) {
  return (a.to(torch::kFloat64) - b.to(torch::kFloat64)).abs().max().item<double>();
}

}  // namespace

TEST_CASE("norm_modulate's own backward gives autograd's gradients", "[model][layers]") {
  torch::manual_seed(3);
  for (const auto dtype : {torch::kFloat32, torch::kBFloat16}) {
    INFO("dtype " << dtype);
    const torch::Tensor x = (torch::randn({2, 7, 24}) * 3 + 1).to(dtype);
    const torch::Tensor shift = torch::randn({2, 24}).to(dtype);
    const torch::Tensor scale = (torch::randn({2, 24}) * 0.5).to(dtype);
    const torch::Tensor upstream = torch::randn({2, 7, 24});
    const Grads ours = run(true, x, shift, scale, upstream);
    const Grads theirs = run(false, x, shift, scale, upstream);
    CHECK(torch::equal(ours.out, theirs.out));  // the same forward ops
    REQUIRE(ours.x.scalar_type() == dtype);
    REQUIRE(ours.shift.scalar_type() == dtype);
    REQUIRE(ours.scale.scalar_type() == dtype);
    const double tolerance = dtype == torch::kFloat32 ? 1e-5 : 0.05;
    CHECK(max_error(ours.x, theirs.x) < tolerance);
    CHECK(max_error(ours.shift, theirs.shift) < tolerance);
    CHECK(max_error(ours.scale, theirs.scale) < tolerance * 4);  // a sum over tokens
  }
}

TEST_CASE("split_at: two views whose backward is one concatenation, with the slices' gradients", "[layers]") {
  torch::manual_seed(5);
  const torch::Tensor x = torch::randn({2, 5, 7}, torch::requires_grad());
  const auto [front, back] = tt::split_at(x, 2, 3);
  CHECK(front.sizes() == torch::IntArrayRef({2, 5, 3}));
  CHECK(back.sizes() == torch::IntArrayRef({2, 5, 4}));
  CHECK(torch::equal(front, x.slice(2, 0, 3)));
  CHECK(torch::equal(back, x.slice(2, 3)));
  CHECK(front.data_ptr() == x.data_ptr());  // views, no copy
  // One node for both parts (two slices would each fill an x-sized zero gradient, then be summed).
  REQUIRE(front.grad_fn());
  CHECK(front.grad_fn() == back.grad_fn());
  (front * 2).sum().add((back * 3).sum()).backward();
  CHECK(torch::equal(x.grad(), torch::cat({torch::full({2, 5, 3}, 2.0), torch::full({2, 5, 4}, 3.0)}, 2)));
  // A part no loss reads gets zeros.
  const torch::Tensor y = torch::randn({4, 6}, torch::requires_grad());
  tt::split_at(y, 0, 1).second.sum().backward();
  CHECK(torch::equal(y.grad(), torch::cat({torch::zeros({1, 6}), torch::ones({3, 6})}, 0)));
}
