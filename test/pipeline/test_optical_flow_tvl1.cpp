// TV-L1 optical flow, the tensor-op reference (pipeline/optical_flow_tvl1): end-point error on pairs
// whose flow is known exactly (a smooth texture evaluated at moved coordinates, so no resampling
// error enters the ground truth), a still pair, a batch equal to its single pairs, the warp, and
// the errors for bad input; on the GPU, the CUDA kernels against the reference.
#include "pipeline/optical_flow_tvl1.h"

#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "core/errors.h"
#include "pipeline/flow_pairs.h"
#include "test/test_util.h"

using tt::flow_epe;
using tt::FlowPair;
using tt::moved_pair;
using tt::rotated_pair;
using tt::translated_pair;

TEST_CASE("TV-L1 finds a sub-pixel translation, a rotation and a zoom of a smooth texture", "[flow][tvl1]") {
  const int64_t h = 64, w = 80;
  SECTION("translation by (1.6, -0.7) px") {
    FlowPair p = translated_pair(h, w, 1.6, -0.7);
    const torch::Tensor flow = tt::tvl1_flow(p.i0, p.i1);
    REQUIRE(flow.sizes() == torch::IntArrayRef({2, h, w}));
    const double error = flow_epe(flow, p.flow, 6);
    INFO("EPE " << error << " px");
    CHECK(error < 0.05);
  }
  SECTION("translation by (5.3, 3.2) px: beyond one level's reach, found coarse to fine") {
    FlowPair p = translated_pair(h, w, 5.3, 3.2);
    const double error = flow_epe(tt::tvl1_flow(p.i0, p.i1), p.flow, 10);
    INFO("EPE " << error << " px");
    CHECK(error < 0.1);
    // One level only (no pyramid): the same warps do not get there.
    tt::TvL1Options flat;
    flat.min_size = 1000;
    const double flat_error = flow_epe(tt::tvl1_flow(p.i0, p.i1, flat), p.flow, 10);
    INFO("EPE without the pyramid " << flat_error << " px");
    CHECK(flat_error > 4 * error);
  }
  SECTION("rotation by 3 degrees about the centre") {
    FlowPair p = rotated_pair(h, w, 3.0);
    const double error = flow_epe(tt::tvl1_flow(p.i0, p.i1), p.flow, 8);
    INFO("EPE " << error << " px; the largest displacement in the interior is about 1.9 px");
    CHECK(error < 0.1);
  }
  SECTION("zoom by 4 % about the centre") {
    const double s = 1.04, cx = (w - 1) / 2.0, cy = (h - 1) / 2.0;
    FlowPair p = moved_pair(
        h, w, [&](auto x, auto y) { return std::make_pair(cx + s * (x - cx), cy + s * (y - cy)); },
        [&](auto x, auto y) { return std::make_pair(cx + (x - cx) / s, cy + (y - cy) / s); });
    const double error = flow_epe(tt::tvl1_flow(p.i0, p.i1), p.flow, 8);
    INFO("EPE " << error << " px");
    CHECK(error < 0.1);
  }
}

TEST_CASE("TV-L1: a still pair has no flow; a batch gives its pairs' flows", "[flow][tvl1]") {
  const int64_t h = 40, w = 48;
  FlowPair still = translated_pair(h, w, 0.0, 0.0);
  CHECK(tt::tvl1_flow(still.i0, still.i1).abs().max().item<double>() < 1e-4);
  FlowPair moving = translated_pair(h, w, 0.8, 0.4);
  const torch::Tensor batch = tt::tvl1_flow(torch::stack({still.i0, moving.i0}), torch::stack({still.i1, moving.i1}));
  REQUIRE(batch.sizes() == torch::IntArrayRef({2, 2, h, w}));
  CHECK(torch::allclose(batch[0], tt::tvl1_flow(still.i0, still.i1), 1e-5, 1e-5));
  CHECK(torch::allclose(batch[1], tt::tvl1_flow(moving.i0, moving.i1), 1e-5, 1e-5));
}

TEST_CASE("warp_by_flow samples at p + flow, taking edge values beyond the image", "[flow][tvl1]") {
  auto image = torch::arange(12, torch::kFloat32).view({1, 3, 4});  // value = 4 y + x
  auto flow = torch::zeros({1, 2, 3, 4});
  flow.select(1, 0).fill_(0.5);   // half a pixel right
  flow.select(1, 1).fill_(-1.0);  // one row up
  const torch::Tensor warped = tt::warp_by_flow(image, flow);
  // Row 1, column 1 reads (1.5, 0): 1.5; row 0 reads beyond the top: the edge row; column 3 reads x 3.5 -> 3.
  CHECK(std::abs(warped[0][1][1].item<double>() - 1.5) < 1e-6);
  CHECK(std::abs(warped[0][0][1].item<double>() - 1.5) < 1e-6);
  CHECK(std::abs(warped[0][2][3].item<double>() - 7.0) < 1e-6);
}

TEST_CASE("TV-L1 refuses mismatched or tiny frames (TT_ERR_DATA) and bad options (TT_ERR_CONFIG)", "[flow][tvl1]") {
  auto a = torch::rand({16, 16});
  CHECK(tt::test::expect_error([&] { tt::tvl1_flow(a, torch::rand({16, 17})); }).code() == tt::ErrorCode::kData);
  CHECK(tt::test::expect_error([&] { tt::tvl1_flow(a, a.to(torch::kFloat64)); }).code() == tt::ErrorCode::kData);
  CHECK(tt::test::expect_error([&] { tt::tvl1_flow(torch::rand({1, 16}), torch::rand({1, 16})); }).code() ==
        tt::ErrorCode::kData);
  CHECK(tt::test::expect_error([&] { tt::tvl1_flow(a.to(torch::kInt32), a.to(torch::kInt32)); }).code() ==
        tt::ErrorCode::kData);
  tt::TvL1Options bad;
  bad.tau = 0.5;
  CHECK(tt::test::expect_error([&] { tt::tvl1_flow(a, a, bad); }).code() == tt::ErrorCode::kConfig);
}

TEST_CASE("TV-L1's CUDA kernels give the CPU reference's flow and its accuracy; the tensor-op reference on the GPU "
          "too", "[flow][tvl1][gpu]") {
  TT_REQUIRE_GPU();
  const int64_t h = 72, w = 96;
  const std::vector<FlowPair> pairs = {translated_pair(h, w, 0.0, 0.0), translated_pair(h, w, 5.3, 3.2),
                                       rotated_pair(h, w, 3.0)};
  std::vector<torch::Tensor> first, second, truth;
  for (const FlowPair& p : pairs) {
    first.push_back(p.i0);
    second.push_back(p.i1);
    truth.push_back(p.flow);
  }
  const torch::Tensor i0 = torch::stack(first), i1 = torch::stack(second);
  const torch::Tensor reference = tt::tvl1_flow(i0, i1);  // CPU, tensor ops
  const torch::Tensor kernels = tt::tvl1_flow(i0.cuda(), i1.cuda()).cpu();
  tt::TvL1Options tensor_ops;
  tensor_ops.kernels = false;
  const torch::Tensor on_gpu = tt::tvl1_flow(i0.cuda(), i1.cuda(), tensor_ops).cpu();
  REQUIRE(kernels.sizes() == reference.sizes());
  REQUIRE(kernels.scalar_type() == torch::kFloat32);
  for (size_t n = 0; n < pairs.size(); ++n) {
    const auto k = static_cast<int64_t>(n);
    const double mean_gap = (kernels[k] - reference[k]).abs().mean().item<double>();
    const double max_gap = (kernels[k] - reference[k]).abs().max().item<double>();
    const double ops_gap = (on_gpu[k] - reference[k]).abs().max().item<double>();
    const double kernel_epe = flow_epe(kernels[k], truth[n], 10), reference_epe = flow_epe(reference[k], truth[n], 10);
    INFO("pair " << n << ": kernels against the CPU reference mean " << mean_gap << " px, max " << max_gap
                 << " px; tensor ops on the GPU max " << ops_gap << " px; EPE kernels " << kernel_epe
                 << " px, reference " << reference_epe << " px");
    // fp32 arithmetic in another order (FMA contraction, the warp's coordinate path) over 5 levels
    // of 50 iterations: the flows agree to a few thousandths of a pixel, the accuracy to 1 %.
    CHECK(mean_gap < 2e-3);
    CHECK(max_gap < 2e-2);
    CHECK(ops_gap < 2e-2);
    CHECK(kernel_epe <= reference_epe * 1.01 + 1e-3);
  }
}
