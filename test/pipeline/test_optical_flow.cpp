// The flow stage's estimator (pipeline/optical_flow): which algorithm runs for a configuration on
// a device (nvofa's fallback, raft's weights), and that each path gives its algorithm's flow: TV-L1
// on the frames' device or the host, RAFT (random raft_small weights saved as a user would) with
// the frames fitted to its multiples of 8 and the flow scaled back. NVOFA itself runs only on the
// GPU ([gpu] cases here and in test_optical_flow_nvofa.cpp).
#include "pipeline/optical_flow.h"

#include <torch/torch.h>
#include <catch2/catch_test_macros.hpp>

#include <cstdlib>
#include <string>

#include "core/errors.h"
#include "core/safetensors.h"
#include "model/raft.h"
#include "pipeline/flow_pairs.h"
#include "test/test_util.h"

namespace {

using tt::translated_pair;
using tt::test::TempDir;

// A raft_small with LibTorch's random initialisation, saved under torchvision's keys.
std::string save_random_raft_small(const TempDir& dir) {
  torch::manual_seed(5);
  tt::Raft raft(tt::raft_preset("raft_small"));
  tt::safetensors::TensorMap tensors;
  for (auto& [key, tensor] : raft->torchvision_tensors()) tensors[key] = tensor.detach().clone();
  const std::string path = dir / "raft_small.safetensors";
  tt::safetensors::save(path, tensors);
  return path;
}

}  // namespace

TEST_CASE("optical flow: nvofa on a CPU device falls back as configured, saying why; raft needs weights",
          "[flow]") {
  tt::FlowOptions options;  // nvofa, fallback tvl1
  tt::FlowChoice choice = tt::resolve_flow(options, torch::kCPU);
  CHECK(choice.algorithm == "tvl1");
  CHECK(choice.reason.find("NVOFA needs a CUDA device") != std::string::npos);
  options.fallback = "none";
  choice = tt::resolve_flow(options, torch::kCPU);
  CHECK(choice.algorithm == "none");
  tt::FlowEstimator off(options, torch::kCPU);
  CHECK_FALSE(off.enabled());
  CHECK(tt::test::expect_error([&] {
          off.flow(torch::rand({8, 8}), torch::rand({8, 8}));
        }).code() == tt::ErrorCode::kConfig);
  options.fallback = "error";
  const tt::Error refused = tt::test::expect_error([&] { tt::resolve_flow(options, torch::kCPU); });
  CHECK(refused.code() == tt::ErrorCode::kConfig);
  CHECK(std::string(refused.what()).find("data_pipeline.optical_flow.algorithm") != std::string::npos);
  CHECK(refused.hint().find("fallback: tvl1") != std::string::npos);

  // The configured algorithm runs as it is where it can.
  options = {};
  options.algorithm = "tvl1";
  CHECK(tt::resolve_flow(options, torch::kCPU).algorithm == "tvl1");
  CHECK(tt::resolve_flow(options, torch::kCPU).reason.empty());
  options.algorithm = "raft";
  const tt::Error no_weights = tt::test::expect_error([&] { tt::resolve_flow(options, torch::kCPU); });
  CHECK(no_weights.code() == tt::ErrorCode::kConfig);
  CHECK(std::string(no_weights.what()).find("raft needs trained weights") != std::string::npos);
  CHECK(no_weights.hint().find("nvofa or tvl1") != std::string::npos);
  options.raft_weights = "/nonexistent/raft.safetensors";
  CHECK(tt::test::expect_error([&] { tt::resolve_flow(options, torch::kCPU); }).code() ==
        tt::ErrorCode::kConfig);
  options = {};
  options.algorithm = "farneback";
  CHECK(tt::test::expect_error([&] { tt::resolve_flow(options, torch::kCPU); }).code() ==
        tt::ErrorCode::kConfig);
}

TEST_CASE("optical flow: the TV-L1 path gives tvl1_flow's flow, on the frames' device or the host",
          "[flow][tvl1]") {
  const tt::FlowPair pair = translated_pair(40, 48, 1.5, -0.5);
  tt::FlowOptions options;
  options.algorithm = "tvl1";
  tt::FlowEstimator estimator(options, torch::kCPU);
  const torch::Tensor expected = tt::tvl1_flow(pair.i0, pair.i1, options.tvl1);
  CHECK(torch::equal(estimator.flow(pair.i0, pair.i1), expected));
  options.warp_mode = "cpu";
  tt::FlowEstimator host(options, torch::kCPU);
  CHECK(torch::equal(host.flow(pair.i0.unsqueeze(0), pair.i1.unsqueeze(0)).squeeze(0), expected));
  CHECK(tt::flow_epe(expected, pair.flow, 4) < 0.1);
  CHECK(tt::test::expect_error([&] { estimator.flow(pair.i0, pair.i1.slice(0, 0, 20)); }).code() ==
        tt::ErrorCode::kData);
}

TEST_CASE("optical flow: the default TV-L1 finds a 5-px translation of the multi-scale texture (the nvofa test's pair)",
          "[flow][tvl1]") {
  // The pair the GPU test gives NVOFA and then, after the fallback, TV-L1 with these options.
  const tt::FlowPair pair = translated_pair(240, 320, 5.3, 3.2, 1.0, tt::PairTexture::kRich);
  tt::FlowOptions options;
  options.algorithm = "tvl1";
  tt::FlowEstimator estimator(options, torch::kCPU);
  const double epe = tt::flow_epe(estimator.flow(pair.i0, pair.i1), pair.flow, 16);
  INFO("TV-L1 EPE " << epe);
  CHECK(epe < 0.5);
}

TEST_CASE(
    "optical flow: RAFT weights load by their keys; frames are fitted to RAFT's sizes and the flow scaled "
    "back",
    "[flow][raft]") {
  TempDir dir("tt_flow_raft");
  tt::FlowOptions options;
  options.algorithm = "raft";
  options.raft_weights = save_random_raft_small(dir);
  options.raft_updates = 2;
  tt::FlowEstimator estimator(options, torch::kCPU);
  REQUIRE(estimator.algorithm() == "raft");
  tt::Raft raft = tt::load_raft(*options.raft_weights, tt::raft_preset("raft_small"));

  // At RAFT's own sizes (multiples of 8, at least 128) the estimator is RAFT on gray RGB in [-1, 1].
  torch::manual_seed(1);
  const torch::Tensor a = torch::rand({2, 128, 136}), b = torch::rand({2, 128, 136});
  auto rgb = [](const torch::Tensor& gray) {
    return (gray * 2 - 1).unsqueeze(1).expand({-1, 3, -1, -1}).contiguous();
  };
  torch::Tensor direct;
  {
    torch::NoGradGuard no_grad;
    direct = raft->forward(rgb(a), rgb(b), 2);
  }
  const torch::Tensor flow = estimator.flow(a, b);
  CHECK(flow.sizes() == torch::IntArrayRef({2, 2, 128, 136}));
  CHECK(torch::allclose(flow, direct, 1e-5, 1e-5));

  // Other sizes: resized to the next fitting size, the flow resized back and scaled per axis, so a
  // flow that is the same everywhere keeps its length in the frames' pixels. Checked through a
  // picture that RAFT sees at twice its size: (64, 64) -> (128, 128), its smallest.
  const torch::Tensor small_a = torch::rand({1, 64, 64}), small_b = torch::rand({1, 64, 64});
  const torch::Tensor small = estimator.flow(small_a, small_b);
  CHECK(small.sizes() == torch::IntArrayRef({1, 2, 64, 64}));
  namespace F = torch::nn::functional;
  auto up = [](const torch::Tensor& x) {
    return F::interpolate(x.unsqueeze(1), F::InterpolateFuncOptions()
                                              .size(std::vector<int64_t>{128, 128})
                                              .mode(torch::kBilinear)
                                              .align_corners(false))
        .squeeze(1);
  };
  torch::Tensor big;
  {
    torch::NoGradGuard no_grad;
    big = raft->forward(rgb(up(small_a)), rgb(up(small_b)), 2);
  }
  // The mean flow over the picture: half the big picture's, axis by axis.
  const torch::Tensor mean_small = small.mean({2, 3}), mean_big = big.mean({2, 3});
  INFO("small " << mean_small << ", big " << mean_big);
  CHECK(torch::allclose(mean_small, mean_big * 0.5, 1e-3, 1e-3));

  // raft_small weights asked to be something else do not load: a config error naming the key.
  const std::string bad = dir / "bad.safetensors";
  tt::safetensors::save(bad, {{"feature_encoder.convnormrelu.0.weight", torch::zeros({3})}});
  options.raft_weights = bad;
  const tt::Error refused = tt::test::expect_error([&] { tt::FlowEstimator broken(options, torch::kCPU); });
  CHECK(refused.code() == tt::ErrorCode::kConfig);
  CHECK(std::string(refused.what()).find("data_pipeline.optical_flow.weights") != std::string::npos);
}

TEST_CASE(
    "optical flow: nvofa on the GPU runs the engine, or falls back to TV-L1 saying why; frames the engine "
    "refuses go to TV-L1 from then on",
    "[flow][nvofa][gpu]") {
  TT_REQUIRE_GPU();
  tt::FlowOptions options;
  tt::FlowEstimator estimator(options, torch::Device(torch::kCUDA, 0));
  std::string why;
  const bool engine = tt::nvofa_available(&why, 0);
  INFO(why);
  CHECK(estimator.algorithm() == (engine ? "nvofa" : "tvl1"));
  const tt::FlowPair pair = translated_pair(240, 320, 5.3, 3.2, 1.0, tt::PairTexture::kRich);
  const torch::Tensor flow = estimator.flow(pair.i0.cuda(), pair.i1.cuda());
  CHECK(flow.is_cuda());
  const double epe = tt::flow_epe(flow, pair.flow, 16);
  INFO(estimator.algorithm() << " EPE " << epe);
  CHECK(epe < 0.5);
  if (!engine) return;
  // Frames below the engine's smallest size: it refuses them, and with the tvl1 fallback the
  // estimator goes on with TV-L1 (saying so), for this call and the next ones.
  const torch::Tensor tiny = torch::rand({2, 8, 8}, torch::TensorOptions().device(torch::kCUDA));
  const torch::Tensor small_flow = estimator.flow(tiny, tiny);
  CHECK(small_flow.sizes() == torch::IntArrayRef({2, 2, 8, 8}));
  CHECK(estimator.algorithm() == "tvl1");
  CHECK(estimator.fallback_reason().find("nvofa failed") != std::string::npos);
  CHECK(tt::flow_epe(estimator.flow(pair.i0.cuda(), pair.i1.cuda()), pair.flow, 16) < 0.5);
  // With fallback error the refusal is the caller's.
  tt::FlowOptions strict;
  strict.fallback = "error";
  tt::FlowEstimator engine_only(strict, torch::Device(torch::kCUDA, 0));
  CHECK(tt::test::expect_error([&] { engine_only.flow(tiny, tiny); }).code() == tt::ErrorCode::kData);
}

TEST_CASE(
    "optical flow: RAFT on the GPU replays one CUDA graph per shape, equal to the eager forward; bf16 "
    "autocast "
    "stays close to fp32",
    "[flow][raft][gpu]") {
  TT_REQUIRE_GPU();
  TempDir dir("tt_flow_raft_gpu");
  tt::FlowOptions options;
  options.algorithm = "raft";
  options.raft_weights = save_random_raft_small(dir);
  options.raft_updates = 4;
  options.raft_bf16 = false;
  options.raft_graphs = false;
  const torch::Device cuda(torch::kCUDA, 0);
  tt::FlowEstimator eager(options, cuda);
  options.raft_graphs = true;
  tt::FlowEstimator graphs(options, cuda);
  torch::manual_seed(2);
  for (int k = 0; k < 3; ++k) {  // the first call runs eagerly and captures, the next two replay
    const torch::Tensor a = torch::rand({2, 128, 160}).to(cuda), b = torch::rand({2, 128, 160}).to(cuda);
    const torch::Tensor expected = eager.flow(a, b), got = graphs.flow(a, b);
    const double scale = expected.abs().max().item<double>();
    INFO("call " << k << ": max |graph - eager| " << (got - expected).abs().max().item<double>() << " of "
                 << scale);
    CHECK((got - expected).abs().max().item<double>() <= 1e-4 * std::max(1.0, scale));
  }
  CHECK(graphs.raft_replays() == 2);
  CHECK(graphs.raft_eager_shapes() == 0);
  // Another shape: captured of its own.
  const torch::Tensor c = torch::rand({1, 136, 144}).to(cuda);
  CHECK(torch::allclose(graphs.flow(c, c.flip(1)), eager.flow(c, c.flip(1)), 1e-4, 1e-4));
  graphs.flow(c, c.flip(1));
  CHECK(graphs.raft_replays() == 3);

  // bf16 autocast: the convolutions round to 8 mantissa bits; the flow stays within a tenth of
  // fp32's largest value (test_raft's bound for torchvision parity under bf16).
  options.raft_bf16 = true;
  tt::FlowEstimator half(options, cuda);
  const torch::Tensor a = torch::rand({1, 128, 160}).to(cuda), b = torch::rand({1, 128, 160}).to(cuda);
  const torch::Tensor fp32 = eager.flow(a, b), bf16 = half.flow(a, b);
  CHECK(bf16.scalar_type() == torch::kFloat32);
  const double relative = (bf16 - fp32).abs().max().item<double>() / fp32.abs().max().item<double>();
  INFO("bf16 relative difference " << relative);
  CHECK(relative < 0.1);
}
