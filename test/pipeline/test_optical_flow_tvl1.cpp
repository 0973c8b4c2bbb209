// TV-L1 optical flow, the tensor-op reference (pipeline/optical_flow_tvl1): end-point error on pairs
// whose flow is known exactly (a smooth texture evaluated at moved coordinates, so no resampling
// error enters the ground truth), a still pair, a batch equal to its single pairs, the warp, and
// the errors for bad input.
#include "pipeline/optical_flow_tvl1.h"

#include <catch2/catch_test_macros.hpp>
#include <torch/torch.h>

#include <cmath>

#include "core/errors.h"
#include "test/test_util.h"

namespace {

// A smooth texture in [0.05, 0.95] at pixel coordinates (x, y): sums of sinusoids of several
// orientations and periods (6-20 px), so that every direction of motion is observable.
torch::Tensor texture(const torch::Tensor& x, const torch::Tensor& y) {
  return 0.5 + 0.15 * torch::sin(0.31 * x + 0.17 * y) + 0.15 * torch::cos(0.23 * x - 0.41 * y) +
         0.1 * torch::sin(0.11 * x + 0.52 * y + 1.3) + 0.05 * torch::cos(0.67 * x + 0.05 * y);
}

struct Pair {
  torch::Tensor i0, i1, flow;  // (H, W), (H, W), (2, H, W)
};

// i1 is i0 moved by the map m: i1(m(q)) = i0(q), so the flow at p is m(p) - p. Built by evaluating the
// texture at m⁻¹(p) for i1. `inverse` maps (x, y) grids to the source coordinates.
template <typename Forward, typename Inverse>
Pair moved(int64_t h, int64_t w, Forward forward, Inverse inverse) {
  auto ys = torch::arange(h, torch::kFloat64).view({h, 1}).expand({h, w});
  auto xs = torch::arange(w, torch::kFloat64).view({1, w}).expand({h, w});
  Pair p;
  p.i0 = texture(xs, ys).to(torch::kFloat32);
  auto [sx, sy] = inverse(xs, ys);
  p.i1 = texture(sx, sy).to(torch::kFloat32);
  auto [fx, fy] = forward(xs, ys);
  p.flow = torch::stack({fx - xs, fy - ys}).to(torch::kFloat32);
  return p;
}

// Mean end-point error away from a border of `margin` pixels (where content enters or leaves).
double epe(const torch::Tensor& flow, const torch::Tensor& truth, int64_t margin) {
  auto d = (flow - truth).slice(1, margin, -margin).slice(2, margin, -margin);
  return torch::sqrt((d * d).sum(0)).mean().item<double>();
}

}  // namespace

TEST_CASE("TV-L1 finds a sub-pixel translation, a rotation and a zoom of a smooth texture", "[flow][tvl1]") {
  const int64_t h = 64, w = 80;
  SECTION("translation by (1.6, -0.7) px") {
    const double dx = 1.6, dy = -0.7;
    Pair p = moved(
        h, w, [&](auto x, auto y) { return std::make_pair(x + dx, y + dy); },
        [&](auto x, auto y) { return std::make_pair(x - dx, y - dy); });
    const torch::Tensor flow = tt::tvl1_flow(p.i0, p.i1);
    REQUIRE(flow.sizes() == torch::IntArrayRef({2, h, w}));
    const double error = epe(flow, p.flow, 6);
    INFO("EPE " << error << " px");
    CHECK(error < 0.05);
  }
  SECTION("translation by (5.3, 3.2) px: beyond one level's reach, found coarse to fine") {
    const double dx = 5.3, dy = 3.2;
    Pair p = moved(
        h, w, [&](auto x, auto y) { return std::make_pair(x + dx, y + dy); },
        [&](auto x, auto y) { return std::make_pair(x - dx, y - dy); });
    const double error = epe(tt::tvl1_flow(p.i0, p.i1), p.flow, 10);
    INFO("EPE " << error << " px");
    CHECK(error < 0.1);
    // One level only (no pyramid): the same warps do not get there.
    tt::TvL1Options flat;
    flat.min_size = 1000;
    const double flat_error = epe(tt::tvl1_flow(p.i0, p.i1, flat), p.flow, 10);
    INFO("EPE without the pyramid " << flat_error << " px");
    CHECK(flat_error > 4 * error);
  }
  SECTION("rotation by 3 degrees about the centre") {
    const double a = 3.0 * M_PI / 180.0, cx = (w - 1) / 2.0, cy = (h - 1) / 2.0;
    Pair p = moved(
        h, w,
        [&](auto x, auto y) {
          return std::make_pair(cx + std::cos(a) * (x - cx) - std::sin(a) * (y - cy),
                                cy + std::sin(a) * (x - cx) + std::cos(a) * (y - cy));
        },
        [&](auto x, auto y) {
          return std::make_pair(cx + std::cos(a) * (x - cx) + std::sin(a) * (y - cy),
                                cy - std::sin(a) * (x - cx) + std::cos(a) * (y - cy));
        });
    const double error = epe(tt::tvl1_flow(p.i0, p.i1), p.flow, 8);
    INFO("EPE " << error << " px; the largest displacement in the interior is about 1.9 px");
    CHECK(error < 0.1);
  }
  SECTION("zoom by 4 % about the centre") {
    const double s = 1.04, cx = (w - 1) / 2.0, cy = (h - 1) / 2.0;
    Pair p = moved(
        h, w, [&](auto x, auto y) { return std::make_pair(cx + s * (x - cx), cy + s * (y - cy)); },
        [&](auto x, auto y) { return std::make_pair(cx + (x - cx) / s, cy + (y - cy) / s); });
    const double error = epe(tt::tvl1_flow(p.i0, p.i1), p.flow, 8);
    INFO("EPE " << error << " px");
    CHECK(error < 0.1);
  }
}

TEST_CASE("TV-L1: a still pair has no flow; a batch gives its pairs' flows", "[flow][tvl1]") {
  const int64_t h = 40, w = 48;
  Pair still = moved(
      h, w, [](auto x, auto y) { return std::make_pair(x, y); }, [](auto x, auto y) { return std::make_pair(x, y); });
  CHECK(tt::tvl1_flow(still.i0, still.i1).abs().max().item<double>() < 1e-4);
  Pair moving = moved(
      h, w, [](auto x, auto y) { return std::make_pair(x + 0.8, y + 0.4); },
      [](auto x, auto y) { return std::make_pair(x - 0.8, y - 0.4); });
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
