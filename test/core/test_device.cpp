// Device helpers: the CUDA allocator's settings string (core/device.h), anywhere; the memory
// readings on the GPU. Setting the allocator itself is covered on the GPU by
// test/app/test_train_precision.cpp's [gpu] cases.
#include <catch2/catch_test_macros.hpp>

#include <string>

#ifdef TELETRON_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

#include "core/device.h"
#include "test/test_util.h"

TEST_CASE("the allocator settings keep every other entry and say expandable_segments once", "[device][memory]") {
  CHECK(tt::allocator_settings_with_expandable("", true) == "expandable_segments:True");
  CHECK(tt::allocator_settings_with_expandable("", false) == "expandable_segments:False");
  // The environment's other keys go along (a settings string resets those it leaves out), a list
  // value with its commas included; an earlier expandable_segments entry is replaced.
  CHECK(tt::allocator_settings_with_expandable("max_split_size_mb:128,roundup_power2_divisions:[64:8,256:4]", true) ==
        "max_split_size_mb:128,roundup_power2_divisions:[64:8,256:4],expandable_segments:True");
  CHECK(tt::allocator_settings_with_expandable("expandable_segments:True,garbage_collection_threshold:0.6", false) ==
        "garbage_collection_threshold:0.6,expandable_segments:False");
  CHECK(tt::allocator_settings_with_expandable("max_split_size_mb:64, expandable_segments:False", true) ==
        "max_split_size_mb:64,expandable_segments:True");
}

TEST_CASE("configure_cuda_allocator changes nothing for a CPU device", "[device][memory]") {
  const tt::AllocatorSetup setup = tt::configure_cuda_allocator(torch::Device(torch::kCPU), {true, 0.5});
  CHECK_FALSE(setup.expandable_segments);
  CHECK(setup.environment.empty());
}

TEST_CASE(
    "gpu_memory on CUDA: the allocator's reach is what it holds plus the driver's free bytes, below the "
    "total",
    "[device][memory][gpu]") {
  TT_REQUIRE_GPU();
  const torch::Device cuda(torch::kCUDA, 0);
  constexpr int64_t kBytes = int64_t{1} << 30;
  const torch::Tensor held = torch::empty({kBytes}, torch::TensorOptions().dtype(torch::kUInt8).device(cuda));
  const tt::GpuMemory memory = tt::gpu_memory(cuda);
  REQUIRE(memory.known);
  INFO("allocated " << memory.allocated << ", available " << memory.available << " of " << memory.total
                    << " bytes");
  CHECK(memory.allocated >= kBytes);
  // The tensor's segment is the allocator's: within reach, whatever other processes take meanwhile,
  // and not among the driver's free bytes (what other processes take later only widens the gap).
  CHECK(memory.available >= kBytes);
#ifdef TELETRON_WITH_CUDA
  size_t free = 0, total = 0;
  REQUIRE(cudaMemGetInfo(&free, &total) == cudaSuccess);
  CHECK(memory.available - static_cast<int64_t>(free) >= kBytes);
#endif
  // The CUDA context is never the allocator's.
  CHECK(memory.available < memory.total);
}
