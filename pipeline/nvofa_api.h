// The part of NVIDIA's Optical Flow API (NVOFA, the GPU's optical flow engine) that teletron calls,
// declared here so that the build needs no SDK: the driver's libnvidia-opticalflow.so.1 is opened
// with dlopen at run time (pipeline/optical_flow_nvofa.cpp) and everything is reached through the
// function table its one entry point fills in.
//
// The layouts are those of the Optical Flow SDK 5.0 headers (nvOpticalFlowCommon.h and
// nvOpticalFlowCuda.h, API version 5.0) on x86-64 Linux: natural alignment, no packing, C enums of
// 4 bytes, handles and CUDA objects pointer-sized, CUdeviceptr a 64-bit integer. The calling
// convention is the platform's C one (the SDK's NVOFAPI marker is empty outside Windows). The
// structs below are passed to the driver by pointer, so a field out of place would be read as
// another: every size and offset is pinned by a static_assert. Only what we use is declared; the
// enum values we never send are listed where a neighbour's value depends on them.
//
// 5.0 added three fields at the end of the init parameters (prediction direction, global flow, the
// input format) and three buffers at the end of the output parameters; the library reads them
// because we ask for API 5.0, so they must be present and zero where unused.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tt::nvofa {

/// (major << 4) | minor, the value NvOFAPICreateInstanceCuda takes and NvOFGetMaxSupportedApiVersion
/// reports: 5.0.
inline constexpr uint32_t kApiVersion = (5u << 4) | 0u;
/// The entry points the library exports.
inline constexpr const char* kCreateInstanceSymbol = "NvOFAPICreateInstanceCuda";
inline constexpr const char* kMaxApiVersionSymbol = "NvOFGetMaxSupportedApiVersion";
/// NvOFGetLastError wants a buffer of at least this many characters.
inline constexpr uint32_t kLastErrorChars = 80;

using Instance = void*;   // an optical flow session (NvOFHandle)
using Buffer = void*;     // a buffer the driver allocated (NvOFGPUBufferHandle)
using CuContext = void*;  // CUcontext
using CuStream = void*;   // CUstream (the same object as a cudaStream_t; nullptr: the legacy default stream)
using CuArray = void*;    // CUarray
using CuDevicePtr = unsigned long long;  // CUdeviceptr

/// NV_OF_STATUS, in the SDK's order.
enum class Status : uint32_t {
  kSuccess = 0,
  kNotAvailable = 1,  // no optical flow engine
  kUnsupportedDevice = 2,
  kDeviceDoesNotExist = 3,
  kInvalidPtr = 4,
  kInvalidParam = 5,
  kInvalidCall = 6,
  kInvalidVersion = 7,  // the driver does not speak kApiVersion
  kOutOfMemory = 8,
  kNotInitialized = 9,
  kUnsupportedFeature = 10,
  kGeneric = 11,
};

/// NV_OF_BOOL.
enum class Bool : uint32_t { kFalse = 0, kTrue = 1 };

/// NV_OF_CAPS (the capability asked of GetCaps).
enum class Caps : uint32_t {
  kOutputGridSizes = 0,  // the output grid sizes the engine supports (a list)
  kHintGridSizes = 1,
  kHintWithFlowMode = 2,
  kHintWithStereoMode = 3,
  kWidthMin = 4,
  kHeightMin = 5,
  kWidthMax = 6,
  kHeightMax = 7,
  kRoi = 8,
  kRoiMaxCount = 9,
  kStereo = 10,
};

/// NV_OF_PERF_LEVEL: slower is more accurate.
enum class PerfLevel : uint32_t { kUndefined = 0, kSlow = 5, kMedium = 10, kFast = 20 };

/// NV_OF_MODE.
enum class Mode : uint32_t { kUndefined = 0, kOpticalFlow = 1, kStereoDisparity = 2 };

/// NV_OF_BUFFER_USAGE.
enum class BufferUsage : uint32_t {
  kUndefined = 0,
  kInput = 1,
  kOutput = 2,
  kHint = 3,
  kCost = 4,
  kGlobalFlow = 5
};

/// NV_OF_BUFFER_FORMAT.
enum class BufferFormat : uint32_t {
  kUndefined = 0,
  kGrayscale8 = 1,  // input: one 8-bit plane
  kNv12 = 2,
  kAbgr8 = 3,
  kShort = 4,   // stereo disparity output
  kShort2 = 5,  // flow output: FlowVector per grid cell
  kUint = 6,
  kUint8 = 7,
};

/// NV_OF_PRED_DIRECTION.
enum class PredDirection : uint32_t { kForward = 0, kBoth = 2 };

/// NV_OF_CUDA_BUFFER_TYPE: how the driver allocates a buffer.
enum class CudaBufferType : uint32_t { kUndefined = 0, kCuArray = 1, kCuDevicePtr = 2 };

/// NV_OF_FLOW_VECTOR: one output vector, each component a signed 16-bit fixed-point number with 5
/// fraction bits (S10.5, two's complement): pixels = value / 32.
struct FlowVector {
  int16_t x;
  int16_t y;
};

/// NV_OF_INIT_PARAMS (5.0).
struct InitParams {
  uint32_t width;
  uint32_t height;
  uint32_t out_grid_size;   // 1, 2 or 4 (NV_OF_OUTPUT_VECTOR_GRID_SIZE)
  uint32_t hint_grid_size;  // 0 without external hints (NV_OF_HINT_VECTOR_GRID_SIZE)
  Mode mode;
  PerfLevel perf_level;
  Bool enable_external_hints;
  Bool enable_output_cost;
  void* private_data;        // reserved: nullptr
  uint32_t disparity_range;  // stereo only: 0 (NV_OF_STEREO_DISPARITY_RANGE_UNDEFINED)
  Bool enable_roi;
  PredDirection pred_direction;
  Bool enable_global_flow;
  BufferFormat input_buffer_format;
};

/// NV_OF_BUFFER_DESCRIPTOR. Output buffers are sized in grid cells, not pixels.
struct BufferDescriptor {
  uint32_t width;
  uint32_t height;
  BufferUsage usage;
  BufferFormat format;
};

/// NV_OF_BUFFER_STRIDE.
struct BufferStride {
  uint32_t x_bytes;  // bytes from one row to the next (the pitch)
  uint32_t y_bytes;  // bytes from one plane to the next
};

/// NV_OF_CUDA_BUFFER_STRIDE_INFO.
struct CudaBufferStrideInfo {
  BufferStride planes[3];
  uint32_t plane_count;
};

/// NV_OF_EXECUTE_INPUT_PARAMS.
struct ExecuteInputParams {
  Buffer input_frame;           // the first frame: the flow goes from it...
  Buffer reference_frame;       // ...to this one
  Buffer external_hints;        // nullptr without hints
  Bool disable_temporal_hints;  // kTrue: do not seed from the previous Execute (independent pairs)
  uint32_t padding;             // 0
  void* private_data;           // reserved: nullptr
  uint32_t padding2;            // 0
  uint32_t roi_count;
  void* roi_data;  // NV_OF_ROI_RECT[roi_count]; nullptr without regions
};

/// NV_OF_EXECUTE_OUTPUT_PARAMS (5.0).
struct ExecuteOutputParams {
  Buffer output;           // the flow (kShort2)
  Buffer output_cost;      // nullptr without costs
  void* private_data;      // reserved: nullptr
  Buffer backward_output;  // with PredDirection::kBoth only
  Buffer backward_output_cost;
  Buffer global_flow;  // with enable_global_flow only
};

// The function table NvOFAPICreateInstanceCuda fills in, in the SDK's order.
using CreateCudaFn = Status (*)(CuContext context, Instance* instance);
using InitFn = Status (*)(Instance instance, const InitParams* params);
using CreateBufferCudaFn = Status (*)(Instance instance, const BufferDescriptor* descriptor,
                                      CudaBufferType type, Buffer* buffer);
using BufferGetCuArrayFn = CuArray (*)(Buffer buffer);
using BufferGetDevicePtrFn = CuDevicePtr (*)(Buffer buffer);
using BufferGetStrideInfoFn = Status (*)(Buffer buffer, CudaBufferStrideInfo* info);
using SetIoCudaStreamsFn = Status (*)(Instance instance, CuStream input_stream, CuStream output_stream);
using ExecuteFn = Status (*)(Instance instance, const ExecuteInputParams* input, ExecuteOutputParams* output);
using DestroyBufferCudaFn = Status (*)(Buffer buffer);
using DestroyFn = Status (*)(Instance instance);
using GetLastErrorFn = Status (*)(Instance instance, char* text, uint32_t* size);
/// With values == nullptr, *size receives how many values the capability has; then fills values.
using GetCapsFn = Status (*)(Instance instance, Caps caps, uint32_t* values, uint32_t* size);

/// NV_OF_CUDA_API_FUNCTION_LIST.
struct CudaFunctionList {
  CreateCudaFn create_cuda;
  InitFn init;
  CreateBufferCudaFn create_buffer_cuda;
  BufferGetCuArrayFn buffer_get_cu_array;
  BufferGetDevicePtrFn buffer_get_device_ptr;
  BufferGetStrideInfoFn buffer_get_stride_info;
  SetIoCudaStreamsFn set_io_cuda_streams;
  ExecuteFn execute;
  DestroyBufferCudaFn destroy_buffer_cuda;
  DestroyFn destroy;
  GetLastErrorFn get_last_error;
  GetCapsFn get_caps;
};

/// The library's exports.
using CreateInstanceCudaFn = Status (*)(uint32_t api_version, CudaFunctionList* functions);
using GetMaxSupportedApiVersionFn = Status (*)(uint32_t* version);

// The ABI, pinned (x86-64: pointers 8 bytes and 8-aligned).
static_assert(sizeof(void*) == 8, "the layouts below are those of a 64-bit build");
static_assert(sizeof(Status) == 4 && sizeof(Bool) == 4 && sizeof(BufferFormat) == 4);
static_assert(sizeof(FlowVector) == 4);
static_assert(offsetof(InitParams, mode) == 16 && offsetof(InitParams, private_data) == 32);
static_assert(offsetof(InitParams, disparity_range) == 40 && offsetof(InitParams, input_buffer_format) == 56);
static_assert(sizeof(InitParams) == 64);
static_assert(sizeof(BufferDescriptor) == 16);
static_assert(sizeof(CudaBufferStrideInfo) == 28);
static_assert(offsetof(ExecuteInputParams, disable_temporal_hints) == 24 &&
              offsetof(ExecuteInputParams, private_data) == 32 &&
              offsetof(ExecuteInputParams, roi_count) == 44 && offsetof(ExecuteInputParams, roi_data) == 48);
static_assert(sizeof(ExecuteInputParams) == 56);
static_assert(offsetof(ExecuteOutputParams, backward_output) == 24 && sizeof(ExecuteOutputParams) == 48);
static_assert(offsetof(CudaFunctionList, set_io_cuda_streams) == 6 * sizeof(void*) &&
              sizeof(CudaFunctionList) == 12 * sizeof(void*));

}  // namespace tt::nvofa
