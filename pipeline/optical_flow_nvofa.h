// Optical flow on NVIDIA's optical flow engine (NVOFA; `data_pipeline.optical_flow.algorithm:
// nvofa`, issue 13): the hardware block that block-matches two 8-bit frames while the SMs stay
// free. Reached through the driver's libnvidia-opticalflow.so.1, opened with dlopen at run time
// (pipeline/nvofa_api.h declares the part of the API we use), so teletron starts and runs without
// it; nvofa_available says whether it can be used, for the fallback to TV-L1.
//
// The engine gives one vector per grid × grid block (grid 1, 2 or 4, as the GPU supports), in
// full-resolution pixels with 1/32 px steps; nvofa_flow returns it per pixel, upsampled
// bilinearly, in TV-L1's layout and sign (pipeline/optical_flow_tvl1.h), so that motion scores
// can take either.
//
// Streams: every copy into and out of the engine's buffers, and the engine's own input and output
// streams (SetIOCudaStreams), are the one stream of the call, so the copies, the execution and the
// caller's later work are ordered on it and nothing waits on the host. That stream is a parameter
// (NvofaFlow::flow_on) or LibTorch's current stream (NvofaFlow::flow).
//
// TELETRON_NVOFA_LIBRARY names another file than libnvidia-opticalflow.so.1 (the tests point it at
// one that does not exist; or a driver installed outside the loader's path).
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>

namespace tt {

/// The engine's speed/quality trade-off (NV_OF_PERF_LEVEL).
enum class NvofaPreset { kSlow, kMedium, kFast };
/// "slow", "medium", "fast".
const char* nvofa_preset_name(NvofaPreset preset);

struct NvofaOptions {
  /// One flow vector per grid × grid pixels: 1, 2 or 4 (a size the GPU lacks is TT_ERR_CONFIG).
  int64_t grid = 4;
  /// Slower is more accurate.
  NvofaPreset preset = NvofaPreset::kMedium;
};

/// The library's file name: $TELETRON_NVOFA_LIBRARY when set, else libnvidia-opticalflow.so.1.
std::string nvofa_library_name();

/// Whether NVOFA can run on CUDA device `device_index` (-1: the current one): the library loads,
/// speaks API 5.0, and a session can be created there. When not, `why` (if given) says which step
/// failed, naming the library. Never throws.
bool nvofa_available(std::string* why = nullptr, int device_index = -1);

/// The engine's sessions of one owner (a worker thread, a motion scorer): one per (device, H, W,
/// grid, preset), created on first use and kept, the least recently used dropped beyond
/// `max_sessions`. Not thread-safe: one owner calls it. Sessions are given back (after their last
/// stream has finished) when it goes.
class NvofaFlow {
 public:
  explicit NvofaFlow(int64_t max_sessions = 8);
  ~NvofaFlow();
  NvofaFlow(const NvofaFlow&) = delete;
  NvofaFlow& operator=(const NvofaFlow&) = delete;

  /// Flow from `frames0` to `frames1`: (H, W) or (B, H, W) frames, float intensities in [0, 1]
  /// (quantised to 8 bits for the engine) or uint8, on one CUDA device. Returns (2, H, W) or
  /// (B, 2, H, W) float32 on that device: channel 0 the x (column) and 1 the y (row) displacement in
  /// pixels, such that frames1(p + flow(p)) ≈ frames0(p). Runs on LibTorch's current stream.
  /// Bad options: TT_ERR_CONFIG; mismatched frames, a dtype other than float or uint8, CPU frames
  /// or sizes outside the engine's range: TT_ERR_DATA; no usable NVOFA: TT_ERR_CONFIG naming the
  /// library, hinting at the TV-L1 fallback.
  torch::Tensor flow(const torch::Tensor& frames0, const torch::Tensor& frames1,
                     const NvofaOptions& options = {});
  /// As flow, on `stream` (a cudaStream_t of the frames' device; nullptr: the legacy default
  /// stream): the copies, the engine and the conversion all run there.
  torch::Tensor flow_on(const torch::Tensor& frames0, const torch::Tensor& frames1,
                        const NvofaOptions& options, void* stream);

  /// Sessions held now.
  int64_t sessions() const { return static_cast<int64_t>(sessions_.size()); }

  struct Session;  // one engine session with its buffers (optical_flow_nvofa.cpp)

 private:
  using Key = std::tuple<int, int64_t, int64_t, int64_t, int>;  // device, H, W, grid, preset
  Session& session(const Key& key);

  int64_t max_sessions_;
  int64_t uses_ = 0;
  std::map<Key, std::unique_ptr<Session>> sessions_;
};

/// One call's flow with a session of its own (creating one costs milliseconds: code that runs
/// many pairs keeps an NvofaFlow). As NvofaFlow::flow.
torch::Tensor nvofa_flow(const torch::Tensor& frames0, const torch::Tensor& frames1,
                         const NvofaOptions& options = {});

/// The engine's output made per-pixel flow: `vectors` (B, h, w, 2) int16 in S10.5 (1/32 px), one
/// per grid × grid block of an (height, width) frame (h = ceil(height / grid)), to (B, 2, height,
/// width) float32. The values are already in full-resolution pixels, so the upsampling only
/// interpolates (bilinear, each vector at its block's centre, edge vectors held beyond the outer
/// centres) and never scales. Any device.
torch::Tensor nvofa_vectors_to_flow(const torch::Tensor& vectors, int64_t grid, int64_t height,
                                    int64_t width);

}  // namespace tt
