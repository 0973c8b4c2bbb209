// CheckpointWriter (see checkpoint_writer.h).
#include "core/checkpoint_writer.h"

#include <spdlog/spdlog.h>

#include <utility>

#include "core/errors.h"

namespace tt {

CheckpointWriter::CheckpointWriter(std::string checkpoints_dir, int64_t keep)
    : dir_(std::move(checkpoints_dir)), keep_(keep) {}

CheckpointWriter::~CheckpointWriter() {
  try {
    finish();
  } catch (const std::exception& error) {
    spdlog::error("checkpoint: the last write failed: {}", error.what());
  } catch (...) {
    spdlog::error("checkpoint: the last write failed");
  }
}

void CheckpointWriter::join() {
  if (thread_.joinable()) thread_.join();
}

void CheckpointWriter::finish() {
  join();
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    std::swap(error, error_);
  }
  if (error) std::rethrow_exception(error);
}

void CheckpointWriter::submit(checkpoint::Checkpoint ckpt) {
  finish();
  thread_ = std::thread([this, ckpt = std::move(ckpt)] {
    try {
      const std::string folder = checkpoint::save(dir_, ckpt);
      checkpoint::prune(dir_, keep_);
      spdlog::info("checkpoint: {}", folder);
      std::lock_guard<std::mutex> lock(mutex_);
      last_written_ = folder;
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      error_ = std::current_exception();
    }
  });
}

std::string CheckpointWriter::last_written() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return last_written_;
}

}  // namespace tt
