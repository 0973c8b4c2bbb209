// StepGraphs (see step_graph.h): capture, replay and the policy's bookkeeping.
#include "core/step_graph.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "core/cuda_stream.h"
#include "core/errors.h"
#include "core/gpu_timer.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/core/CachingHostAllocator.h>
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace tt {

struct StepGraphs::Graph {
  std::vector<torch::Tensor> inputs;  // the static buffers the graph reads, shaped as the key's inputs
  Body body;                          // emulation: what a replay runs
#ifdef TELETRON_WITH_CUDA
  std::unique_ptr<at::cuda::CUDAGraph> graph;
#endif
};

struct StepGraphs::CudaState {
  OwnedCudaStream stream{"the CUDA-graph capture stream"};
  c10::MempoolId_t pool{0, 0};  // one private pool for every shape's graph
  int device_index = 0;
};

namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Cleanup after a failed capture: each step may already have been done (and then throws).
template <typename Step>
void ignoring_errors(const Step& step) {
  try {
    step();
  } catch (const std::exception&) {
  }
}

}  // namespace

StepGraphs::StepGraphs(const StepGraphOptions& options, const torch::Device& device)
    : options_(options), device_(device), policy_(options.policy) {
  TT_ASSERT(emulated() || device.is_cuda(), "StepGraphs: CUDA graphs need a CUDA device (or emulation)");
#ifdef TELETRON_WITH_CUDA
  if (!emulated()) {
    cuda_ = std::make_unique<CudaState>();
    cuda_->device_index = device.has_index() ? device.index() : c10::cuda::current_device();
    cuda_->pool = at::cuda::graph_pool_handle();
    // Our own use of the pool, on the device and the pinned-host allocator, for as long as this
    // object lives. Each capture adds a use and each graph's end gives it back; an allocator
    // whose pool use count reaches 0 keeps the pool only to free it, and refuses (an internal
    // assert) any later capture into it. Without this use, a failed capture or a dropped graph
    // that was the pool's only user would leave every later capture failing.
    c10::cuda::CUDACachingAllocator::createOrIncrefPool(static_cast<c10::DeviceIndex>(cuda_->device_index),
                                                        cuda_->pool);
    at::getHostAllocator(at::kCUDA)->begin_allocate_to_pool(cuda_->pool, [](c10::Stream) { return false; });
    at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(cuda_->pool);
  }
#else
  TT_ASSERT(emulated(), "StepGraphs: this build has no CUDA");
#endif
}

StepGraphs::~StepGraphs() {
  // Graphs go before the capture stream (which synchronises as it goes): a replay still queued
  // keeps its executable graph alive until it finishes.
  graphs_.clear();
#ifdef TELETRON_WITH_CUDA
  if (cuda_) {
    // Our use of the pool goes last: the allocators free its blocks once no graph uses it.
    const c10::MempoolId_t pool = cuda_->pool;
    ignoring_errors([&] {
      c10::cuda::CUDACachingAllocator::releasePool(static_cast<c10::DeviceIndex>(cuda_->device_index), pool);
    });
    ignoring_errors([&] { at::getHostAllocator(at::kCUDA)->release_pool(pool); });
  }
#endif
}

void StepGraphs::run(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body,
                     bool eager_only, bool fail_capture) {
  poll(false);
  if (eager_only) {
    run_eager(key, inputs, body, /*counted=*/false);
    return;
  }
  switch (policy_.next(key)) {
    case GraphAction::kEager:
      run_eager(key, inputs, body, /*counted=*/true);
      return;
    case GraphAction::kCapture:
      capture(key, inputs, body, fail_capture);
      return;
    case GraphAction::kReplay:
      replay(key, inputs);
      return;
  }
}

void StepGraphs::run_eager(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body,
                           bool counted) {
  counts_.eager += 1;
  if (!counted) {
    body(inputs);
    return;
  }
  if (emulated()) {
    const auto start = Clock::now();
    body(inputs);
    policy_.eager_step(key, ms_since(start));
    return;
  }
  // Counted now (the warm-up must not wait for the GPU), timed once the GPU is past it; the
  // shape's first eager step is not timed at all.
  const bool timed = policy_.eager_steps(key) > 0;
  std::shared_ptr<GpuInterval> interval = timed ? GpuInterval::start(device_) : nullptr;
  body(inputs);
  policy_.eager_step(key, -1.0);
  if (!timed) return;
  interval->stop();
  pending_.push_back(Pending{key, false, std::move(interval)});
}

void StepGraphs::capture(const std::string& key, const std::vector<torch::Tensor>& inputs, const Body& body,
                         bool fail) {
  auto graph = std::make_unique<Graph>();
  for (const torch::Tensor& input : inputs) graph->inputs.push_back(input.clone());
  std::string failure;
  if (emulated()) {
    body(graph->inputs);  // the step itself
    if (fail) {
      failure = "injected by TELETRON_FAULTS (graph_capture)";
    } else {
      graph->body = body;
    }
  } else {
#ifdef TELETRON_WITH_CUDA
    const int index = cuda_->device_index;
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream(index);
    const c10::cuda::CUDAStream side =
        c10::cuda::getStreamFromExternal(static_cast<cudaStream_t>(cuda_->stream.get(index)), index);
    at::cuda::CUDAEvent inputs_ready;
    inputs_ready.record(caller);
    inputs_ready.block(side);
    // However the block below is left, the caller's stream then waits for the capture stream.
    struct Join {
      const c10::cuda::CUDAStream& side;
      const c10::cuda::CUDAStream& caller;
      ~Join() {
        try {
          at::cuda::CUDAEvent done;
          done.record(side);
          done.block(caller);
        } catch (const std::exception& error) {
          spdlog::error("TT_ERR_SYNC: the CUDA-graph capture stream could not be joined: {}", first_line(error.what()));
        }
      }
    } join{side, caller};
    c10::cuda::CUDAStreamGuard on_side(side);
    body(graph->inputs);  // the step itself, eagerly; its errors (out of memory) are the caller's
    graph->graph = std::make_unique<at::cuda::CUDAGraph>();
    // True from capture_begin's return until capture_end's: the pool's use is ours to give back
    // (a CUDAGraph gives it back itself only after a capture that ended).
    bool pool_in_use = false;
    try {
      // Thread-local mode: only this thread's unsafe CUDA calls break the capture, not the data
      // pipeline's threads allocating and copying on their own streams meanwhile.
      graph->graph->capture_begin(cuda_->pool, cudaStreamCaptureModeThreadLocal);
      pool_in_use = true;
      body(graph->inputs);
      TT_CHECK(!fail, ErrorCode::kGraph, "injected by TELETRON_FAULTS (graph_capture)");
      graph->graph->capture_end();
      pool_in_use = false;
    } catch (const std::exception& error) {
      failure = first_line(error.what());
      // A capture still open (perhaps invalidated) is ended and what it recorded dropped.
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      if (cudaStreamIsCapturing(side.stream(), &status) == cudaSuccess && status != cudaStreamCaptureStatusNone) {
        cudaGraph_t partial = nullptr;
        if (cudaStreamEndCapture(side.stream(), &partial) == cudaSuccess && partial != nullptr)
          cudaGraphDestroy(partial);
      }
      if (pool_in_use) {
        // As capture_end would have: stop recording into the pool (capture_end may have done so
        // before it threw: then these say so, and are ignored) and give the use back.
        const c10::MempoolId_t pool = cuda_->pool;
        ignoring_errors([&] { c10::cuda::CUDACachingAllocator::endAllocateToPool(index, pool); });
        ignoring_errors([&] { at::getHostAllocator(at::kCUDA)->end_allocate_to_pool(pool); });
        ignoring_errors([&] { c10::cuda::CUDACachingAllocator::releasePool(index, pool); });
        ignoring_errors([&] { at::getHostAllocator(at::kCUDA)->release_pool(pool); });
      }
      (void)cudaGetLastError();  // the capture's error is reported here, not by the next launch
      graph->graph.reset();
    }
#else
    TT_ASSERT(false, "StepGraphs: this build has no CUDA");
#endif
  }
  if (!failure.empty()) {
    counts_.failed_captures += 1;
    policy_.capture_failed(key);
    spdlog::warn("TT_ERR_GRAPH: capturing the step of shape [{}] failed: {}; the step ran eagerly ({}). Hint: "
                 "cuda_graph.retry sets how often a shape is tried again, cuda_graph.enabled: false turns graphs off",
                 key, failure,
                 policy_.eager_for_good(key)
                     ? "out of retries: this shape runs eagerly from now on"
                     : str_cat("tried again after ", options_.policy.capture_frequency, " eager steps"));
    return;
  }
  graphs_[key] = std::move(graph);
  counts_.captures += 1;
  policy_.capture_succeeded(key);
  spdlog::info("CUDA graph: captured the whole step of shape [{}] ({} graph{} in the pool)", key, graphs_.size(),
               graphs_.size() == 1 ? "" : "s");
#ifdef TELETRON_WITH_CUDA
  // The eager run on the capture stream cached its blocks there, where nothing else allocates.
  if (!emulated()) c10::cuda::CUDACachingAllocator::emptyCache();
#endif
}

void StepGraphs::replay(const std::string& key, const std::vector<torch::Tensor>& inputs) {
  Graph& graph = *graphs_.at(key);
  TT_ASSERT(graph.inputs.size() == inputs.size(), "StepGraphs: shape [", key, "] replayed with ", inputs.size(),
            " inputs, captured with ", graph.inputs.size());
  {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < inputs.size(); ++i) graph.inputs[i].copy_(inputs[i], /*non_blocking=*/true);
  }
  counts_.replays += 1;
  if (emulated()) {
    graph.body(graph.inputs);
    // Emulated: the eager mean over the test's factor, so that the policy's path is the test's choice.
    report(key, true, policy_.eager_ms(key) / options_.emulate_speedup);
    return;
  }
#ifdef TELETRON_WITH_CUDA
  std::shared_ptr<GpuInterval> interval = GpuInterval::start(device_);
  graph.graph->replay();
  interval->stop();
  pending_.push_back(Pending{key, true, std::move(interval)});
#endif
}

void StepGraphs::poll(bool wait) {
  while (!pending_.empty()) {
    Pending& oldest = pending_.front();
    if (!wait && !oldest.interval->done()) return;
    const double ms = oldest.interval->elapsed_ms();
    const Pending done = std::move(oldest);
    pending_.pop_front();
    report(done.key, done.replay, ms);
  }
}

void StepGraphs::flush() { poll(true); }

void StepGraphs::report(const std::string& key, bool replay, double ms) {
  if (!replay) {
    policy_.eager_time(key, ms);
    return;
  }
  policy_.replay_step(key, ms);
  if (policy_.dropped(key) && graphs_.count(key) != 0) drop(key);
}

void StepGraphs::drop(const std::string& key) {
  spdlog::info("CUDA graph: shape [{}] runs eagerly from now on: {}", key, policy_.describe(key));
  counts_.dropped += 1;
#ifdef TELETRON_WITH_CUDA
  // Its pool blocks go back once the graph is gone: no replay of it may still be running then.
  if (!emulated()) c10::cuda::getCurrentCUDAStream(cuda_->device_index).synchronize();
#endif
  graphs_.erase(key);
}

std::string StepGraphs::describe() const { return policy_.describe_all(); }

}  // namespace tt
