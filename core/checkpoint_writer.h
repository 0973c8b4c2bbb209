// Checkpoints written behind the training steps: submit() takes a snapshot (host tensors nobody
// touches again) and returns at once; a thread of the writer's own writes it (temp folder, fsync,
// rename: core/checkpoint.h, so a kill at any moment leaves the earlier checkpoints intact) and
// prunes the old ones. One write at a time: submit() first waits for the one in flight. A failed
// write (disk full) is thrown by the next submit() or by finish(). One writer per training run,
// never a global: two ranks in one process each hold their own.
#pragma once

#include <exception>
#include <mutex>
#include <string>
#include <thread>

#include "core/checkpoint.h"

namespace tt {

class CheckpointWriter {
 public:
  /// `keep`: how many of the newest checkpoints stay after each write (0 = all).
  CheckpointWriter(std::string checkpoints_dir, int64_t keep);
  /// Waits for the write in flight; an error there is logged (a destructor cannot throw it).
  ~CheckpointWriter();
  CheckpointWriter(const CheckpointWriter&) = delete;
  CheckpointWriter& operator=(const CheckpointWriter&) = delete;

  /// Waits for the previous write (rethrowing its error), then starts writing `ckpt`.
  void submit(checkpoint::Checkpoint ckpt);
  /// Waits for the write in flight and rethrows its error.
  void finish();
  /// The folder of the last write that completed ("" before any).
  std::string last_written() const;

 private:
  void join();

  std::string dir_;
  int64_t keep_;
  std::thread thread_;
  mutable std::mutex mutex_;
  std::exception_ptr error_;  // of the last write, until rethrown
  std::string last_written_;
};

}  // namespace tt
