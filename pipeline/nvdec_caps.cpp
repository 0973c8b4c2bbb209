// nvdec::built and nvdec::support: the up-front decision whether NVDEC can take a stream. The
// driver's own answer (cuvidGetDecoderCaps through ffnvcodec's dlopen loader, so the binary does not
// link libcuda/libnvcuvid and still starts on machines without a GPU) is what counts: NVDEC can fail
// silently on streams it does not support (on the H200, H.264 10-bit gave zero frames and no error),
// so trying and watching is not an option. This file includes ffnvcodec's CUDA declarations and must
// not see the CUDA toolkit's cuda.h (same names), so it is compiled without the shared PCH.
#include "pipeline/nvdec.h"

#include <map>
#include <mutex>
#include <tuple>

#include <spdlog/spdlog.h>

#include "core/errors.h"

#ifdef TELETRON_WITH_NVDEC
// Keep the loader quiet: a missing library is reported as a reason, not printed to stderr.
#define FFNV_LOG_FUNC(logctx, msg, ...) ((void)(logctx))
#define FFNV_DEBUG_LOG_FUNC(logctx, msg, ...) ((void)(logctx))
#include <ffnvcodec/dynlink_loader.h>
#endif

namespace tt::nvdec {
namespace {

const char* chroma_name(int log2_w, int log2_h) {
  if (log2_w == 1 && log2_h == 1) return "4:2:0";
  if (log2_w == 1 && log2_h == 0) return "4:2:2";
  if (log2_w == 0 && log2_h == 0) return "4:4:4";
  return "unusual chroma";
}

#ifdef TELETRON_WITH_NVDEC

// This FFmpeg build can drive NVDEC for `decoder` (compiled with --enable-nvdec for that codec).
bool ffmpeg_has_hwaccel(const AVCodec* decoder) {
  for (int i = 0;; ++i) {
    const AVCodecHWConfig* config = avcodec_get_hw_config(decoder, i);
    if (config == nullptr) return false;
    if (config->device_type == AV_HWDEVICE_TYPE_CUDA && (config->methods & AV_CODEC_HW_CONFIG_METHOD_HW_DEVICE_CTX))
      return true;
  }
}

bool cuvid_codec(AVCodecID id, cudaVideoCodec* out) {
  switch (id) {
    case AV_CODEC_ID_H264: *out = cudaVideoCodec_H264; return true;
    case AV_CODEC_ID_HEVC: *out = cudaVideoCodec_HEVC; return true;
    case AV_CODEC_ID_VP9: *out = cudaVideoCodec_VP9; return true;
    case AV_CODEC_ID_VP8: *out = cudaVideoCodec_VP8; return true;
    case AV_CODEC_ID_AV1: *out = cudaVideoCodec_AV1; return true;
    case AV_CODEC_ID_MPEG4: *out = cudaVideoCodec_MPEG4; return true;
    case AV_CODEC_ID_MPEG2VIDEO: *out = cudaVideoCodec_MPEG2; return true;
    case AV_CODEC_ID_MPEG1VIDEO: *out = cudaVideoCodec_MPEG1; return true;
    case AV_CODEC_ID_VC1: *out = cudaVideoCodec_VC1; return true;
    default: return false;
  }
}

// The driver libraries, loaded once per process; `error` says why when they are not there.
struct Driver {
  CudaFunctions* cuda = nullptr;
  CuvidFunctions* cuvid = nullptr;
  std::string error;
};

const Driver& driver() {
  static const Driver loaded = [] {
    Driver d;
    if (cuda_load_functions(&d.cuda, nullptr) < 0) {
      d.error = "the NVIDIA driver library libcuda.so.1 cannot be loaded";
      return d;
    }
    if (cuvid_load_functions(&d.cuvid, nullptr) < 0 || d.cuvid->cuvidGetDecoderCaps == nullptr) {
      d.error = "the NVIDIA driver's video decode library libnvcuvid.so.1 cannot be loaded";
      return d;
    }
    if (d.cuda->cuInit(0) != CUDA_SUCCESS) d.error = "cuInit failed: the NVIDIA driver is not usable";
    return d;
  }();
  return loaded;
}

struct Caps {
  bool ok = false;  // the query itself worked
  std::string error;
  CUVIDDECODECAPS caps{};
};

// cuvidGetDecoderCaps needs a current context: the device's primary context (LibTorch's) is pushed
// for the call and popped again, leaving the thread's context as it was.
Caps query(int device_index, cudaVideoCodec codec, cudaVideoChromaFormat chroma, int bit_depth) {
  static std::mutex mutex;
  static std::map<std::tuple<int, int, int, int>, Caps> cache;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(device_index, static_cast<int>(codec), static_cast<int>(chroma), bit_depth);
  auto found = cache.find(key);
  if (found != cache.end()) return found->second;
  Caps result;
  const Driver& d = driver();
  if (!d.error.empty()) {
    result.error = d.error;
    return cache[key] = result;
  }
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (d.cuda->cuDeviceGet(&device, device_index) != CUDA_SUCCESS ||
      d.cuda->cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS) {
    result.error = str_cat("CUDA device ", device_index, " is not available to the driver API");
    return cache[key] = result;
  }
  CUcontext previous = nullptr;
  if (d.cuda->cuCtxPushCurrent(context) == CUDA_SUCCESS) {
    result.caps.eCodecType = codec;
    result.caps.eChromaFormat = chroma;
    result.caps.nBitDepthMinus8 = static_cast<unsigned>(bit_depth - 8);
    const CUresult rc = d.cuvid->cuvidGetDecoderCaps(&result.caps);
    result.ok = rc == CUDA_SUCCESS;
    if (!result.ok) result.error = str_cat("cuvidGetDecoderCaps failed (CUresult ", static_cast<int>(rc), ")");
    d.cuda->cuCtxPopCurrent(&previous);
  } else {
    result.error = "cannot make the device's primary context current";
  }
  d.cuda->cuDevicePrimaryCtxRelease(device);
  return cache[key] = result;
}

#endif  // TELETRON_WITH_NVDEC

}  // namespace

#ifdef TELETRON_WITH_NVDEC

bool built() { return true; }

// FFmpeg 5.1's own AV_CUDA_USE_PRIMARY_CONTEXT refuses a primary context that is already active
// with other flags than blocking sync (LibTorch's is: ENOTSUP, "Operation not supported"), so the
// reader hands FFmpeg the context itself. Retained once and kept for the process, as the runtime does.
void* primary_context(int device_index, std::string* error) {
  static std::mutex mutex;
  static std::map<int, CUcontext> contexts;
  std::lock_guard<std::mutex> lock(mutex);
  auto found = contexts.find(device_index);
  if (found != contexts.end()) return found->second;
  const Driver& d = driver();
  if (!d.error.empty()) {
    *error = d.error;
    return nullptr;
  }
  CUdevice device = 0;
  CUcontext context = nullptr;
  if (d.cuda->cuDeviceGet(&device, device_index) != CUDA_SUCCESS) {
    *error = str_cat("CUDA device ", device_index, " is not available to the driver API");
    return nullptr;
  }
  // Wait for the GPU by blocking, not spinning. The default (CU_CTX_SCHED_AUTO) spins whenever the
  // machine has more cores than CUDA contexts, and every decode session waits for its pictures, so
  // many sessions on few cores could burn those cores waiting. A precaution, not a measured win:
  // on the H200 the GPU path on 2 cores gave 2.44 clips/s before this and 2.50 after (device runs
  // 4 and 5), and NVDEC decode-all on 2 cores reached 3,442 frames/s with it. The _v2 entry point
  // also changes an already active context (LibTorch's); the flag applies to the whole process.
  using SetFlags = CUresult (*)(CUdevice, unsigned int);
  auto set_flags = reinterpret_cast<SetFlags>(dlsym(d.cuda->lib, "cuDevicePrimaryCtxSetFlags_v2"));
  if (set_flags == nullptr) set_flags = d.cuda->cuDevicePrimaryCtxSetFlags;
  unsigned int flags = 0;
  int active = 0;
  d.cuda->cuDevicePrimaryCtxGetState(device, &flags, &active);
  constexpr unsigned int kSchedMask = 0x07;  // CU_CTX_SCHED_SPIN | _YIELD | _BLOCKING_SYNC: one of them
  if ((flags & kSchedMask) != CU_CTX_SCHED_BLOCKING_SYNC &&
      set_flags(device, (flags & ~kSchedMask) | CU_CTX_SCHED_BLOCKING_SYNC) != CUDA_SUCCESS)
    spdlog::debug("CUDA device {}: could not switch to blocking synchronisation", device_index);
  if (d.cuda->cuDevicePrimaryCtxRetain(&context, device) != CUDA_SUCCESS) {
    *error = str_cat("cannot retain the primary context of CUDA device ", device_index);
    return nullptr;
  }
  contexts[device_index] = context;
  return context;
}

Support support(const AVCodec* decoder, const AVCodecParameters& stream, int bit_depth, int device_index) {
  const char* codec_name = avcodec_get_name(stream.codec_id);
  const AVPixFmtDescriptor* pixels = av_pix_fmt_desc_get(static_cast<AVPixelFormat>(stream.format));
  if (pixels == nullptr) return {false, str_cat("the stream's pixel format is unknown; NVDEC needs it up front")};
  const int log2_w = pixels->log2_chroma_w;
  const int log2_h = pixels->log2_chroma_h;
  const std::string what = str_cat(codec_name, " ", bit_depth, "-bit ", chroma_name(log2_w, log2_h));
  cudaVideoCodec codec{};
  if (!cuvid_codec(stream.codec_id, &codec)) return {false, str_cat("NVDEC has no decoder for ", codec_name)};
  if (log2_w != 1 || log2_h != 1 || (pixels->flags & AV_PIX_FMT_FLAG_RGB) != 0)
    return {false, str_cat(what, ": teletron's NVDEC path takes 4:2:0 only")};
  if (bit_depth != 8 && bit_depth != 10)
    return {false, str_cat(what, ": teletron's NVDEC path takes 8- and 10-bit video only")};
  const Caps caps = query(device_index, codec, cudaVideoChromaFormat_420, bit_depth);
  if (!caps.ok) return {false, caps.error};
  const CUVIDDECODECAPS& c = caps.caps;
  if (!c.bIsSupported) return {false, str_cat("NVDEC on this GPU does not decode ", what, " (cuvidGetDecoderCaps)")};
  if (decoder == nullptr || !ffmpeg_has_hwaccel(decoder))
    return {false, str_cat("this FFmpeg build has no NVDEC hwaccel for ", codec_name, " (configure --enable-nvdec)")};
  const auto width = static_cast<unsigned>(stream.width);
  const auto height = static_cast<unsigned>(stream.height);
  if (width < c.nMinWidth || height < c.nMinHeight)
    return {false, str_cat(width, "x", height, " is below NVDEC's minimum ", c.nMinWidth, "x", c.nMinHeight, " for ",
                           what, " (cuvidGetDecoderCaps)")};
  const unsigned macroblocks = ((width + 15) / 16) * ((height + 15) / 16);
  if (width > c.nMaxWidth || height > c.nMaxHeight || macroblocks > c.nMaxMBCount)
    return {false, str_cat(width, "x", height, " is above NVDEC's maximum ", c.nMaxWidth, "x", c.nMaxHeight, " for ",
                           what, " (cuvidGetDecoderCaps)")};
  return {true, str_cat("NVDEC decodes ", what, " at ", width, "x", height, " (cuvidGetDecoderCaps: ",
                        static_cast<int>(c.nNumNVDECs), " engines)")};
}

#else

bool built() { return false; }

void* primary_context(int, std::string* error) {
  *error = "this teletron build has no NVDEC path";
  return nullptr;
}

Support support(const AVCodec*, const AVCodecParameters&, int, int) {
  return {false, "this teletron build has no NVDEC path (built without CUDA or the ffnvcodec headers)"};
}

#endif  // TELETRON_WITH_NVDEC

}  // namespace tt::nvdec
