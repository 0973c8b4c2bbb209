// Tests for core/step_graph: the room a capture must leave (emulated, then on the GPU), and on the
// GPU (its captures go through core/graph_capture's capture_graph,
// which block graphs share): what the caching allocator keeps cached from the eager
// steps must not make a capture run out of memory. The allocator keeps freed blocks per stream and
// cannot give cached blocks back to the device while a capture is under way, so the capture
// stream's own eager step (the step before its capture) must not leave its blocks cached there:
// the seed config's capture failed with 117 GiB reserved and unallocated (2026-12-02, H200).
#include "core/step_graph.h"

#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDACachingAllocator.h>
#include <cuda_runtime_api.h>
#endif

#include <chrono>
#include <cmath>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "test/test_util.h"

// Emulated graphs (no GPU): a capture must leave the shapes still run eagerly room for their
// working sets (StepGraphOptions::memory_limit), counting what the graphs' shared pool already has free.
TEST_CASE(
    "step graphs (emulated): a shape is captured only where its graph leaves the other shapes' eager steps "
    "room",
    "[graph]") {
  struct Outcome {
    tt::StepGraphCounts counts;
    std::string described;
  };
  // The shapes one step each in turn, six rounds; working sets in bytes. Emulated, the graphs'
  // shared pool is as large as the largest captured working set.
  auto run = [](const std::vector<std::pair<std::string, int64_t>>& shapes, int64_t limit) {
    tt::StepGraphOptions options;
    options.policy.warmup_steps = 2;
    options.policy.capture_frequency = 1000;
    options.policy.retry = 0;
    options.emulate_speedup = 2.0;
    options.memory_limit = limit;
    options.emulate_working_set = [shapes](const std::string& key) {
      for (const auto& [name, bytes] : shapes)
        if (name == key) return bytes;
      return int64_t{-1};
    };
    tt::StepGraphs graphs(options, torch::Device(torch::kCPU));
    const torch::Tensor total = torch::zeros({1});
    const tt::StepGraphs::Body body = [&](const std::vector<torch::Tensor>& inputs) {
      total.add_(inputs[0]);
    };
    for (int step = 0; step < 6; ++step)
      for (const auto& [key, bytes] : shapes) graphs.run(key, {torch::ones({1})}, body, false, false);
    CHECK(total.item<float>() ==
          static_cast<float>(6 * shapes.size()));  // every step ran once, whichever way
    return Outcome{graphs.counts(), graphs.describe()};
  };
  SECTION("a's graph (4) leaves b's eager step (5) room in 10; then b's capture grows the pool by 1") {
    const Outcome both = run({{"a", 4}, {"b", 5}}, 10);
    INFO(both.described);
    CHECK(both.counts.captures == 2);
    CHECK(both.counts.no_room == 0);
  }
  SECTION("a's graph (4) and b's eager step (7) exceed 10: a runs eagerly; so does b (7 + a's 4)") {
    const Outcome neither = run({{"a", 4}, {"b", 7}}, 10);
    INFO(neither.described);
    CHECK(neither.counts.captures == 0);
    CHECK(neither.counts.no_room == 2);
    CHECK(neither.counts.eager == 12);
    CHECK_THAT(neither.described,
               Catch::Matchers::ContainsSubstring("not captured (its graph would leave too little"));
  }
  SECTION("b's capture reuses the pool a's left free: 6 + 0 + c's 5 fit in 13 (6 + 6 + 5 would not)") {
    const Outcome shared = run({{"a", 6}, {"b", 6}, {"c", 5}}, 13);
    INFO(shared.described);
    CHECK(shared.counts.captures == 3);
    CHECK(shared.counts.no_room == 0);
  }
  SECTION("a's eager alternative (7, its text trimmed) stops once a is captured: a's graph (4) fits in 10") {
    tt::StepGraphOptions options;
    options.policy.warmup_steps = 2;
    options.policy.retry = 0;
    options.emulate_speedup = 2.0;
    options.memory_limit = 10;
    options.emulate_working_set = [](const std::string& key) { return key == "a" ? int64_t{4} : int64_t{7}; };
    tt::StepGraphs graphs(options, torch::Device(torch::kCPU));
    graphs.set_reference("a", "trim a");
    const tt::StepGraphs::Body body = [](const std::vector<torch::Tensor>&) {};
    for (int step = 0; step < 2; ++step) {
      graphs.run("a", {torch::ones({1})}, body, false, false);
      graphs.run_reference("trim a", {torch::ones({1})}, body);
    }
    graphs.run("a", {torch::ones({1})}, body, false, false);  // its capture
    INFO(graphs.describe());
    CHECK(graphs.counts().captures == 1);
    CHECK(graphs.counts().no_room == 0);
  }
  SECTION("no limit: both captured, whatever their sets") {
    const Outcome unlimited = run({{"a", 4}, {"b", 7}}, 0);
    CHECK(unlimited.counts.captures == 2);
    CHECK(unlimited.counts.no_room == 0);
  }
}

// Emulated graphs (no GPU): once a shape's graph is dropped, its eager steps are compared with its
// reference's as timed (wall clock in emulation: sleeps 15x apart, far beyond a loaded machine's noise).
TEST_CASE(
    "step graphs (emulated): a shape that gave up its graph is compared with its reference's eager steps",
    "[graph]") {
  auto compare = [](int own_ms, int reference_ms) {
    tt::StepGraphOptions options;
    options.policy.warmup_steps = 3;
    options.policy.capture_frequency = 2;
    options.policy.retry = 0;
    options.emulate_speedup = 0.01;  // replays reported 100x slower than eager: the graph is dropped
    tt::StepGraphs graphs(options, torch::Device(torch::kCPU));
    auto sleeping = [](int ms) -> tt::StepGraphs::Body {
      return [ms](const std::vector<torch::Tensor>&) {
        std::this_thread::sleep_for(std::chrono::milliseconds(ms));
      };
    };
    graphs.set_reference("padded", "trimmed");
    for (int step = 0; step < 7; ++step) {
      graphs.run("padded", {torch::ones({1})}, sleeping(own_ms), false, false);
      if (step < 3) graphs.run_reference("trimmed", {torch::ones({1})}, sleeping(reference_ms));
    }
    REQUIRE(graphs.gave_up("padded"));
    return graphs.compare_with_reference("padded");
  };
  const tt::StepGraphs::EagerComparison faster = compare(2, 30);
  CHECK(faster.own_faster);
  CHECK(faster.own_ms < faster.reference_ms);
  const tt::StepGraphs::EagerComparison slower = compare(30, 2);
  CHECK_FALSE(slower.own_faster);
  CHECK(slower.own_ms > slower.reference_ms);
}

#ifdef TELETRON_WITH_CUDA
namespace {

constexpr int64_t kGiB = int64_t{1} << 30;

// This process may hold `cap` bytes of GPU 0 while it lives (ctest runs other GPU tests beside
// it); the cap is lifted and the cache given back when it goes. The allocator is set up by the
// first CUDA tensor, and its fraction can be set only after that.
class GpuMemoryCap {
 public:
  explicit GpuMemoryCap(int64_t cap) {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
    REQUIRE(free_bytes > static_cast<size_t>(cap));
    (void)torch::zeros({1}, torch::TensorOptions().device(torch::kCUDA, kDevice));
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::setMemoryFraction(static_cast<double>(cap) / static_cast<double>(total_bytes),
                                                       kDevice);
  }
  ~GpuMemoryCap() {
    c10::cuda::CUDACachingAllocator::emptyCache();
    c10::cuda::CUDACachingAllocator::setMemoryFraction(1.0, kDevice);
  }
  GpuMemoryCap(const GpuMemoryCap&) = delete;
  GpuMemoryCap& operator=(const GpuMemoryCap&) = delete;
  static constexpr c10::DeviceIndex kDevice = 0;
};

}  // namespace

TEST_CASE("a step whose working memory is most of what the process may use is captured after eager steps that "
          "left the memory cached", "[gpu][graph]") {
  TT_REQUIRE_GPU();
  const c10::DeviceIndex device = GpuMemoryCap::kDevice;
  // This process may hold 2.5 GiB; the step needs 1.5 GiB of scratch, so the capture fits only if
  // the eager step's 1.5 GiB went back first.
  const GpuMemoryCap cap(5 * kGiB / 2);
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA, device);

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

#ifdef TELETRON_WITH_CUDA
TEST_CASE("a shape whose graph would leave another shape's eager step out of memory is not captured",
          "[gpu][graph]") {
  TT_REQUIRE_GPU();
  const c10::DeviceIndex device = GpuMemoryCap::kDevice;
  // The process may hold 2.5 GiB. Shape "a" needs `a` GiB of scratch, "b" `b` GiB; a captured
  // shape's scratch stays in the graphs' pool.
  const int64_t cap = 5 * kGiB / 2;
  const GpuMemoryCap capped(cap);
  const auto on_gpu = torch::TensorOptions().device(torch::kCUDA, device);

  auto run = [&](double a, double b) {
    tt::StepGraphOptions options;
    options.policy.warmup_steps = 2;
    options.policy.capture_frequency = 1000;
    options.policy.retry = 0;
    options.memory_limit = cap;
    tt::StepGraphs graphs(options, torch::Device(torch::kCUDA, device));
    const torch::Tensor result = torch::zeros({1}, on_gpu);
    for (int step = 0; step < 6; ++step) {
      for (const auto& [key, gib] : {std::pair<std::string, double>{"a", a}, {"b", b}}) {
        const int64_t elements = static_cast<int64_t>(gib * static_cast<double>(kGiB) / 4);
        const tt::StepGraphs::Body body = [&, elements](const std::vector<torch::Tensor>& inputs) {
          torch::Tensor scratch = torch::empty({elements}, on_gpu);
          scratch.fill_(1.0f);
          scratch.mul_(inputs[0]);
          result.copy_(scratch.sum().reshape({1}));
        };
        const torch::Tensor input = torch::full({1}, static_cast<float>(step + 1), on_gpu);
        graphs.run(key, {input}, body, /*eager_only=*/false, /*fail_capture=*/false);
        INFO("shape " << key << ", step " << step);
        const double expected = static_cast<double>(elements) * (step + 1);
        CHECK(std::abs(result.item<double>() - expected) <= 1e-5 * expected);
      }
    }
    graphs.flush();
    INFO(graphs.describe());
    CHECK(graphs.counts().failed_captures == 0);
    return graphs.counts();
  };
  SECTION(
      "1 + 1.5 GiB do not fit in 2.5 GiB beside the rest: neither is captured, no step runs out of memory") {
    const tt::StepGraphCounts counts = run(1.0, 1.5);
    CHECK(counts.captures == 0);
    CHECK(counts.no_room == 2);
    CHECK(counts.replays == 0);
  }
  SECTION("0.5 + 1 GiB fit: both captured and replayed") {
    const tt::StepGraphCounts counts = run(0.5, 1.0);
    CHECK(counts.captures == 2);
    CHECK(counts.no_room == 0);
    CHECK(counts.replays == 6);
  }
}
#endif
