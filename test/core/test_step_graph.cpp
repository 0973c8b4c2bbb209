// Tests for core/step_graph on the GPU (its captures go through core/graph_capture's capture_graph,
// which block graphs share): what the caching allocator keeps cached from the eager
// steps must not make a capture run out of memory. The allocator keeps freed blocks per stream and
// cannot give cached blocks back to the device while a capture is under way, so the capture
// stream's own eager step (the step before its capture) must not leave its blocks cached there:
// the seed config's capture failed with 117 GiB reserved and unallocated (2026-12-02, H200).
#include "core/step_graph.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

#include <cmath>
#include <string>
#include <vector>

#include "test/test_util.h"

#ifdef TELETRON_WITH_CUDA
TEST_CASE("a step whose working memory is most of what the process may use is captured after eager steps that "
          "left the memory cached", "[gpu][graph]") {
  TT_REQUIRE_GPU();
  const c10::DeviceIndex device = 0;
  size_t free_bytes = 0;
  size_t total_bytes = 0;
  REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
  constexpr int64_t kGiB = int64_t{1} << 30;
  // This process may hold 2.5 GiB (ctest runs other GPU tests beside it); the step needs 1.5 GiB
  // of scratch, so the capture fits only if the eager step's 1.5 GiB went back first.
  const int64_t cap = 5 * kGiB / 2;
  REQUIRE(free_bytes > static_cast<size_t>(cap));
  // The allocator is set up by the first CUDA tensor; its fraction can be set only after that.
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA, device);
  (void)torch::zeros({1}, on_gpu);
  c10::cuda::CUDACachingAllocator::emptyCache();
  c10::cuda::CUDACachingAllocator::setMemoryFraction(static_cast<double>(cap) / static_cast<double>(total_bytes),
                                                     device);
  struct Restore {
    c10::DeviceIndex device;
    ~Restore() { c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, device); }
  } restore{device};

  const torch::Tensor result = torch::zeros({1}, on_gpu);
  const tt::StepGraphs::Body body = [&](const std::vector<torch::Tensor>& inputs) {
    // 1.5 GiB of scratch, written and read: its sum is 3 * elements * input.
    torch::Tensor scratch = torch::empty({3 * kGiB / 2 / 4}, on_gpu);
    scratch.fill_(1.0f);
    scratch.mul_(inputs[0]);
    result.copy_(scratch.sum().reshape({1}));
  };
  tt::StepGraphOptions options;
  options.policy.warmup_steps = 2;
  options.policy.capture_frequency = 1000;
  options.policy.retry = 0;
  tt::StepGraphs graphs(options, torch::Device(torch::kCUDA, device));
  const std::string key = "scratch 1.5 GiB";
  const double elements = static_cast<double>(3 * kGiB / 2 / 4);
  for (int step = 0; step < 5; ++step) {
    const torch::Tensor input = torch::full({1}, static_cast<float>(step + 1), on_gpu);
    graphs.run(key, {input}, body, /*eager_only=*/false, /*fail_capture=*/false);
    INFO("step " << step);
    const double expected = elements * (step + 1);
    CHECK(std::abs(result.item<double>() - expected) <= 1e-5 * expected);
  }
  graphs.flush();
  const tt::StepGraphCounts counts = graphs.counts();
  INFO(graphs.describe());
  CHECK(counts.failed_captures == 0);
  CHECK(counts.captures == 1);
  CHECK(counts.replays == 2);
}
#endif
