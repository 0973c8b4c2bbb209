// The fused AdamW against LibTorch's reference torch::optim::AdamW, gradient clipping, state I/O.
#include <catch2/catch_test_macros.hpp>
#include <cmath>
#include <torch/torch.h>

#include "core/adamw.h"
#include "core/errors.h"
#include "test/test_util.h"

TEST_CASE("AdamW matches torch::optim::AdamW", "[optim]") {
  torch::manual_seed(0);
  auto init = torch::randn({5, 7});
  auto ours = init.clone().requires_grad_(true);
  auto theirs = init.clone().requires_grad_(true);
  tt::AdamWOptions options;
  options.lr = 1e-2;
  options.weight_decay = 0.1;
  tt::AdamW fused({ours}, {"w"}, options);
  torch::optim::AdamW reference({theirs}, torch::optim::AdamWOptions(1e-2).weight_decay(0.1));
  for (int step = 0; step < 5; ++step) {
    auto grad = torch::randn({5, 7});
    ours.mutable_grad() = grad.clone();
    theirs.mutable_grad() = grad.clone();
    fused.step();
    reference.step();
  }
  CHECK(torch::allclose(ours, theirs, 1e-6, 1e-6));
}

TEST_CASE("a step with found_inf set changes nothing", "[optim]") {
  auto p = torch::ones({4}).requires_grad_(true);
  tt::AdamW optimizer({p}, {"p"}, tt::AdamWOptions{});
  p.mutable_grad() = torch::full({4}, 0.5);
  optimizer.step(torch::ones({}));
  CHECK(torch::equal(p, torch::ones({4})));
  CHECK(optimizer.state_dict().at("optim.p.step").item<float>() == 0.0f);
  optimizer.step(torch::zeros({}));
  CHECK_FALSE(torch::equal(p, torch::ones({4})));
  CHECK(optimizer.state_dict().at("optim.p.step").item<float>() == 1.0f);
}

TEST_CASE("zero_grad drops the gradients, or zeroes them in place at their addresses", "[optim]") {
  auto p = torch::ones({4}).requires_grad_(true);
  tt::AdamW optimizer({p}, {"p"}, tt::AdamWOptions{});
  p.mutable_grad() = torch::full({4}, 0.5);
  const void* address = p.grad().data_ptr();
  optimizer.zero_grad(/*set_to_none=*/false);
  REQUIRE(p.grad().defined());
  CHECK(p.grad().data_ptr() == address);
  CHECK(torch::equal(p.grad(), torch::zeros({4})));
  // A backward then accumulates into that same memory.
  (p * 3.0).sum().backward();
  CHECK(p.grad().data_ptr() == address);
  CHECK(torch::equal(p.grad(), torch::full({4}, 3.0)));
  optimizer.zero_grad();
  CHECK_FALSE(p.grad().defined());
}

TEST_CASE("AdamW state round trip continues identically", "[optim]") {
  auto a = torch::arange(6, torch::kFloat32).requires_grad_(true);
  auto b = a.detach().clone().requires_grad_(true);
  tt::AdamW first({a}, {"x"}, tt::AdamWOptions{});
  tt::AdamW second({b}, {"x"}, tt::AdamWOptions{});
  a.mutable_grad() = torch::ones({6});
  first.step();
  second.load_state_dict(first.state_dict());
  {
    torch::NoGradGuard no_grad;
    b.copy_(a);
  }
  a.mutable_grad() = torch::full({6}, -2.0);
  b.mutable_grad() = torch::full({6}, -2.0);
  first.step();
  second.step();
  CHECK(torch::equal(a, b));
  std::map<std::string, torch::Tensor> missing;
  CHECK_THROWS_AS(second.load_state_dict(missing), tt::Error);
}

TEST_CASE("damaged AdamW state is a checkpoint error naming the tensor, not a NaN update later", "[optim]") {
  auto a = torch::arange(6, torch::kFloat32).requires_grad_(true);
  tt::AdamW first({a}, {"x"}, tt::AdamWOptions{});
  a.mutable_grad() = torch::ones({6});
  first.step();
  const std::map<std::string, torch::Tensor> good = first.state_dict();
  struct Damage {
    std::string key;
    torch::Tensor value;
    std::string says;
  };
  const std::vector<Damage> damages = {
      {"optim.x.exp_avg", torch::full({6}, std::nan("")), "holds non-finite values"},
      {"optim.x.exp_avg_sq", torch::full({6}, -1.0), "holds negative or non-finite values"},
      {"optim.x.step", torch::tensor(INFINITY), "holds negative or non-finite values"},
      {"optim.x.exp_avg", torch::zeros({6}, torch::kInt32), "is Int, not floating point"},
  };
  for (const Damage& damage : damages) {
    INFO(damage.key << ": " << damage.says);
    auto state = good;
    state[damage.key] = damage.value;
    tt::AdamW second({a.detach().clone().requires_grad_(true)}, {"x"}, tt::AdamWOptions{});
    const tt::Error error = tt::test::expect_error([&] { second.load_state_dict(state); });
    CHECK(error.code() == tt::ErrorCode::kCheckpoint);
    CHECK(std::string(error.what()) == "optimizer state `" + damage.key + "` " + damage.says);
  }
}

TEST_CASE("clip_grad_norm returns the norm and clips to max_norm", "[optim]") {
  auto p = torch::zeros({2}).requires_grad_(true);
  auto q = torch::zeros({1}).requires_grad_(true);
  p.mutable_grad() = torch::tensor({3.0f, 0.0f});
  q.mutable_grad() = torch::tensor({4.0f});
  auto norm = tt::clip_grad_norm({p, q}, 1.0);
  CHECK(std::abs(norm.item<float>() - 5.0f) < 1e-5);
  CHECK(std::abs(p.grad()[0].item<float>() - 0.6f) < 1e-4);
  CHECK(std::abs(q.grad()[0].item<float>() - 0.8f) < 1e-4);
  // Below the limit nothing changes.
  auto norm_after = tt::clip_grad_norm({p, q}, 10.0);
  CHECK(std::abs(norm_after.item<float>() - 1.0f) < 1e-4);
  CHECK(std::abs(p.grad()[0].item<float>() - 0.6f) < 1e-4);
}

TEST_CASE("clip_grad_norm of bf16 gradients (bf16 master weights) is computed in fp32", "[optim][bf16]") {
  auto w = torch::zeros({3}, torch::kBFloat16).requires_grad_(true);
  w.mutable_grad() = torch::ones({3}, torch::kBFloat16);
  // sqrt(3) = 1.7320508 in fp32; a bf16 norm would be 1.734375, 2.3e-3 off.
  auto norm = tt::clip_grad_norm({w}, 1.0);
  CHECK(norm.scalar_type() == torch::kFloat32);
  CHECK(std::abs(norm.item<double>() - std::sqrt(3.0)) < 1e-6);
  // Clipped in place, still bf16: each entry 1 / sqrt(3) to bf16's precision.
  CHECK(w.grad().scalar_type() == torch::kBFloat16);
  CHECK(std::abs(w.grad()[0].item<double>() - 1.0 / std::sqrt(3.0)) < 4e-3);
}
