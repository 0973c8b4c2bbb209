// OwnedCudaStream (see cuda_stream.h): creation on a device (or an idle stream of an earlier
// owner), host synchronisation, and the synchronise-then-keep that ends an owner's use.
#include "core/cuda_stream.h"

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "core/errors.h"
#include "core/stream_handoff.h"

#ifdef TELETRON_WITH_CUDA
#include <cuda_runtime_api.h>
#include <spdlog/spdlog.h>
#endif

namespace tt {

OwnedCudaStream::OwnedCudaStream(std::string purpose) : purpose_(std::move(purpose)) {}

#ifdef TELETRON_WITH_CUDA
namespace {

// Makes `device_index` current until it goes, then the one that was current before; like
// c10::cuda::CUDAGuard it sets nothing when that device is current already (setting a device makes
// its context). Plain runtime calls that never throw: it also runs in a destructor.
class DeviceScope {
 public:
  explicit DeviceScope(int device_index) {
    if (cudaGetDevice(&previous_) == cudaSuccess && previous_ == device_index) return;
    set_ = cudaSetDevice(device_index);
    changed_ = set_ == cudaSuccess && previous_ >= 0;
  }
  ~DeviceScope() {
    if (changed_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;
  cudaError_t status() const { return set_; }

 private:
  int previous_ = -1;
  cudaError_t set_ = cudaSuccess;
  bool changed_ = false;
};

// The idle streams of owners that went, per device (see the class comment): handed to the next
// owner on that device, never destroyed.
struct IdleStreams {
  std::mutex mutex;
  std::map<int, std::vector<cudaStream_t>> by_device;
};

IdleStreams& idle_streams() {
  static IdleStreams idle;
  return idle;
}

}  // namespace

OwnedCudaStream::~OwnedCudaStream() {
  if (stream_ == nullptr) return;
  const auto stream = static_cast<cudaStream_t>(stream_);
  const DeviceScope scope(device_index_);
  const cudaError_t synced = cudaStreamSynchronize(stream);
  if (synced != cudaSuccess) {
    spdlog::error("TT_ERR_SYNC: CUDA stream {}: finishing {} failed: {}", stream_, purpose_,
                  cudaGetErrorString(synced));
    cudaStreamDestroy(stream);  // a broken stream is not given to anyone else
    return;
  }
  IdleStreams& idle = idle_streams();
  const std::lock_guard<std::mutex> lock(idle.mutex);
  idle.by_device[device_index_].push_back(stream);
}

void* OwnedCudaStream::get(int device_index) {
  if (stream_ != nullptr) {
    TT_ASSERT(device_index == device_index_, purpose_, " is on device ", device_index_, ", asked for ", device_index);
    return stream_;
  }
  {
    IdleStreams& idle = idle_streams();
    const std::lock_guard<std::mutex> lock(idle.mutex);
    std::vector<cudaStream_t>& free = idle.by_device[device_index];
    if (!free.empty()) {
      stream_ = free.back();
      free.pop_back();
      device_index_ = device_index;
      return stream_;
    }
  }
  cudaStream_t stream = nullptr;
  cudaError_t rc = cudaSuccess;
  {
    const DeviceScope scope(device_index);
    rc = scope.status();
    if (rc == cudaSuccess) rc = cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
  }
  if (rc != cudaSuccess)
    throw_sync_error(nullptr, str_cat("creating ", purpose_, " on device ", device_index), cudaGetErrorString(rc));
  stream_ = stream;
  device_index_ = device_index;
  return stream_;
}

void OwnedCudaStream::synchronize() const {
  if (stream_ == nullptr) return;
  const cudaError_t rc = cudaStreamSynchronize(static_cast<cudaStream_t>(stream_));
  if (rc != cudaSuccess) throw_sync_error(stream_, str_cat("waiting for ", purpose_), cudaGetErrorString(rc));
}

#else

OwnedCudaStream::~OwnedCudaStream() = default;
void* OwnedCudaStream::get(int device_index) {
  device_index_ = device_index;
  return stream_;  // never made: nullptr
}
void OwnedCudaStream::synchronize() const {}

#endif  // TELETRON_WITH_CUDA

}  // namespace tt
