// Flow-matching objective pieces and the fused mix entry point (CPU reference; [gpu] kernel).
#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#include "cuda/ops.h"
#include "model/flow_matching.h"
#include "test/test_util.h"

TEST_CASE("sigma shift follows k s / (1 + (k - 1) s)", "[flow]") {
  auto s = torch::tensor({0.0f, 0.25f, 0.5f, 1.0f});
  auto shifted = tt::shift_sigmas(s, 7.0);
  CHECK(shifted[0].item<float>() == 0.0f);
  CHECK(std::abs(shifted[2].item<float>() - 0.875f) < 1e-6);
  CHECK(std::abs(shifted[3].item<float>() - 1.0f) < 1e-6);
  CHECK(torch::equal(tt::shift_sigmas(s, 1.0), s));
}

TEST_CASE("sampled sigmas lie in (0, 1) and follow the generator", "[flow]") {
  tt::FlowMatchingOptions options;
  auto gen_a = at::detail::createCPUGenerator(5);
  auto gen_b = at::detail::createCPUGenerator(5);
  auto a = tt::sample_sigmas(4096, options, gen_a);
  auto b = tt::sample_sigmas(4096, options, gen_b);
  CHECK(torch::equal(a, b));
  CHECK(a.min().item<float>() > 0.0f);
  CHECK(a.max().item<float>() < 1.0f);
  // Logit-normal(0, 1) has median 0.5; shift 7 moves it to 0.875.
  CHECK(std::abs(a.median().item<float>() - 0.875f) < 0.02f);
  options.sampling = tt::TimestepSampling::kUniform;
  options.shift = 1.0;
  auto u = tt::sample_sigmas(4096, options, gen_a);
  CHECK(std::abs(u.mean().item<float>() - 0.5f) < 0.03f);
}

TEST_CASE("noisy input and target are the flow-matching pair", "[flow]") {
  tt::FlowMatchingOptions options;
  auto gen = at::detail::createCPUGenerator(9);
  auto x0 = torch::randn({3, 4, 2, 5, 5});
  auto sample = tt::make_flow_matching_sample(x0, options, gen);
  // eps = target + x0, and noisy = (1 - s) x0 + s eps.
  auto eps = sample.target + x0;
  auto s = sample.sigmas.view({3, 1, 1, 1, 1});
  CHECK(torch::allclose(sample.noisy, (1 - s) * x0 + s * eps, 1e-5, 1e-5));
}

TEST_CASE("fused flow-matching mix kernel equals the CPU reference", "[gpu][flow]") {
  TT_REQUIRE_GPU();
  REQUIRE(tt::kernels_built());
  torch::manual_seed(2);
  auto x0 = torch::randn({3, 16, 5, 30, 52});
  auto noise = torch::randn_like(x0);
  auto sigmas = torch::rand({3});
  auto reference = tt::flow_matching_mix_reference(x0, noise, sigmas);
  auto gpu = tt::flow_matching_mix(x0.cuda(), noise.cuda(), sigmas.cuda());
  CHECK(torch::allclose(gpu.first.cpu(), reference.first, 1e-6, 1e-6));
  CHECK(torch::equal(gpu.second.cpu(), reference.second));
}
