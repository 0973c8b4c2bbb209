// Tests for core/cuda_stream: an OwnedCudaStream not made yet has nothing to wait for; on a GPU
// get() makes a stream of its own (never one of LibTorch's pool) once, on one device, and
// synchronize() waits for the work queued on it; where CUDA cannot make one that is TT_ERR_SYNC;
// without CUDA no stream is made.
#include "core/cuda_stream.h"

#include <catch2/catch_test_macros.hpp>

#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

#include <set>
#include <string>

#include "core/errors.h"
#include "test/test_util.h"

TEST_CASE("an OwnedCudaStream not made yet has nothing to wait for", "[stream]") {
  const tt::OwnedCudaStream stream("the test stream");
  CHECK_NOTHROW(stream.synchronize());
}

#ifdef TELETRON_WITH_CUDA
TEST_CASE("an OwnedCudaStream is a stream of its own, made once on its device", "[gpu][stream]") {
  TT_REQUIRE_GPU();
  std::set<cudaStream_t> pool;
  for (int i = 0; i < 64; ++i) pool.insert(c10::cuda::getStreamFromPool(false, 0).stream());
  tt::OwnedCudaStream stream("the test stream");
  void* raw = stream.get(0);
  REQUIRE(raw != nullptr);
  CHECK(pool.count(static_cast<cudaStream_t>(raw)) == 0);
  CHECK(stream.get(0) == raw);

  const tt::Error error = tt::test::expect_error([&] { stream.get(1); });
  CHECK(error.code() == tt::ErrorCode::kInternal);
  CHECK(std::string(error.what()).find("the test stream is on device 0, asked for 1") != std::string::npos);

  // Tens of milliseconds queued on the owned stream (20 float32 4096x4096 products), then (1 << 20)
  // floats set to 3 there: only a real wait leaves the stream idle right after it. Everything is
  // allocated and cuBLAS set up for the stream first (a cudaMalloc may wait for the whole device).
  const auto on_gpu = torch::TensorOptions().device("cuda:0");
  const auto owned = static_cast<cudaStream_t>(raw);
  torch::Tensor made;
  {
    const c10::cuda::CUDAStreamGuard guard(c10::cuda::getStreamFromExternal(owned, 0));
    const torch::Tensor square = torch::full({4096, 4096}, 1.0f / 4096, on_gpu);
    torch::Tensor product = torch::empty({4096, 4096}, on_gpu);
    made = torch::zeros({1 << 20}, on_gpu);
    torch::mm_out(product, square, square);
    REQUIRE(cudaStreamSynchronize(owned) == cudaSuccess);
    for (int i = 0; i < 20; ++i) torch::mm_out(product, square, square);
    made.fill_(3.0f);
  }
  stream.synchronize();
  CHECK(cudaStreamQuery(owned) == cudaSuccess);
  CHECK(made.sum().item<float>() == 3.0f * (1 << 20));
}

TEST_CASE("where there is no CUDA device, making an OwnedCudaStream is TT_ERR_SYNC naming it", "[stream]") {
  if (tt::test::has_cuda()) SKIP("a CUDA device is present: the stream can be made");
  tt::OwnedCudaStream stream("the test stream");
  const tt::Error error = tt::test::expect_error([&] { stream.get(0); });
  CHECK(error.code() == tt::ErrorCode::kSync);
  CHECK(std::string(error.what()).find("creating the test stream on device 0 failed") != std::string::npos);
  CHECK_NOTHROW(stream.synchronize());  // still nothing made
}
#else
TEST_CASE("without CUDA an OwnedCudaStream makes no stream", "[stream]") {
  tt::OwnedCudaStream stream("the test stream");
  CHECK(stream.get(0) == nullptr);
  CHECK_NOTHROW(stream.synchronize());
}
#endif
