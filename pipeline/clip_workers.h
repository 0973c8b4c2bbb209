// data_pipeline.workers threads that load clips (decode -> colour -> augment) ahead of the VAE, so
// that a producer's VAE never waits for a decoder: submit() queues a sample, take() returns it
// (waiting while it is still loading). Each worker runs on a CUDA stream of its own (SideStream); a
// clip made there comes with a hand-off the taker's stream accepts. Clips loaded on the CPU for a GPU
// run are copied into pinned memory, so that their upload can be asynchronous.
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "core/stream_handoff.h"
#include "pipeline/clip_loader.h"

namespace tt {

class ClipWorkers {
 public:
  struct Result {
    LoadedClip clip;
    std::exception_ptr error;  // what load threw, rethrown by the taker
    StreamHandoff ready;       // after the worker's kernels (clips made on the GPU)
  };
  using Key = std::pair<int64_t, int64_t>;  // (row, epoch)

  /// `count` threads, each calling `load(row, epoch)` (thread-safe) for the samples submitted.
  ClipWorkers(int64_t count, torch::Device device, std::function<LoadedClip(int64_t, int64_t)> load);
  /// Stops the threads after the clips they are loading; queued ones are dropped.
  ~ClipWorkers();
  ClipWorkers(const ClipWorkers&) = delete;
  ClipWorkers& operator=(const ClipWorkers&) = delete;

  /// Queues (row, epoch) unless it is queued or loading already.
  void submit(int64_t row, int64_t epoch);
  /// The submitted sample's result (after it is done), or nothing when it was never submitted.
  std::optional<Result> take(int64_t row, int64_t epoch);

 private:
  void work();

  torch::Device device_;
  std::function<LoadedClip(int64_t, int64_t)> load_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Key> jobs_;
  std::map<Key, std::optional<Result>> pending_;  // submitted: empty while loading
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace tt
