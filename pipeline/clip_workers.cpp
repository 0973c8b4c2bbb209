// ClipWorkers (see clip_workers.h).
#include "pipeline/clip_workers.h"

#include <torch/torch.h>

namespace tt {

ClipWorkers::ClipWorkers(int64_t count, torch::Device device, std::function<LoadedClip(int64_t, int64_t)> load)
    : device_(device), load_(std::move(load)) {
  for (int64_t i = 0; i < count; ++i) threads_.emplace_back([this] { work(); });
}

ClipWorkers::~ClipWorkers() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  changed_.notify_all();
  for (auto& thread : threads_) thread.join();
}

void ClipWorkers::submit(int64_t row, int64_t epoch) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!pending_.emplace(Key{row, epoch}, std::nullopt).second) return;
    jobs_.emplace_back(row, epoch);
  }
  changed_.notify_all();
}

std::optional<ClipWorkers::Result> ClipWorkers::take(int64_t row, int64_t epoch) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto it = pending_.find(Key{row, epoch});
  if (it == pending_.end()) return std::nullopt;
  changed_.wait(lock, [&] { return it->second.has_value(); });
  std::optional<Result> result = std::move(it->second);
  pending_.erase(it);
  return result;
}

void ClipWorkers::work() {
  const SideStream stream(device_);
  for (;;) {
    Key job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      changed_.wait(lock, [&] { return stopping_ || !jobs_.empty(); });
      if (stopping_) return;
      job = jobs_.front();
      jobs_.pop_front();
    }
    Result result;
    try {
      result.clip = load_(job.first, job.second);
      if (result.clip.pixels.is_cuda())
        result.ready = StreamHandoff::record(device_);
      else if (device_.is_cuda())
        result.clip.pixels = result.clip.pixels.pin_memory();
    } catch (...) {
      result.error = std::current_exception();
    }
    {
      std::lock_guard<std::mutex> lock(mutex_);
      pending_[job] = std::move(result);
    }
    changed_.notify_all();
  }
}

}  // namespace tt
