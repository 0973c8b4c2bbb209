// Flow-matching objective pieces: keyed sigma and noise draws (Philox against its known answers,
// statistics, independence from the batch split) and the fused mix (CPU reference; [gpu] kernels).
#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#include "cuda/keyed_random.h"
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

TEST_CASE("sample keys are (step << 32) | index, made on the device asked for", "[flow]") {
  const torch::Tensor keys = tt::sample_keys(3, 5, 2, torch::kCPU);
  CHECK(keys.scalar_type() == torch::kInt64);
  CHECK(keys[0].item<int64_t>() == (int64_t{3} << 32) + 5);
  CHECK(keys[1].item<int64_t>() == (int64_t{3} << 32) + 6);
  CHECK(tt::sample_keys(0, 0, 0, torch::kCPU).numel() == 0);
  // From a step counter tensor: the same keys.
  CHECK(torch::equal(tt::sample_keys(torch::tensor(int64_t{3}), 5, 2), keys));
  CHECK(torch::equal(tt::sample_keys(torch::tensor(int64_t{123456}), 0, 7), tt::sample_keys(123456, 0, 7, torch::kCPU)));
}

TEST_CASE("sampled sigmas lie in (0, 1), follow their keys and the seed, not the batch", "[flow]") {
  tt::FlowMatchingOptions options;
  const torch::Tensor keys = tt::sample_keys(7, 0, 4096, torch::kCPU);
  auto a = tt::sample_sigmas(keys, options, 5);
  CHECK(torch::equal(a, tt::sample_sigmas(keys, options, 5)));
  CHECK(!torch::equal(a, tt::sample_sigmas(keys, options, 6)));
  CHECK(!torch::equal(a, tt::sample_sigmas(tt::sample_keys(8, 0, 4096, torch::kCPU), options, 5)));
  // Samples 100..109 drawn on their own get the values they get inside the big batch.
  CHECK(torch::equal(tt::sample_sigmas(tt::sample_keys(7, 100, 10, torch::kCPU), options, 5), a.slice(0, 100, 110)));
  CHECK(a.min().item<float>() > 0.0f);
  CHECK(a.max().item<float>() < 1.0f);
  // Logit-normal(0, 1) has median 0.5; shift 7 moves it to 0.875.
  CHECK(std::abs(a.median().item<float>() - 0.875f) < 0.02f);
  options.shift = 1.0;
  options.logit_mean = 1.0;  // sigmoid(N(1, 0.5^2)): median sigmoid(1) = 0.731
  options.logit_std = 0.5;
  CHECK(std::abs(tt::sample_sigmas(keys, options, 5).median().item<float>() - 0.7311f) < 0.02f);
  options.sampling = tt::TimestepSampling::kUniform;
  auto u = tt::sample_sigmas(keys, options, 5);
  CHECK(std::abs(u.mean().item<float>() - 0.5f) < 0.03f);
  CHECK(u.min().item<float>() > 0.0f);
  CHECK(u.max().item<float>() <= 1.0f);
}

TEST_CASE("Philox4x32-10 gives Random123's known answers", "[flow]") {
  using tt::keyed::Block;
  auto same = [](const Block& got, const Block& expected) {
    for (int i = 0; i < 4; ++i)
      if (got.v[i] != expected.v[i]) return false;
    return true;
  };
  CHECK(same(tt::keyed::philox(Block{{0, 0, 0, 0}}, 0, 0), Block{{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}}));
  CHECK(same(tt::keyed::philox(Block{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}}, 0xffffffffu, 0xffffffffu),
             Block{{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}}));
  CHECK(same(tt::keyed::philox(Block{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}}, 0xa4093822u, 0x299f31d0u),
             Block{{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}}));
}

TEST_CASE("keyed noise is standard normal, independent across samples and draws", "[flow]") {
  const torch::Tensor keys = tt::sample_keys(2, 0, 8, torch::kCPU);
  const torch::Tensor noise = tt::keyed_normal(keys, {3, 5, 7, 11}, 9, tt::keyed::kNoise);  // (8, 3, 5, 7, 11)
  REQUIRE(noise.sizes() == torch::IntArrayRef({8, 3, 5, 7, 11}));
  CHECK(std::abs(noise.mean().item<double>()) < 0.02);
  CHECK(std::abs(noise.std().item<double>() - 1.0) < 0.02);
  // Fourth moment of a standard normal: 3.
  CHECK(std::abs(noise.pow(4).mean().item<double>() - 3.0) < 0.15);
  const torch::Tensor rows = noise.flatten(1);  // (8, 1155)
  const torch::Tensor correlation = torch::corrcoef(rows);
  CHECK((correlation - torch::eye(8, correlation.options())).abs().max().item<double>() < 0.15);
  // Another draw of the same keys (the sigma's normal) is another sequence.
  const torch::Tensor other = tt::keyed_normal(keys, {3, 5, 7, 11}, 9, tt::keyed::kSigmaNormal).flatten(1);
  CHECK(torch::corrcoef(torch::stack({rows.flatten(), other.flatten()}))[0][1].abs().item<double>() < 0.02);
  // A row does not depend on the batch it is drawn in, nor on the elements after it.
  CHECK(torch::equal(tt::keyed_normal(keys.slice(0, 5, 6), {3, 5, 7, 11}, 9, tt::keyed::kNoise), noise.slice(0, 5, 6)));
  CHECK(torch::equal(tt::keyed_normal(keys, {6}, 9, tt::keyed::kNoise), rows.slice(1, 0, 6)));
}

TEST_CASE("noisy input and target are the flow-matching pair, the same in any batch split", "[flow]") {
  tt::FlowMatchingOptions options;
  auto x0 = torch::randn({4, 4, 2, 5, 5});
  const torch::Tensor keys = tt::sample_keys(11, 0, 4, torch::kCPU);
  auto sample = tt::make_flow_matching_sample(x0, options, keys, 9);
  // eps = target + x0, and noisy = (1 - s) x0 + s eps.
  auto eps = sample.target + x0;
  auto s = sample.sigmas.view({4, 1, 1, 1, 1});
  CHECK(torch::allclose(sample.noisy, (1 - s) * x0 + s * eps, 1e-5, 1e-5));
  // Two micro-batches of 2 (samples 0-1 and 2-3 of the step) draw what the batch of 4 draws.
  auto low = tt::make_flow_matching_sample(x0.slice(0, 0, 2), options, tt::sample_keys(11, 0, 2, torch::kCPU), 9);
  auto high = tt::make_flow_matching_sample(x0.slice(0, 2, 4), options, tt::sample_keys(11, 2, 2, torch::kCPU), 9);
  CHECK(torch::equal(torch::cat({low.noisy, high.noisy}), sample.noisy));
  CHECK(torch::equal(torch::cat({low.target, high.target}), sample.target));
  CHECK(torch::equal(torch::cat({low.sigmas, high.sigmas}), sample.sigmas));
}

TEST_CASE("keyed random kernels equal the host arithmetic", "[gpu][flow]") {
  TT_REQUIRE_GPU();
  REQUIRE(tt::kernels_built());
  const torch::Tensor keys = tt::sample_keys(123456, 40, 6, torch::kCPU);
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{}, {7}, {16, 9, 30, 53}}) {
    INFO("row shape of " << shape.size() << " dims");
    for (const uint32_t draw : {tt::keyed::kNoise, tt::keyed::kSigmaNormal}) {
      const torch::Tensor host = tt::keyed_normal(keys, shape, 77, draw);
      const torch::Tensor device = tt::keyed_normal(keys.cuda(), shape, 77, draw);
      REQUIRE(device.is_cuda());
      const double error = (device.cpu() - host).abs().max().item<double>();
      INFO("max |kernel - host| " << error);
      CHECK(error < 1e-5);
    }
    CHECK(torch::equal(tt::keyed_uniform(keys.cuda(), shape, 77, tt::keyed::kSigmaUniform).cpu(),
                       tt::keyed_uniform(keys, shape, 77, tt::keyed::kSigmaUniform)));
  }
  const torch::Tensor x0 = torch::randn({6, 16, 3, 8, 8});
  const auto on_host = tt::make_flow_matching_sample(x0, tt::FlowMatchingOptions{}, keys, 5);
  const auto on_gpu = tt::make_flow_matching_sample(x0.cuda(), tt::FlowMatchingOptions{}, keys.cuda(), 5);
  CHECK(torch::allclose(on_gpu.sigmas.cpu(), on_host.sigmas, 1e-6, 1e-6));
  CHECK(torch::allclose(on_gpu.target.cpu(), on_host.target, 1e-5, 1e-5));
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
