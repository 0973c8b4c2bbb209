// OwnedCudaStream: a non-blocking CUDA stream made for one owner alone (a thread's SideStream, a
// VideoReader's decoder), synchronised before it is destroyed. A build without CUDA makes none.
#pragma once

#include <string>

namespace tt {

/// A non-blocking CUDA stream (a cudaStream_t) of its owner's own: never one of LibTorch's pool,
/// which hands its 32 streams per device out round-robin, so that two threads (a producer and a
/// decoder, say) could share one and queue their work behind each other. Made on first use (get),
/// or taken from the idle streams of earlier owners. When the owner goes, the stream is synchronised
/// and kept idle for a later owner, never destroyed: LibTorch's allocators keep the handle of every
/// stream a block was used on (record_stream, a non-blocking copy into pinned memory) and record an
/// event on it again when the block is freed, which may be after the owner is gone (the flow
/// stage's pinned scores, freed with the data pipeline after the prefetcher's thread had ended,
/// aborted `teletron train` on the H200 with "context is destroyed"). Each owner still has the
/// stream to itself; idle streams are per process and device, at most as many as owners at once.
/// A failing CUDA call is TT_ERR_SYNC (throw_sync_error) naming the stream and `purpose`. In a build
/// without CUDA no stream is made: get() gives nullptr and synchronize() does nothing.
class OwnedCudaStream {
 public:
  /// No stream yet. `purpose` names it in errors, e.g. "the decoder's stream".
  explicit OwnedCudaStream(std::string purpose);
  /// Synchronises the stream, then keeps it idle for a later owner (destroyed only when the
  /// synchronisation failed). A failure is logged as TT_ERR_SYNC (a destructor cannot throw).
  ~OwnedCudaStream();
  OwnedCudaStream(const OwnedCudaStream&) = delete;
  OwnedCudaStream& operator=(const OwnedCudaStream&) = delete;

  /// The stream, created on CUDA device `device_index` the first time (TT_ERR_SYNC when CUDA
  /// refuses); every later call names the same device.
  void* get(int device_index);
  /// Blocks the host until the work queued on the stream so far has finished (nothing before get()).
  void synchronize() const;

 private:
  std::string purpose_;
  void* stream_ = nullptr;
  int device_index_ = -1;
};

}  // namespace tt
