// Tests for core/stream_handoff: TT_ERR_SYNC's text names the stream and the operation; on the CPU a
// hand-off does nothing; on a GPU every SideStream is a stream of its own (never one of LibTorch's
// pool, which hands its 32 streams out round-robin and would put two threads on one stream), and
// the current stream is restored when it goes.
#include "core/stream_handoff.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAStream.h>
#endif

#include <set>
#include <vector>

#include "core/errors.h"
#include "test/test_util.h"

TEST_CASE("throw_sync_error is TT_ERR_SYNC naming the stream and the operation", "[stream]") {
  int marker = 0;
  const tt::Error error = tt::test::expect_error([&] { tt::throw_sync_error(&marker, "waiting for an event", "boom"); });
  CHECK(error.code() == tt::ErrorCode::kSync);
  const std::string text = error.what();
  INFO(text);
  CHECK(text.find(tt::str_cat("CUDA stream ", static_cast<const void*>(&marker))) != std::string::npos);
  CHECK(text.find("waiting for an event failed: boom") != std::string::npos);
  CHECK(error.hint().find("CUDA_LAUNCH_BLOCKING=1") != std::string::npos);
}

TEST_CASE("a CPU hand-off and a CPU side stream do nothing", "[stream]") {
  const tt::SideStream stream(torch::kCPU);
  const tt::StreamHandoff handoff = tt::StreamHandoff::record(torch::kCPU);
  torch::Tensor t = torch::ones({3});
  CHECK_NOTHROW(handoff.accept({t, torch::Tensor()}));
  CHECK_NOTHROW(handoff.wait_on_host());
  CHECK_NOTHROW(tt::StreamHandoff().wait_on_host());
  CHECK(torch::equal(t, torch::ones({3})));
}

#ifdef TELETRON_WITH_CUDA
TEST_CASE("every SideStream is a stream of its own, and the current stream comes back", "[gpu][stream]") {
  TT_REQUIRE_GPU();
  const auto before = c10::cuda::getCurrentCUDAStream(0);
  std::set<cudaStream_t> pool;
  for (int i = 0; i < 64; ++i) pool.insert(c10::cuda::getStreamFromPool(false, 0).stream());
  std::set<cudaStream_t> seen;
  std::vector<std::unique_ptr<tt::SideStream>> alive;  // nested: each one current until the next
  std::vector<torch::Tensor> made;
  std::vector<tt::StreamHandoff> handoffs;
  for (int i = 0; i < 40; ++i) {  // more than the pool's 32, all alive at once
    alive.push_back(std::make_unique<tt::SideStream>(torch::Device("cuda:0")));
    const cudaStream_t current = c10::cuda::getCurrentCUDAStream(0).stream();
    CHECK(pool.count(current) == 0);
    CHECK(seen.insert(current).second);
    made.push_back(torch::full({1024}, static_cast<float>(i), torch::TensorOptions().device("cuda:0")));
    handoffs.push_back(tt::StreamHandoff::record(torch::Device("cuda:0")));
  }
  while (!alive.empty()) alive.pop_back();  // last in, first out, as the guards restore
  for (size_t i = 0; i < made.size(); ++i) {
    handoffs[i].accept({made[i]});
    CHECK(made[i].sum().item<float>() == 1024.0f * static_cast<float>(i));
  }
  CHECK(c10::cuda::getCurrentCUDAStream(0) == before);
}
#endif
