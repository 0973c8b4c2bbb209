// NVOFA optical flow (see optical_flow_nvofa.h): the driver library opened at run time, one engine
// session per (device, size, grid, preset) with its buffers, the copies in and out on the call's
// stream, and the S10.5 vectors made per-pixel flow.
#include "pipeline/optical_flow_nvofa.h"

#include <dlfcn.h>

#include <torch/cuda.h>
#include <torch/nn/functional.h>
#include <torch/torch.h>

#include <cstdlib>
#include <mutex>
#include <vector>

#include <spdlog/spdlog.h>

#include "core/errors.h"
#include "core/stream_handoff.h"
#include "pipeline/nvofa_api.h"

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>
#endif

namespace tt {

namespace F = torch::nn::functional;

namespace {

constexpr const char* kDefaultLibrary = "libnvidia-opticalflow.so.1";
constexpr const char* kFallbackHint =
    "set data_pipeline.optical_flow.algorithm: tvl1, or data_pipeline.optical_flow.fallback: tvl1 to use "
    "TV-L1 "
    "where NVOFA is missing";

const char* status_name(nvofa::Status status) {
  switch (status) {
    case nvofa::Status::kSuccess:
      return "NV_OF_SUCCESS";
    case nvofa::Status::kNotAvailable:
      return "NV_OF_ERR_OF_NOT_AVAILABLE";
    case nvofa::Status::kUnsupportedDevice:
      return "NV_OF_ERR_UNSUPPORTED_DEVICE";
    case nvofa::Status::kDeviceDoesNotExist:
      return "NV_OF_ERR_DEVICE_DOES_NOT_EXIST";
    case nvofa::Status::kInvalidPtr:
      return "NV_OF_ERR_INVALID_PTR";
    case nvofa::Status::kInvalidParam:
      return "NV_OF_ERR_INVALID_PARAM";
    case nvofa::Status::kInvalidCall:
      return "NV_OF_ERR_INVALID_CALL";
    case nvofa::Status::kInvalidVersion:
      return "NV_OF_ERR_INVALID_VERSION";
    case nvofa::Status::kOutOfMemory:
      return "NV_OF_ERR_OUT_OF_MEMORY";
    case nvofa::Status::kNotInitialized:
      return "NV_OF_ERR_NOT_INITIALIZED";
    case nvofa::Status::kUnsupportedFeature:
      return "NV_OF_ERR_UNSUPPORTED_FEATURE";
    case nvofa::Status::kGeneric:
      return "NV_OF_ERR_GENERIC";
  }
  return "an unknown NV_OF status";
}

std::string version_text(uint32_t version) {
  return str_cat(version >> 4, ".", version & 0xf);
}

// The opened library: its function table, or why it cannot be used.
struct Library {
  std::string name;
  uint32_t driver_version = 0;  // the newest API the driver speaks (0: not reported)
  nvofa::CudaFunctionList api{};
  std::string error;  // empty: usable
};

Library open_library(const std::string& name) {
  Library lib;
  lib.name = name;
  void* handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* detail = dlerror();
    lib.error = str_cat("the NVIDIA optical flow library ", name, " cannot be loaded (",
                        detail != nullptr ? detail : "dlopen failed",
                        "); it comes with the NVIDIA driver, for GPUs with an optical flow engine");
    return lib;
  }
  // Never closed: the function table points into it, and sessions may outlive any one caller.
  auto create = reinterpret_cast<nvofa::CreateInstanceCudaFn>(dlsym(handle, nvofa::kCreateInstanceSymbol));
  auto max_version =
      reinterpret_cast<nvofa::GetMaxSupportedApiVersionFn>(dlsym(handle, nvofa::kMaxApiVersionSymbol));
  if (create == nullptr) {
    lib.error =
        str_cat(name, " has no ", nvofa::kCreateInstanceSymbol, ": not the NVIDIA optical flow library");
    return lib;
  }
  if (max_version != nullptr && max_version(&lib.driver_version) == nvofa::Status::kSuccess &&
      lib.driver_version < nvofa::kApiVersion) {
    lib.error = str_cat(name, " speaks the optical flow API up to ", version_text(lib.driver_version),
                        "; teletron needs ", version_text(nvofa::kApiVersion), ": update the NVIDIA driver");
    return lib;
  }
  const nvofa::Status status = create(nvofa::kApiVersion, &lib.api);
  if (status != nvofa::Status::kSuccess) {
    lib.error = str_cat(name, ": ", nvofa::kCreateInstanceSymbol, "(API ", version_text(nvofa::kApiVersion),
                        ") failed with ", status_name(status));
    return lib;
  }
  const nvofa::CudaFunctionList& a = lib.api;
  if (a.create_cuda == nullptr || a.init == nullptr || a.create_buffer_cuda == nullptr ||
      a.buffer_get_device_ptr == nullptr || a.buffer_get_stride_info == nullptr ||
      a.set_io_cuda_streams == nullptr || a.execute == nullptr || a.destroy_buffer_cuda == nullptr ||
      a.destroy == nullptr || a.get_last_error == nullptr || a.get_caps == nullptr)
    lib.error = str_cat(name, " left part of the optical flow function table empty");
  return lib;
}

// The library named now (nvofa_library_name), opened once per name for the process and kept: the
// handles are this file's only process-wide state, and read-only once made. Keyed by name rather
// than one once-flag so that TELETRON_NVOFA_LIBRARY is honoured even after another name was opened
// in the same process (the tests do both).
const Library& library() {
  static std::mutex mutex;
  static std::map<std::string, std::unique_ptr<Library>> opened;
  const std::string name = nvofa_library_name();
  const std::lock_guard<std::mutex> lock(mutex);
  std::unique_ptr<Library>& entry = opened[name];
  if (entry == nullptr) entry = std::make_unique<Library>(open_library(name));
  return *entry;
}

void check_options(const NvofaOptions& options) {
  TT_CHECK(options.grid == 1 || options.grid == 2 || options.grid == 4, ErrorCode::kConfig,
           "NVOFA: the output grid must be 1, 2 or 4 pixels, got ", options.grid);
}

void check_frames(const torch::Tensor& frames0, const torch::Tensor& frames1) {
  TT_CHECK(frames0.dim() == 2 || frames0.dim() == 3, ErrorCode::kData,
           "NVOFA: expected frames (H, W) or (B, H, W), got ", frames0.sizes());
  TT_CHECK(frames0.sizes() == frames1.sizes(), ErrorCode::kData,
           "NVOFA: the frames differ in shape: ", frames0.sizes(), " and ", frames1.sizes());
  TT_CHECK(frames0.scalar_type() == frames1.scalar_type(), ErrorCode::kData,
           "NVOFA: the frames differ in dtype: ", frames0.scalar_type(), " and ", frames1.scalar_type());
  TT_CHECK(torch::isFloatingType(frames0.scalar_type()) || frames0.scalar_type() == torch::kByte,
           ErrorCode::kData, "NVOFA: expected float (intensities in [0, 1]) or uint8 frames, got ",
           frames0.scalar_type());
}

const Library& usable_library() {
  const Library& lib = library();
  if (!lib.error.empty())
    throw Error(ErrorCode::kConfig, str_cat("optical flow algorithm nvofa: ", lib.error), kFallbackHint);
  return lib;
}

#ifdef TELETRON_WITH_CUDA

nvofa::PerfLevel perf_level(NvofaPreset preset) {
  switch (preset) {
    case NvofaPreset::kSlow:
      return nvofa::PerfLevel::kSlow;
    case NvofaPreset::kMedium:
      return nvofa::PerfLevel::kMedium;
    case NvofaPreset::kFast:
      return nvofa::PerfLevel::kFast;
  }
  return nvofa::PerfLevel::kMedium;
}

// The calling thread's current CUDA context, which is `device`'s primary context (LibTorch's) once
// the runtime has made it current. cuCtxGetCurrent is a driver call: it is found through the runtime
// (cudaGetDriverEntryPoint), so teletron links no libcuda.
nvofa::CuContext primary_context(int device) {
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  cudaError_t rc = cudaFree(nullptr);  // makes the primary context and makes it current
  TT_CHECK_HINT(rc == cudaSuccess, ErrorCode::kConfig, kFallbackHint, "NVOFA: CUDA device ", device,
                " is not usable: ", cudaGetErrorString(rc));
  using CtxGetCurrentFn = int (*)(void** context);  // CUresult cuCtxGetCurrent(CUcontext*)
  void* symbol = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  rc = cudaGetDriverEntryPointByVersion("cuCtxGetCurrent", &symbol, 12000, cudaEnableDefault, &found);
#else
  rc = cudaGetDriverEntryPoint("cuCtxGetCurrent", &symbol, cudaEnableDefault, &found);
#endif
  TT_CHECK_HINT(rc == cudaSuccess && found == cudaDriverEntryPointSuccess && symbol != nullptr,
                ErrorCode::kConfig, kFallbackHint,
                "NVOFA: the CUDA driver's cuCtxGetCurrent cannot be found (", cudaGetErrorString(rc), ")");
  void* context = nullptr;
  const int status = reinterpret_cast<CtxGetCurrentFn>(symbol)(&context);
  TT_CHECK_HINT(status == 0 && context != nullptr, ErrorCode::kConfig, kFallbackHint,
                "NVOFA: no current CUDA context on device ", device, " (CUresult ", status, ")");
  return context;
}

void copy_plane(void* dst, size_t dst_pitch, const void* src, size_t src_pitch, size_t row_bytes, size_t rows,
                cudaStream_t stream, const char* what) {
  const cudaError_t rc =
      cudaMemcpy2DAsync(dst, dst_pitch, src, src_pitch, row_bytes, rows, cudaMemcpyDeviceToDevice, stream);
  if (rc != cudaSuccess) throw_sync_error(stream, str_cat("NVOFA: copying ", what), cudaGetErrorString(rc));
}

#endif  // TELETRON_WITH_CUDA

}  // namespace

// One engine session for one frame size, grid and preset on one device, with its two input
// buffers (8-bit grey, pitched as the driver chose) and its output buffer (one S10.5 vector per
// grid cell). Also the event that marks the end of its last call's work, which the next call's
// stream waits for (the buffers are shared between calls, whatever their streams) and the
// destructor waits for before giving the buffers back.
struct NvofaFlow::Session {
  const nvofa::CudaFunctionList* api = nullptr;
  nvofa::Instance instance = nullptr;
  int device = 0;
  int64_t height = 0, width = 0, grid = 1;
  int64_t out_height = 0, out_width = 0;  // ceil(size / grid)
  nvofa::Buffer input = nullptr, reference = nullptr, output = nullptr;
  nvofa::CuDevicePtr input_ptr = 0, reference_ptr = 0, output_ptr = 0;
  uint32_t input_pitch = 0, reference_pitch = 0, output_pitch = 0;  // bytes per row
  void* done = nullptr;                                             // cudaEvent_t
  int64_t last_use = 0;

  Session() = default;
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;
  ~Session();

  // The driver's own words on the last failure, when it has some.
  std::string last_error() const {
    char text[4 * nvofa::kLastErrorChars] = {};
    uint32_t size = sizeof(text);
    if (instance == nullptr || api->get_last_error(instance, text, &size) != nvofa::Status::kSuccess ||
        text[0] == 0)
      return "";
    text[sizeof(text) - 1] = 0;
    return str_cat(" (", text, ")");
  }

  void check(nvofa::Status status, ErrorCode code, const std::string& what) const {
    if (status == nvofa::Status::kSuccess) return;
    if (status == nvofa::Status::kOutOfMemory) code = ErrorCode::kMemory;
    const std::string where =
        width > 0 ? str_cat("NVOFA on CUDA device ", device, " at ", width, "x", height, ", grid ", grid)
                  : str_cat("NVOFA on CUDA device ", device);
    throw Error(code, str_cat(where, ": ", what, " failed with ", status_name(status), last_error()),
                code == ErrorCode::kConfig ? kFallbackHint : "");
  }

  std::vector<uint32_t> caps(nvofa::Caps which) const {
    uint32_t count = 0;
    check(api->get_caps(instance, which, nullptr, &count), ErrorCode::kConfig, "querying its capabilities");
    std::vector<uint32_t> values(count);
    if (count > 0)
      check(api->get_caps(instance, which, values.data(), &count), ErrorCode::kConfig,
            "querying its capabilities");
    values.resize(count);
    return values;
  }

  // A driver-allocated buffer (a CUdeviceptr with the driver's pitch).
  nvofa::Buffer make_buffer(uint32_t buffer_width, uint32_t buffer_height, nvofa::BufferUsage usage,
                            nvofa::BufferFormat format, nvofa::CuDevicePtr* ptr, uint32_t* pitch) const {
    const nvofa::BufferDescriptor descriptor{buffer_width, buffer_height, usage, format};
    nvofa::Buffer buffer = nullptr;
    check(api->create_buffer_cuda(instance, &descriptor, nvofa::CudaBufferType::kCuDevicePtr, &buffer),
          ErrorCode::kConfig, "allocating a buffer");
    *ptr = api->buffer_get_device_ptr(buffer);
    nvofa::CudaBufferStrideInfo strides{};
    const nvofa::Status status = api->buffer_get_stride_info(buffer, &strides);
    if (status != nvofa::Status::kSuccess || *ptr == 0) api->destroy_buffer_cuda(buffer);
    check(status, ErrorCode::kConfig, "reading a buffer's pitch");
    TT_CHECK(*ptr != 0, ErrorCode::kConfig, "NVOFA gave a buffer without a device address");
    *pitch = strides.planes[0].x_bytes;
    return buffer;
  }
};

NvofaFlow::Session::~Session() {
#ifdef TELETRON_WITH_CUDA
  int previous = -1;
  const bool switched =
      cudaGetDevice(&previous) == cudaSuccess && previous != device && cudaSetDevice(device) == cudaSuccess;
  if (done != nullptr) {
    const cudaError_t rc = cudaEventSynchronize(static_cast<cudaEvent_t>(done));
    if (rc != cudaSuccess)
      spdlog::error("TT_ERR_SYNC: NVOFA: waiting for a session's last work failed: {}",
                    cudaGetErrorString(rc));
    cudaEventDestroy(static_cast<cudaEvent_t>(done));
  }
#endif
  if (api != nullptr) {
    for (nvofa::Buffer buffer : {input, reference, output})
      if (buffer != nullptr) api->destroy_buffer_cuda(buffer);
    if (instance != nullptr) api->destroy(instance);
  }
#ifdef TELETRON_WITH_CUDA
  if (switched) cudaSetDevice(previous);
#endif
}

namespace {

#ifdef TELETRON_WITH_CUDA

// Creates an engine session on `device` and checks `grid` and the frame size against what the
// engine reports, then initialises it: forward flow only, no hints, costs, regions or global flow.
std::unique_ptr<NvofaFlow::Session> open_session(const Library& lib, int device, int64_t height,
                                                 int64_t width, const NvofaOptions& options) {
  const nvofa::CuContext context = primary_context(device);
  const c10::cuda::CUDAGuard guard(static_cast<c10::DeviceIndex>(device));
  auto s = std::make_unique<NvofaFlow::Session>();
  s->api = &lib.api;
  s->device = device;
  s->height = height;
  s->width = width;
  s->grid = options.grid;
  s->out_height = (height + options.grid - 1) / options.grid;
  s->out_width = (width + options.grid - 1) / options.grid;
  s->check(lib.api.create_cuda(context, &s->instance), ErrorCode::kConfig,
           "creating a session (does this GPU have an optical flow engine?)");

  const std::vector<uint32_t> grids = s->caps(nvofa::Caps::kOutputGridSizes);
  bool grid_ok = false;
  std::string supported;
  for (uint32_t g : grids) {
    grid_ok = grid_ok || g == static_cast<uint32_t>(options.grid);
    supported += str_cat(supported.empty() ? "" : ", ", g);
  }
  TT_CHECK_HINT(grid_ok, ErrorCode::kConfig, "set data_pipeline.optical_flow.grid to one of those",
                "NVOFA on CUDA device ", device, " has no output grid ", options.grid, "; it supports ",
                supported);
  const std::vector<uint32_t> w_min = s->caps(nvofa::Caps::kWidthMin),
                              w_max = s->caps(nvofa::Caps::kWidthMax);
  const std::vector<uint32_t> h_min = s->caps(nvofa::Caps::kHeightMin),
                              h_max = s->caps(nvofa::Caps::kHeightMax);
  if (!w_min.empty() && !w_max.empty() && !h_min.empty() && !h_max.empty())
    TT_CHECK(width >= w_min[0] && width <= w_max[0] && height >= h_min[0] && height <= h_max[0],
             ErrorCode::kData, "NVOFA takes frames from ", w_min[0], "x", h_min[0], " to ", w_max[0], "x",
             h_max[0], ", got ", width, "x", height);

  nvofa::InitParams init{};
  init.width = static_cast<uint32_t>(width);
  init.height = static_cast<uint32_t>(height);
  init.out_grid_size = static_cast<uint32_t>(options.grid);
  init.hint_grid_size = 0;
  init.mode = nvofa::Mode::kOpticalFlow;
  init.perf_level = perf_level(options.preset);
  init.enable_external_hints = nvofa::Bool::kFalse;
  init.enable_output_cost = nvofa::Bool::kFalse;
  init.private_data = nullptr;
  init.disparity_range = 0;
  init.enable_roi = nvofa::Bool::kFalse;
  init.pred_direction = nvofa::PredDirection::kForward;
  init.enable_global_flow = nvofa::Bool::kFalse;
  init.input_buffer_format = nvofa::BufferFormat::kGrayscale8;
  s->check(lib.api.init(s->instance, &init), ErrorCode::kConfig,
           str_cat("initialising (preset ", nvofa_preset_name(options.preset), ")"));

  const auto w = static_cast<uint32_t>(width), h = static_cast<uint32_t>(height);
  s->input = s->make_buffer(w, h, nvofa::BufferUsage::kInput, nvofa::BufferFormat::kGrayscale8, &s->input_ptr,
                            &s->input_pitch);
  s->reference = s->make_buffer(w, h, nvofa::BufferUsage::kInput, nvofa::BufferFormat::kGrayscale8,
                                &s->reference_ptr, &s->reference_pitch);
  s->output = s->make_buffer(static_cast<uint32_t>(s->out_width), static_cast<uint32_t>(s->out_height),
                             nvofa::BufferUsage::kOutput, nvofa::BufferFormat::kShort2, &s->output_ptr,
                             &s->output_pitch);
  TT_ASSERT(s->input_pitch >= width && s->reference_pitch >= width &&
                s->output_pitch >= s->out_width * sizeof(nvofa::FlowVector),
            "NVOFA buffer pitches ", s->input_pitch, "/", s->reference_pitch, "/", s->output_pitch);
  cudaEvent_t done = nullptr;
  const cudaError_t rc = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (rc != cudaSuccess)
    throw_sync_error(nullptr, "NVOFA: creating a session's event", cudaGetErrorString(rc));
  s->done = done;
  return s;
}

// The flow of each pair of `bytes0`/`bytes1` (B, H, W) uint8 contiguous, into `vectors` (B, h, w, 2)
// int16, everything queued on `stream`.
void run_session(NvofaFlow::Session& s, const torch::Tensor& bytes0, const torch::Tensor& bytes1,
                 const torch::Tensor& vectors, cudaStream_t stream) {
  auto done = static_cast<cudaEvent_t>(s.done);
  // The previous call's engine work and copies may be on another stream and still reading the
  // shared buffers.
  cudaError_t rc = cudaStreamWaitEvent(stream, done, 0);
  if (rc != cudaSuccess)
    throw_sync_error(stream, "NVOFA: waiting for the session's previous call", cudaGetErrorString(rc));
  // The engine's input and output streams are the call's: its reads of the inputs follow our copies
  // in, and our copy out (and the next pair's copies in) follow its writes.
  s.check(s.api->set_io_cuda_streams(s.instance, stream, stream), ErrorCode::kSync,
          "setting the CUDA streams");
  const int64_t pairs = bytes0.size(0);
  const auto row = static_cast<size_t>(s.width), rows = static_cast<size_t>(s.height);
  const size_t out_row = static_cast<size_t>(s.out_width) * sizeof(nvofa::FlowVector);
  const auto* first = bytes0.data_ptr<uint8_t>();
  const auto* second = bytes1.data_ptr<uint8_t>();
  auto* out = vectors.data_ptr<int16_t>();
  for (int64_t b = 0; b < pairs; ++b) {
    const size_t frame = static_cast<size_t>(b) * row * rows;
    copy_plane(reinterpret_cast<void*>(s.input_ptr), s.input_pitch, first + frame, row, row, rows, stream,
               "a frame into the engine's input");
    copy_plane(reinterpret_cast<void*>(s.reference_ptr), s.reference_pitch, second + frame, row, row, rows,
               stream, "a frame into the engine's reference");
    nvofa::ExecuteInputParams in{};
    in.input_frame = s.input;
    in.reference_frame = s.reference;
    in.disable_temporal_hints = nvofa::Bool::kTrue;  // the pairs are independent of each other
    nvofa::ExecuteOutputParams result{};
    result.output = s.output;
    s.check(s.api->execute(s.instance, &in, &result), ErrorCode::kSync, "executing");
    copy_plane(out + b * s.out_height * s.out_width * 2, out_row, reinterpret_cast<const void*>(s.output_ptr),
               s.output_pitch, out_row, static_cast<size_t>(s.out_height), stream, "the engine's flow out");
  }
  rc = cudaEventRecord(done, stream);
  if (rc != cudaSuccess) throw_sync_error(stream, "NVOFA: marking the end of a call", cudaGetErrorString(rc));
}

#endif  // TELETRON_WITH_CUDA

}  // namespace

const char* nvofa_preset_name(NvofaPreset preset) {
  switch (preset) {
    case NvofaPreset::kSlow:
      return "slow";
    case NvofaPreset::kMedium:
      return "medium";
    case NvofaPreset::kFast:
      return "fast";
  }
  return "medium";
}

std::string nvofa_library_name() {
  const char* name = std::getenv("TELETRON_NVOFA_LIBRARY");
  return name != nullptr && name[0] != 0 ? name : kDefaultLibrary;
}

bool nvofa_available(std::string* why, int device_index) {
  std::string reason;
  std::string ready;
  try {
    const Library& lib = library();
    if (!lib.error.empty()) {
      reason = lib.error;
    } else {
#ifdef TELETRON_WITH_CUDA
      if (!torch::cuda::is_available()) {
        reason = str_cat(lib.name, " loads, but there is no CUDA device");
      } else {
        const int device = device_index >= 0 ? device_index : static_cast<int>(c10::cuda::current_device());
        // A session that is created and given back: what NVOFA needs from the GPU and its driver.
        NvofaFlow::Session probe;
        probe.api = &lib.api;
        probe.device = device;
        probe.check(lib.api.create_cuda(primary_context(device), &probe.instance), ErrorCode::kConfig,
                    "creating a session (does this GPU have an optical flow engine?)");
        std::string grids;
        for (uint32_t g : probe.caps(nvofa::Caps::kOutputGridSizes))
          grids += str_cat(grids.empty() ? "" : ", ", g);
        ready = str_cat("NVOFA on CUDA device ", device, " through ", lib.name, " (API ",
                        version_text(lib.driver_version), ", output grids ", grids, ")");
      }
#else
      reason = str_cat(lib.name, " loads, but this teletron build has no CUDA");
#endif
    }
  } catch (const Error& error) {
    reason = first_line(error.what());
  } catch (const std::exception& error) {
    reason = first_line(error.what());
  }
  if (why != nullptr) *why = reason.empty() ? ready : reason;
  return reason.empty();
}

NvofaFlow::NvofaFlow(int64_t max_sessions) : max_sessions_(max_sessions) {
  TT_CHECK(max_sessions >= 1, ErrorCode::kConfig, "NVOFA: at least one session must be kept, got ",
           max_sessions);
}

NvofaFlow::~NvofaFlow() = default;

NvofaFlow::Session& NvofaFlow::session(const Key& key) {
  ++uses_;
  auto found = sessions_.find(key);
  if (found != sessions_.end()) {
    found->second->last_use = uses_;
    return *found->second;
  }
  if (static_cast<int64_t>(sessions_.size()) >= max_sessions_) {
    auto oldest = sessions_.begin();
    for (auto it = sessions_.begin(); it != sessions_.end(); ++it)
      if (it->second->last_use < oldest->second->last_use) oldest = it;
    sessions_.erase(oldest);  // waits for its last work
  }
#ifdef TELETRON_WITH_CUDA
  NvofaOptions options;
  options.grid = std::get<3>(key);
  options.preset = static_cast<NvofaPreset>(std::get<4>(key));
  std::unique_ptr<Session> made =
      open_session(usable_library(), std::get<0>(key), std::get<1>(key), std::get<2>(key), options);
  made->last_use = uses_;
  Session& result = *made;
  sessions_[key] = std::move(made);
  return result;
#else
  throw Error(ErrorCode::kConfig, "optical flow algorithm nvofa: this teletron build has no CUDA",
              kFallbackHint);
#endif
}

torch::Tensor NvofaFlow::flow(const torch::Tensor& frames0, const torch::Tensor& frames1,
                              const NvofaOptions& options) {
#ifdef TELETRON_WITH_CUDA
  if (frames0.is_cuda())
    return flow_on(frames0, frames1, options,
                   c10::cuda::getCurrentCUDAStream(frames0.device().index()).stream());
#endif
  return flow_on(frames0, frames1, options, nullptr);  // refused below: the frames are not on a GPU
}

torch::Tensor NvofaFlow::flow_on(const torch::Tensor& frames0, const torch::Tensor& frames1,
                                 const NvofaOptions& options, void* stream) {
  check_options(options);
  check_frames(frames0, frames1);
  usable_library();
  TT_CHECK(frames0.is_cuda() && frames1.device() == frames0.device(), ErrorCode::kData,
           "NVOFA takes frames on one CUDA device, got ", frames0.device(), " and ", frames1.device());
#ifdef TELETRON_WITH_CUDA
  const bool single = frames0.dim() == 2;
  const int device = frames0.device().index();
  const c10::cuda::CUDAGuard guard(frames0.device());
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  // LibTorch's ops below (the 8-bit conversion, the output, the conversion to pixels) run on the
  // same stream, and their allocations belong to it.
  const c10::cuda::CUDAStream torch_stream =
      cuda_stream == nullptr
          ? c10::cuda::getDefaultCUDAStream(static_cast<c10::DeviceIndex>(device))
          : c10::cuda::getStreamFromExternal(cuda_stream, static_cast<c10::DeviceIndex>(device));
  const c10::cuda::CUDAStreamGuard stream_guard(torch_stream);

  auto to_bytes = [](const torch::Tensor& frames) {  // (B, H, W) uint8, contiguous
    const torch::Tensor batch = frames.dim() == 2 ? frames.unsqueeze(0) : frames;
    if (batch.scalar_type() == torch::kByte) return batch.contiguous();
    return batch.to(torch::kFloat32).mul(255.0).round_().clamp_(0.0, 255.0).to(torch::kByte);
  };
  const torch::Tensor bytes0 = to_bytes(frames0), bytes1 = to_bytes(frames1);  // (B, H, W) uint8
  const int64_t pairs = bytes0.size(0), height = bytes0.size(1), width = bytes0.size(2);
  Session& s = session(Key{device, height, width, options.grid, static_cast<int>(options.preset)});
  torch::Tensor vectors = torch::empty({pairs, s.out_height, s.out_width, 2},
                                       torch::TensorOptions().dtype(torch::kInt16).device(frames0.device()));
  run_session(s, bytes0, bytes1, vectors, cuda_stream);
  // The caller's own uint8 frames are read on this stream: their memory must not be reused before.
  bytes0.record_stream(torch_stream);
  bytes1.record_stream(torch_stream);
  const torch::Tensor flow = nvofa_vectors_to_flow(vectors, options.grid, height, width);  // (B, 2, H, W)
  return single ? flow.squeeze(0) : flow;
#else
  throw Error(ErrorCode::kConfig, "optical flow algorithm nvofa: this teletron build has no CUDA",
              kFallbackHint);
#endif
}

torch::Tensor nvofa_flow(const torch::Tensor& frames0, const torch::Tensor& frames1,
                         const NvofaOptions& options) {
  NvofaFlow sessions(1);
  return sessions.flow(frames0, frames1, options);
}

torch::Tensor nvofa_vectors_to_flow(const torch::Tensor& vectors, int64_t grid, int64_t height,
                                    int64_t width) {
  TT_CHECK(grid >= 1, ErrorCode::kData, "NVOFA: the grid must be at least 1, got ", grid);
  const int64_t h = (height + grid - 1) / grid, w = (width + grid - 1) / grid;
  TT_CHECK(vectors.dim() == 4 && vectors.size(1) == h && vectors.size(2) == w && vectors.size(3) == 2 &&
               vectors.scalar_type() == torch::kInt16,
           ErrorCode::kData, "NVOFA: expected vectors (B, ", h, ", ", w, ", 2) int16 for ", width, "x",
           height, " at grid ", grid, ", got ", vectors.sizes(), " ", vectors.scalar_type());
  // S10.5: two's complement with 5 fraction bits.
  torch::Tensor flow = vectors.to(torch::kFloat32).div_(32.0).permute({0, 3, 1, 2});  // (B, 2, h, w)
  if (grid == 1) return flow.contiguous();
  // Block i covers pixels [grid·i, grid·i + grid), its centre at grid·i + (grid − 1)/2: exactly where
  // align_corners = false puts sample i when h blocks become grid·h pixels. The last block may reach
  // past the frame; its pixels beyond are cut off.
  flow = F::interpolate(flow, F::InterpolateFuncOptions()
                                  .size(std::vector<int64_t>{h * grid, w * grid})
                                  .mode(torch::kBilinear)
                                  .align_corners(false));
  return flow.slice(2, 0, height).slice(3, 0, width).contiguous();
}

}  // namespace tt
