// The NVDEC side of the decoder: whether NVDEC can take a stream on this GPU (asked up front from
// the driver with cuvidGetDecoderCaps, never by trying), attaching FFmpeg's CUDA hwaccel to a codec
// context so that decoded surfaces live in LibTorch's primary context and are written on a stream
// the reader owns, and copying a decoded AV_PIX_FMT_CUDA frame into torch tensors.
//
// Built when CUDA and the ffnvcodec headers (Debian/Ubuntu: libffmpeg-nvenc-dev) are found; without
// them nvdec_support() always answers "no" with that reason, and the CPU path runs.
#pragma once

#include <torch/types.h>

#include <memory>
#include <string>

#include "pipeline/av_handles.h"

namespace tt::nvdec {

struct Support {
  bool supported = false;
  /// Why not (or, when supported, what was checked), e.g. "NVDEC on this GPU does not decode h264
  /// 10-bit 4:2:0 (cuvidGetDecoderCaps)".
  std::string reason;
};

/// True when this binary was built with the NVDEC path.
bool built();

/// Can NVDEC on CUDA device `device_index` decode this stream? Asks the driver once per (device,
/// codec, chroma format, bit depth) and checks the size against the minimum/maximum it reports; also
/// checks that this FFmpeg build has the codec's NVDEC hwaccel. Never throws: problems (no driver
/// library, no device) come back as supported = false with the reason.
Support support(const AVCodec* decoder, const AVCodecParameters& stream, int bit_depth, int device_index);

/// The primary context of `device_index` (a CUcontext: the one the CUDA runtime, and so LibTorch,
/// uses), retained once per process; nullptr with *error set when the driver cannot give it.
void* primary_context(int device_index, std::string* error);

/// What FFmpeg's get_format callback saw on one codec context.
struct FormatEvents {
  bool fell_back = false;  // FFmpeg offered software formats only (the hwaccel could not start)
  int64_t inits = 0;       // hardware-decoder (re)initialisations: one per first picture after a flush
};

/// Attaches a CUDA device context (the primary context of `device_index`, FFmpeg's copies on
/// `stream`, a cudaStream_t) and a get_format that takes AV_PIX_FMT_CUDA, before avcodec_open2.
/// `events` (outliving the codec context) records what get_format sees.
void attach(AVCodecContext* codec, int device_index, void* stream, FormatEvents* events, const std::string& path);

/// Copies a decoded AV_PIX_FMT_CUDA frame (NV12 or P010 surface) into y (H, W) and uv
/// (ceil(H/2), ceil(W/2), 2) CUDA tensors on `stream`. Returns false when the frame is not a CUDA
/// frame of those formats (the caller takes the CPU path). For odd heights FFmpeg copies only
/// floor(H/2) chroma rows out of the decoder; the last row repeats the one above it.
bool copy_frame(const AVFrame* frame, const torch::Tensor& y, const torch::Tensor& uv, void* stream);

/// `stream` waits (CUDA event) for the work queued so far on the current stream of `device_index`.
/// A failing CUDA call is TT_ERR_SYNC naming both streams.
void wait_for_current(void* stream, int device_index);

/// The current stream of `device_index` waits (CUDA event) for the work queued so far on `stream`.
void current_waits_for(void* stream, int device_index);

}  // namespace tt::nvdec
