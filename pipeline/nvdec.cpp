// nvdec::attach and nvdec::copy_frame (see nvdec.h): FFmpeg's CUDA hwaccel on LibTorch's primary
// context, writing on the reader's own stream, and the copy of decoded surfaces into tensors.
#include "pipeline/nvdec.h"

#include "core/errors.h"
#include "core/stream_handoff.h"


#ifdef TELETRON_WITH_NVDEC
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

extern "C" {
#include <libavutil/hwcontext.h>
#include <libavutil/hwcontext_cuda.h>
}
#endif

namespace tt::nvdec {

#ifdef TELETRON_WITH_NVDEC
namespace {

// get_format: take CUDA surfaces when offered. When FFmpeg cannot initialise the hwaccel it calls
// again without AV_PIX_FMT_CUDA in the list; that is recorded so the reader can switch paths on
// purpose instead of silently decoding on the CPU (seen on a 128x128 HEVC file, which also lost a
// frame).
AVPixelFormat pick_cuda(AVCodecContext* codec, const AVPixelFormat* offered) {
  auto* events = static_cast<FormatEvents*>(codec->opaque);
  for (const AVPixelFormat* format = offered; *format != AV_PIX_FMT_NONE; ++format) {
    if (*format == AV_PIX_FMT_CUDA) {
      if (events != nullptr) ++events->inits;
      return AV_PIX_FMT_CUDA;
    }
  }
  if (events != nullptr) events->fell_back = true;
  return offered[0];
}

}  // namespace

void attach(AVCodecContext* codec, int device_index, void* stream, FormatEvents* events, const std::string& path) {
  std::string error;
  void* context = primary_context(device_index, &error);
  TT_CHECK(context != nullptr, ErrorCode::kDecode, path, ": NVDEC: ", error);
  // The primary context is the one the CUDA runtime (and so LibTorch) uses: surfaces and tensors
  // share one address space and no context switches happen. FFmpeg gets it (and the stream its
  // copies run on — the reader's, not the legacy default stream) before initialising the device;
  // a context it did not create is not released by it.
  AVBufferRef* device = av::check_alloc(av_hwdevice_ctx_alloc(AV_HWDEVICE_TYPE_CUDA), "a CUDA device context");
  auto* cuda = static_cast<AVCUDADeviceContext*>(reinterpret_cast<AVHWDeviceContext*>(device->data)->hwctx);
  cuda->cuda_ctx = static_cast<CUcontext>(context);
  cuda->stream = static_cast<CUstream>(stream);
  const int rc = av_hwdevice_ctx_init(device);
  if (rc < 0) av_buffer_unref(&device);
  AV_CHECK(rc, path, "initialising the NVDEC (CUDA) device");
  codec->hw_device_ctx = device;  // the codec context owns the reference now
  codec->opaque = events;
  codec->get_format = pick_cuda;
}

bool copy_frame(const AVFrame* frame, const torch::Tensor& y, const torch::Tensor& uv, void* stream) {
  if (frame->format != AV_PIX_FMT_CUDA || frame->hw_frames_ctx == nullptr) return false;
  const auto* frames = reinterpret_cast<const AVHWFramesContext*>(frame->hw_frames_ctx->data);
  const AVPixelFormat layout = frames->sw_format;
  const int64_t bytes = layout == AV_PIX_FMT_NV12 ? 1 : layout == AV_PIX_FMT_P010LE ? 2 : 0;
  if (bytes == 0 || y.element_size() != bytes) return false;
  const int64_t height = y.size(0);
  const int64_t width = y.size(1);
  const int64_t chroma_rows = uv.size(0);
  const int64_t chroma_row_bytes = uv.size(1) * 2 * bytes;
  TT_ASSERT(frame->width == width && frame->height == height, "NVDEC frame ", frame->width, "x", frame->height,
            " does not match the stream's ", width, "x", height);
  auto s = static_cast<cudaStream_t>(stream);
  auto check = [s](cudaError_t rc) {
    if (rc != cudaSuccess) throw_sync_error(s, "copying an NVDEC surface", cudaGetErrorString(rc));
  };
  check(cudaMemcpy2DAsync(y.data_ptr(), width * bytes, frame->data[0], frame->linesize[0], width * bytes, height,
                          cudaMemcpyDeviceToDevice, s));
  const int64_t written = height / 2;  // rows FFmpeg copied out of the decoder (frame->height >> 1)
  auto* uv_out = static_cast<uint8_t*>(uv.data_ptr());
  check(cudaMemcpy2DAsync(uv_out, chroma_row_bytes, frame->data[1], frame->linesize[1], chroma_row_bytes, written,
                          cudaMemcpyDeviceToDevice, s));
  if (chroma_rows > written && written > 0)
    check(cudaMemcpyAsync(uv_out + written * chroma_row_bytes, uv_out + (written - 1) * chroma_row_bytes,
                          chroma_row_bytes, cudaMemcpyDeviceToDevice, s));
  return true;
}

namespace {

void check_sync(cudaError_t rc, const char* what, cudaStream_t signaller, cudaStream_t waiter) {
  if (rc != cudaSuccess)
    throw_sync_error(signaller, str_cat("NVDEC: ", what, " for stream ", static_cast<void*>(waiter)),
                     cudaGetErrorString(rc));
}

// `waiter` waits for what is queued on `signaller` so far.
void order(cudaStream_t signaller, cudaStream_t waiter) {
  if (signaller == waiter) return;
  cudaEvent_t event = nullptr;
  check_sync(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "creating an event", signaller, waiter);
  const cudaError_t recorded = cudaEventRecord(event, signaller);
  const cudaError_t waited = recorded == cudaSuccess ? cudaStreamWaitEvent(waiter, event, 0) : recorded;
  cudaEventDestroy(event);  // freed once it has fired
  check_sync(recorded, "recording an event", signaller, waiter);
  check_sync(waited, "waiting for an event", signaller, waiter);
}

}  // namespace

void wait_for_current(void* stream, int device_index) {
  order(c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_index)).stream(),
        static_cast<cudaStream_t>(stream));
}

void current_waits_for(void* stream, int device_index) {
  order(static_cast<cudaStream_t>(stream),
        c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device_index)).stream());
}

#else

void wait_for_current(void*, int) {}
void current_waits_for(void*, int) {}

void attach(AVCodecContext*, int, void*, FormatEvents*, const std::string& path) {
  throw Error(ErrorCode::kInternal, str_cat(path, ": NVDEC requested from a build without it"));
}

bool copy_frame(const AVFrame*, const torch::Tensor&, const torch::Tensor&, void*) { return false; }

#endif  // TELETRON_WITH_NVDEC

}  // namespace tt::nvdec
