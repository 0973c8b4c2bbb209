// BatchPrefetcher (see prefetch.h).
#include "app/prefetch.h"

#include <torch/torch.h>

#include "core/stream_handoff.h"

namespace tt {

BatchPrefetcher::BatchPrefetcher(int64_t capacity, torch::Device device, std::function<PlannedBatch()> plan,
                                 std::function<LatentBatch(const PlannedBatch&)> load,
                                 std::function<void(const PlannedBatch&)> hint, int64_t lookahead)
    : capacity_(std::max<int64_t>(1, capacity)),
      device_(device),
      plan_(std::move(plan)),
      load_(std::move(load)),
      hint_(std::move(hint)),
      lookahead_(hint_ ? std::max<int64_t>(0, lookahead) : 0) {
  producer_ = std::thread([this] { produce(); });
}

BatchPrefetcher::~BatchPrefetcher() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  producer_.join();
}

void BatchPrefetcher::produce() {
  const SideStream stream(device_);
  std::deque<PlannedBatch> planned;  // plans made (and hinted) but not loaded yet, in order
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || static_cast<int64_t>(queue_.size()) < capacity_; });
      if (stopping_) return;
    }
    Slot slot;
    try {
      while (static_cast<int64_t>(planned.size()) < 1 + lookahead_) {
        planned.push_back(plan_());
        if (hint_) hint_(planned.back());
      }
      slot.item.plan = std::move(planned.front());
      planned.pop_front();
      slot.item.batch = load_(slot.item.plan);
      slot.ready = StreamHandoff::record(device_);
    } catch (...) {
      slot.error = std::current_exception();
    }
    const bool failed = static_cast<bool>(slot.error);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      queue_.push_back(std::move(slot));
    }
    changed_.notify_all();
    if (failed) return;  // the consumer rethrows; nothing after a failure is planned
  }
}

BatchPrefetcher::Item BatchPrefetcher::next() {
  Slot slot;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !queue_.empty(); });
    slot = std::move(queue_.front());
    queue_.pop_front();
  }
  changed_.notify_all();
  if (slot.error) std::rethrow_exception(slot.error);
  const LatentBatch& batch = slot.item.batch;
  slot.ready.accept({batch.latents, batch.text_states, batch.text_mask, batch.pooled});
  return std::move(slot.item);
}

}  // namespace tt
