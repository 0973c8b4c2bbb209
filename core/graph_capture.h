// What every CUDA-graph capture of teletron needs, shared by the whole-step graphs
// (core/step_graph.h) and the per-block graphs (core/block_graphs.h): a private memory pool held
// for as long as its owner lives, a side stream that the capture runs on and that the caller's
// stream waits for however the capture ends, and one capture that cleans up after itself when it
// fails. Compiled without CUDA these exist but must not be used (their owners emulate instead).
#pragma once

#include <torch/types.h>

#include <functional>
#include <memory>
#include <string>

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

#include "core/cuda_stream.h"

namespace tt {

/// True while the step body running on this thread is recorded into a graph or replayed from one:
/// the current stream of `device` captures (CUDA), or StepGraphs emulates a replay (without CUDA,
/// TELETRON_GRAPH_EMULATE; a real replay never runs the body). Work whose shapes follow host values
/// (per-sample attention) takes its static path then, so an emulated replay computes what a real one would.
bool step_in_graph(const torch::Device& device);

/// While alive, step_in_graph() is true on this thread (StepGraphs' emulated replays).
class EmulatedReplayScope {
 public:
  EmulatedReplayScope();
  ~EmulatedReplayScope();
  EmulatedReplayScope(const EmulatedReplayScope&) = delete;
  EmulatedReplayScope& operator=(const EmulatedReplayScope&) = delete;

 private:
  bool before_ = false;
};

#ifdef TELETRON_WITH_CUDA

/// One private graph pool on one device, with a use of our own on the device and the pinned-host
/// allocator for the object's life. Each capture adds a use and each graph's end gives it back; an
/// allocator whose pool use count reaches 0 keeps the pool only to free it and refuses any later
/// capture into it (an internal assert): without our use a failed capture, or a dropped graph that
/// was the pool's only user, would leave every later capture failing.
class GraphPool {
 public:
  explicit GraphPool(int device_index);
  ~GraphPool();
  GraphPool(const GraphPool&) = delete;
  GraphPool& operator=(const GraphPool&) = delete;

  c10::MempoolId_t id() const { return id_; }
  int device_index() const { return device_index_; }

 private:
  int device_index_ = 0;
  c10::MempoolId_t id_{0, 0};
};

/// While alive, the current stream of the device is `side`, which first waits for the caller's
/// stream; at the end the caller's stream waits for `side` (also when an exception leaves).
class OnCaptureStream {
 public:
  OnCaptureStream(OwnedCudaStream& side, int device_index);
  ~OnCaptureStream();
  OnCaptureStream(const OnCaptureStream&) = delete;
  OnCaptureStream& operator=(const OnCaptureStream&) = delete;

 private:
  c10::cuda::CUDAStream caller_, side_;
  std::unique_ptr<c10::cuda::CUDAStreamGuard> guard_;
};

/// Captures `record` into `graph` on the current stream (thread-local mode: only this thread's
/// unsafe CUDA calls break the capture, not the data pipeline's threads working meanwhile) with
/// `pool`'s memory. `fail`: a fault injected inside the capture (TELETRON_FAULTS graph_capture).
/// Returns "" on success; otherwise the reason, after ending any capture still open, giving the
/// pool's use back and clearing CUDA's sticky capture error (`graph` is then unusable).
std::string capture_graph(at::cuda::CUDAGraph& graph, const GraphPool& pool, const std::function<void()>& record,
                          bool fail);

#endif  // TELETRON_WITH_CUDA

}  // namespace tt
