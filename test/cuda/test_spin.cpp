// The stream-holding kernels the stream tests use (cuda/spin.cu): spin_until_set ends when another
// stream writes its flag, and gives up (saying so) at its timeout; busy_for holds a stream for at
// least its duration. CPU: both refuse cleanly without CUDA. With them: StreamHandoff::wait_on_host
// waits for a copy queued behind a busy stream.
#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#include <thread>

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "core/stream_handoff.h"
#include "cuda/ops.h"
#include "test/test_util.h"

TEST_CASE("the stream-holding kernels refuse a CPU tensor or device", "[spin]") {
  CHECK_THROWS(tt::spin_until_set(torch::zeros({1}, torch::kInt32), 1.0));
  CHECK_THROWS(tt::busy_for(torch::Device(torch::kCPU), 0.1));
}

TEST_CASE("spin_until_set waits for another stream's flag or its timeout; busy_for holds a stream for its duration",
          "[gpu][spin]") {
  TT_REQUIRE_GPU();
#ifdef TELETRON_WITH_CUDA
  const torch::Device cuda(torch::kCUDA, 0);
  const auto ints = torch::TensorOptions().device(cuda).dtype(torch::kInt32);
  (void)torch::empty({1}, ints).fill_(1);  // the fill kernel loaded before any spin (lazy loading waits for the device)
  torch::cuda::synchronize();
  const c10::cuda::CUDAStream held = c10::cuda::getStreamFromPool(false, 0);
  const c10::cuda::CUDAStream other = c10::cuda::getStreamFromPool(false, 0);
  REQUIRE(held != other);
  // The flag is zeroed on the current (default) stream, the spin runs on a non-blocking one: without
  // the wait the spin could read the block's earlier contents (the allocator hands the previous
  // section's flag, set to 1, back) and end at once, as a run on the H100 did.
  const auto make_flag = [&] {
    torch::Tensor flag = torch::zeros({1}, ints);
    torch::cuda::synchronize();
    return flag;
  };

  SECTION("the flag ends the spin") {
    torch::Tensor flag = make_flag();
    torch::Tensor timed_out;
    {
      c10::cuda::CUDAStreamGuard guard(held);
      timed_out = tt::spin_until_set(flag, 20.0);
    }
    {
      c10::cuda::CUDAStreamGuard guard(other);
      flag.fill_(1);
    }
    held.synchronize();
    CHECK(timed_out.item<int32_t>() == 0);
  }
  SECTION("no flag: the spin gives up at its timeout and says so") {
    torch::Tensor flag = make_flag();
    torch::Tensor timed_out;
    {
      c10::cuda::CUDAStreamGuard guard(held);
      timed_out = tt::spin_until_set(flag, 0.05);
    }
    held.synchronize();
    CHECK(timed_out.item<int32_t>() == 1);
  }
  SECTION("busy_for") {
    at::cuda::CUDAEvent start(cudaEventDefault), stop(cudaEventDefault);
    c10::cuda::CUDAStreamGuard guard(held);
    start.record(held);
    tt::busy_for(cuda, 0.2);
    stop.record(held);
    stop.synchronize();
    const float ms = start.elapsed_time(stop);
    INFO("busy_for(0.2 s) held the stream " << ms << " ms");
    CHECK(ms >= 199.0f);
    CHECK(ms < 5000.0f);
  }
#endif
}

TEST_CASE("StreamHandoff::wait_on_host returns once a copy to pinned memory queued behind a busy stream has landed",
          "[gpu][stream]") {
  TT_REQUIRE_GPU();
#ifdef TELETRON_WITH_CUDA
  const torch::Device cuda(torch::kCUDA, 0);
  const tt::SideStream stream(cuda);
  const torch::Tensor values = torch::full({4096}, 7.0f, torch::TensorOptions().device(cuda));
  torch::cuda::synchronize();
  const torch::Tensor host = torch::zeros({4096}, torch::TensorOptions().pinned_memory(true));
  tt::busy_for(cuda, 0.2);  // the copy below waits 0.2 s behind this on the side stream
  host.copy_(values, /*non_blocking=*/true);
  const tt::StreamHandoff copied = tt::StreamHandoff::record(cuda);
  std::thread([&] { copied.wait_on_host(); }).join();  // from another thread, as preprocess's writer
  CHECK(torch::equal(host, torch::full({4096}, 7.0f)));
#endif
}
