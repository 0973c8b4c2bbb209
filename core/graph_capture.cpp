// The capture helpers shared by whole-step and per-block CUDA graphs (see graph_capture.h).
#include "core/graph_capture.h"

#include <spdlog/spdlog.h>

#include "core/errors.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <cuda_runtime_api.h>
#endif

namespace tt {

namespace {
thread_local bool emulated_replay = false;  // per thread: each rank's step runs on its own
}  // namespace

bool step_in_graph(const torch::Device& device) {
  if (emulated_replay) return true;
#ifdef TELETRON_WITH_CUDA
  if (device.is_cuda()) {
    const c10::cuda::CUDAGuard on(device);
    return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
  }
#else
  (void)device;
#endif
  return false;
}

EmulatedReplayScope::EmulatedReplayScope() : before_(emulated_replay) {
  emulated_replay = true;
}

EmulatedReplayScope::~EmulatedReplayScope() {
  emulated_replay = before_;
}

#ifdef TELETRON_WITH_CUDA

namespace {

// Cleanup after a failed capture: each step may already have been done (and then throws).
template <typename Step>
void ignoring_errors(const Step& step) {
  try {
    step();
  } catch (const std::exception&) {
  }
}

}  // namespace

GraphPool::GraphPool(int device_index) : device_index_(device_index), id_(at::cuda::graph_pool_handle()) {
  c10::cuda::CUDACachingAllocator::createOrIncrefPool(static_cast<c10::DeviceIndex>(device_index_), id_);
  at::getHostAllocator(at::kCUDA)->begin_allocate_to_pool(id_, [](c10::Stream) { return false; });
  at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(id_);
}

GraphPool::~GraphPool() {
  // The allocators free the pool's blocks once no graph uses it any more.
  ignoring_errors(
      [&] { c10::cuda::CUDACachingAllocator::releasePool(static_cast<c10::DeviceIndex>(device_index_), id_); });
  ignoring_errors([&] { at::getHostAllocator(at::kCUDA)->release_pool(id_); });
}

OnCaptureStream::OnCaptureStream(OwnedCudaStream& side, int device_index)
    : caller_(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_index))),
      side_(c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(side.get(device_index)),
                                             static_cast<c10::DeviceIndex>(device_index))) {
  at::cuda::CUDAEvent inputs_ready;
  inputs_ready.record(caller_);
  inputs_ready.block(side_);
  guard_ = std::make_unique<c10::cuda::CUDAStreamGuard>(side_);
}

OnCaptureStream::~OnCaptureStream() {
  guard_.reset();
  try {
    at::cuda::CUDAEvent done;
    done.record(side_);
    done.block(caller_);
  } catch (const std::exception& error) {
    spdlog::error("TT_ERR_SYNC: the CUDA-graph capture stream could not be joined: {}", first_line(error.what()));
  }
}

std::string capture_graph(at::cuda::CUDAGraph& graph, const GraphPool& pool, const std::function<void()>& record,
                          bool fail) {
  const c10::cuda::CUDAStream stream =
      c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(pool.device_index()));
  // True from capture_begin's return until capture_end's: the pool's use is ours to give back
  // (a CUDAGraph gives it back itself only after a capture that ended).
  bool pool_in_use = false;
  // The caching allocator keeps freed blocks per stream and pool, and gives none back to the device
  // while a capture is under way: what the eager warm-up left cached on the capture stream (with a
  // memory-sized batch, most of the device) could not serve the graph's pool. The seed config's
  // capture ran out of memory with 117 GiB reserved and unallocated. Give it back first.
  c10::cuda::CUDACachingAllocator::emptyCache();
  try {
    graph.capture_begin(pool.id(), cudaStreamCaptureModeThreadLocal);
    pool_in_use = true;
    record();
    TT_CHECK(!fail, ErrorCode::kGraph, "injected by TELETRON_FAULTS (graph_capture)");
    graph.capture_end();
    return "";
  } catch (const std::exception& error) {
    const std::string failure = first_line(error.what());
    // A capture still open (perhaps invalidated) is ended and what it recorded dropped.
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(stream.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
      cudaGraph_t partial = nullptr;
      if (cudaStreamEndCapture(stream.stream(), &partial) == cudaSuccess && partial != nullptr)
        cudaGraphDestroy(partial);
    }
    if (pool_in_use) {
      // As capture_end would have: stop recording into the pool (capture_end may have done so
      // before it threw: then these say so, and are ignored) and give the use back.
      const c10::MempoolId_t id = pool.id();
      const auto index = static_cast<c10::DeviceIndex>(pool.device_index());
      ignoring_errors([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(index, id); });
      ignoring_errors([&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(id); });
      ignoring_errors([&] { c10::cuda::CUDACachingAllocator::releasePool(index, id); });
      ignoring_errors([&] { at::getHostAllocator(at::kCUDA)->release_pool(id); });
    }
    (void)cudaGetLastError();  // the capture's error is reported here, not by the next launch
    return failure;
  }
}

#endif  // TELETRON_WITH_CUDA

}  // namespace tt
