// Dynamic loss scaling (core/loss_scaler): the scale halves and the step reports non-finite on an
// inf/NaN gradient, doubles after `window` clean steps, unscales gradients in place, round-trips
// through its state; a disabled scaler only detects. And TELETRON_FAULTS' parser (core/fault_injection).
#include "core/loss_scaler.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <torch/torch.h>

#include <limits>

#include "core/errors.h"
#include "core/fault_injection.h"
#include "test/test_util.h"

using Catch::Matchers::ContainsSubstring;

namespace {

torch::Tensor param_with_grad(std::initializer_list<float> grad) {
  torch::Tensor param = torch::zeros({static_cast<int64_t>(grad.size())}).requires_grad_(true);
  param.mutable_grad() = torch::tensor(std::vector<float>(grad));
  return param;
}

}  // namespace

TEST_CASE("loss scaling: unscale, halve on a non-finite gradient, double after the window", "[amp]") {
  tt::LossScalerOptions options;
  options.enabled = true;
  options.init_scale = 1024.0;
  options.window = 3;
  tt::LossScaler scaler(options, torch::kCPU);
  CHECK(scaler.scale().item<float>() == 1024.0f);
  CHECK(scaler.scale_loss(torch::tensor(0.5f)).item<float>() == 512.0f);

  // Clean: the gradients come back divided by the scale.
  torch::Tensor a = param_with_grad({1024.0f, -2048.0f});
  torch::Tensor b = param_with_grad({512.0f});
  torch::Tensor unused = torch::zeros({2}).requires_grad_(true);  // no grad: skipped
  torch::Tensor found = scaler.unscale_and_check({a, b, unused});
  CHECK(found.item<float>() == 0.0f);
  CHECK(torch::equal(a.grad(), torch::tensor({1.0f, -2.0f})));
  CHECK(torch::equal(b.grad(), torch::tensor({0.5f})));
  scaler.update(found);
  CHECK(scaler.scale().item<float>() == 1024.0f);

  // Overflow: found, the scale halves and the clean-step count restarts.
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    torch::Tensor c = param_with_grad({1.0f, bad});
    found = scaler.unscale_and_check({a, c});
    CHECK(found.item<float>() == 1.0f);
    scaler.update(found);
  }
  CHECK(scaler.scale().item<float>() == 256.0f);
  // Three clean steps in a row double it; two do not.
  for (int step = 1; step <= 3; ++step) {
    scaler.update(scaler.unscale_and_check({param_with_grad({1.0f})}));
    CHECK(scaler.scale().item<float>() == (step < 3 ? 256.0f : 512.0f));
  }

  // The state round-trips into a fresh scaler; a checkpoint without it leaves init_scale.
  const auto state = scaler.state_dict();
  REQUIRE(state.count("amp.scale") == 1);
  tt::LossScaler restored(options, torch::kCPU);
  REQUIRE(restored.load_state_dict(state));
  CHECK(restored.scale().item<float>() == 512.0f);
  tt::LossScaler fresh(options, torch::kCPU);
  CHECK_FALSE(fresh.load_state_dict({}));
  CHECK(fresh.scale().item<float>() == 1024.0f);
  auto broken = state;
  broken["amp.scale"] = torch::tensor(-1.0f);
  CHECK(tt::test::expect_error([&] { fresh.load_state_dict(broken); }).code() == tt::ErrorCode::kCheckpoint);
}

TEST_CASE("a disabled loss scaler passes the loss through and only detects non-finite gradients", "[amp]") {
  tt::LossScaler scaler(tt::LossScalerOptions{}, torch::kCPU);
  CHECK_FALSE(scaler.enabled());
  CHECK(scaler.scale_loss(torch::tensor(0.25f)).item<float>() == 0.25f);
  torch::Tensor a = param_with_grad({3.0f, std::numeric_limits<float>::infinity()});
  const torch::Tensor found = scaler.unscale_and_check({a});
  CHECK(found.item<float>() == 1.0f);
  CHECK(a.grad()[0].item<float>() == 3.0f);  // not rescaled
  scaler.update(found);
  CHECK(scaler.scale().item<float>() == 1.0f);
  CHECK(scaler.state_dict().empty());
}

TEST_CASE("TELETRON_FAULTS names fault kinds and steps; anything else is TT_ERR_CONFIG", "[amp][faults]") {
  const tt::FaultPlan plan = tt::FaultPlan::parse("nonfinite_grad@3,5;nonfinite_grad@9", "TELETRON_FAULTS");
  CHECK(plan.at(tt::Fault::kNonfiniteGrad, 3));
  CHECK(plan.at(tt::Fault::kNonfiniteGrad, 9));
  CHECK_FALSE(plan.at(tt::Fault::kNonfiniteGrad, 4));
  CHECK(plan.describe() == "nonfinite_grad@3,5,9");
  const tt::FaultPlan both = tt::FaultPlan::parse("oom@2;nonfinite_grad@4", "TELETRON_FAULTS");
  CHECK(both.at(tt::Fault::kOom, 2));
  CHECK_FALSE(both.at(tt::Fault::kOom, 4));
  CHECK(both.describe() == "nonfinite_grad@4;oom@2");
  const tt::FaultPlan graph = tt::FaultPlan::parse("graph_capture@7,12", "TELETRON_FAULTS");
  CHECK(graph.at(tt::Fault::kGraphCapture, 12));
  CHECK_FALSE(graph.at(tt::Fault::kOom, 12));
  CHECK(graph.describe() == "graph_capture@7,12");
  const tt::FaultPlan disk = tt::FaultPlan::parse("disk_full@3", "TELETRON_FAULTS");
  CHECK(disk.at(tt::Fault::kDiskFull, 3));
  CHECK_FALSE(disk.at(tt::Fault::kDiskFull, 2));
  CHECK_FALSE(disk.at(tt::Fault::kOom, 3));
  CHECK(disk.describe() == "disk_full@3");
  CHECK(tt::FaultPlan::parse("", "x").empty());
  for (const char* bad : {"nonfinite_grad", "oops@3", "nonfinite_grad@0", "nonfinite_grad@3x", "nonfinite_grad@", "nonfinite_grad@3,", "nonfinite_grad@3,,4"}) {
    INFO(bad);
    const tt::Error error = tt::test::expect_error([&] { tt::FaultPlan::parse(bad, "TELETRON_FAULTS"); });
    CHECK(error.code() == tt::ErrorCode::kConfig);
    CHECK_THAT(std::string(error.what()), ContainsSubstring("TELETRON_FAULTS"));
  }
}
