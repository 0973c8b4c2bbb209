// Runs the data pipeline ahead of the training step: a producer thread prepares the next
// `capacity` batches (data_pipeline.prefetch) in a bounded queue while the step trains. On a GPU the
// producer works on its own CUDA stream from LibTorch's pool; each batch is handed over with a CUDA
// event the consumer's stream waits on, and every CUDA tensor of it is record_stream'ed on the
// consumer's stream, so the caching allocator does not hand its memory to the producer again
// before the step that reads it has run. Batches come out in the order they were planned, so a
// run with prefetch sees exactly the batches of a synchronous run; an error in the producer is
// rethrown by next().
#pragma once

#include <torch/types.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "core/stream_handoff.h"
#include "pipeline/latent_dataset.h"

namespace tt {

/// Which samples a batch holds and where the data order stands after it.
struct PlannedBatch {
  std::vector<int64_t> indices, epochs;
  int64_t epoch_after = 0, index_after = 0;
};

class BatchPrefetcher {
 public:
  struct Item {
    LatentBatch batch;
    PlannedBatch plan;
  };

  /// `plan` and `load` run on the producer thread, one batch after another. With `hint`, the producer
  /// plans `lookahead` batches beyond the one it loads and passes each plan to `hint` as it is made
  /// (the video source starts decoding those clips on its worker threads).
  BatchPrefetcher(int64_t capacity, torch::Device device, std::function<PlannedBatch()> plan,
                  std::function<LatentBatch(const PlannedBatch&)> load,
                  std::function<void(const PlannedBatch&)> hint = nullptr, int64_t lookahead = 0);
  ~BatchPrefetcher();
  BatchPrefetcher(const BatchPrefetcher&) = delete;
  BatchPrefetcher& operator=(const BatchPrefetcher&) = delete;

  /// The next batch, ready for use on the current stream; blocks while the producer is behind.
  Item next();

 private:
  struct Slot {
    Item item;
    std::exception_ptr error;
    StreamHandoff ready;  // after the producer's kernels (GPU runs)
  };
  void produce();

  int64_t capacity_;
  torch::Device device_;
  std::function<PlannedBatch()> plan_;
  std::function<LatentBatch(const PlannedBatch&)> load_;
  std::function<void(const PlannedBatch&)> hint_;
  int64_t lookahead_ = 0;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<Slot> queue_;
  bool stopping_ = false;
  std::thread producer_;
};

}  // namespace tt
