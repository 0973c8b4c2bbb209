// VideoReader::State's output of a decoded frame: NVDEC surfaces copied on the GPU, CPU frames
// converted to 4:2:0 with libswscale when they are not already, then packed into the NV12/P010
// layout of DecodedFrames.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>

#include "core/errors.h"
#include "pipeline/av_handles.h"
#include "pipeline/nvdec.h"
#include "pipeline/video_reader_state.h"

namespace tt {

// Frames that are not yuv420p/yuvj420p/yuv420p10le go through libswscale to the matching 4:2:0
// format with the stream's own matrix and range on both sides, so only the chroma layout changes.
const AVFrame* VideoReader::State::to_yuv420(const AVFrame* source) {
  const auto format_in = static_cast<AVPixelFormat>(source->format);
  if (format_in == AV_PIX_FMT_YUV420P || format_in == AV_PIX_FMT_YUVJ420P || format_in == AV_PIX_FMT_YUV420P10LE)
    return source;
  const AVPixelFormat target = info.bit_depth > 8 ? AV_PIX_FMT_YUV420P10LE : AV_PIX_FMT_YUV420P;
  if (!warned_convert) {
    const char* name = av_get_pix_fmt_name(format_in);
    spdlog::info("{}: converting {} frames to {} with libswscale before output", info.path,
                 name != nullptr ? name : "unknown", av_get_pix_fmt_name(target));
    warned_convert = true;
  }
  converter.reset(sws_getCachedContext(converter.release(), source->width, source->height, format_in,
                                       source->width, source->height, target, SWS_BICUBIC, nullptr, nullptr,
                                       nullptr));
  TT_CHECK_HINT(converter != nullptr, ErrorCode::kDecode, av::kDecodeHint, info.path,
                ": libswscale cannot convert ", av_get_pix_fmt_name(format_in), " to ", av_get_pix_fmt_name(target));
  int space = SWS_CS_ITU601;
  if (info.matrix == VideoMatrix::kBt709) space = SWS_CS_ITU709;
  if (info.matrix == VideoMatrix::kBt2020Ncl || info.matrix == VideoMatrix::kBt2020Cl) space = SWS_CS_BT2020;
  const int range = info.full_range ? 1 : 0;
  sws_setColorspaceDetails(converter.get(), sws_getCoefficients(space), range, sws_getCoefficients(space), range,
                           0, 1 << 16, 1 << 16);
  if (!converted) converted.reset(av::check_alloc(av_frame_alloc(), "a frame"));
  if (converted->width != source->width || converted->height != source->height || converted->format != target) {
    av_frame_unref(converted.get());
    converted->width = source->width;
    converted->height = source->height;
    converted->format = target;
    AV_CHECK(av_frame_get_buffer(converted.get(), 0), info.path, "allocating a conversion frame");
  }
  AV_CHECK(av_frame_make_writable(converted.get()), info.path, "allocating a conversion frame");
  AV_CHECK(sws_scale(converter.get(), source->data, source->linesize, 0, source->height, converted->data,
                     converted->linesize),
           info.path, "converting pixel formats");
  return converted.get();
}

void VideoReader::State::store(const AVFrame* source, DecodedFrames& out, int64_t slot) {
  TT_CHECK_HINT(source->width == info.width && source->height == info.height, ErrorCode::kDecode,
                "re-encode the file at one resolution", info.path, ": frame size changes mid-stream (",
                info.width, "x", info.height, " -> ", source->width, "x", source->height, ")");
  if (use_nvdec) {
    if (nvdec_events.fell_back || !nvdec::copy_frame(source, out.y[slot], out.uv[slot], cuda_stream)) {
      const char* name = av_get_pix_fmt_name(static_cast<AVPixelFormat>(source->format));
      throw NvdecRefused(str_cat("FFmpeg gave a ", name != nullptr ? name : "unknown", " frame, not an NV12/P010 "
                                 "CUDA surface"));
    }
    return;
  }
  const AVFrame* planar = to_yuv420(source);
  const int64_t height = info.height;
  const int64_t width = info.width;
  const int64_t chroma_h = (height + 1) / 2;
  const int64_t chroma_w = (width + 1) / 2;
  if (out.bit_depth == 8) {
    uint8_t* y = out.y[slot].data_ptr<uint8_t>();
    uint8_t* uv = out.uv[slot].data_ptr<uint8_t>();
    for (int64_t row = 0; row < height; ++row)
      std::memcpy(y + row * width, planar->data[0] + row * planar->linesize[0], width);
    for (int64_t row = 0; row < chroma_h; ++row) {
      const uint8_t* u = planar->data[1] + row * planar->linesize[1];
      const uint8_t* v = planar->data[2] + row * planar->linesize[2];
      uint8_t* dst = uv + row * chroma_w * 2;
      for (int64_t col = 0; col < chroma_w; ++col) {
        dst[2 * col] = u[col];
        dst[2 * col + 1] = v[col];
      }
    }
    return;
  }
  // P010 layout: the 10-bit value in the high bits of each 16-bit sample.
  auto* y = reinterpret_cast<uint16_t*>(out.y[slot].data_ptr());
  auto* uv = reinterpret_cast<uint16_t*>(out.uv[slot].data_ptr());
  for (int64_t row = 0; row < height; ++row) {
    const auto* src = reinterpret_cast<const uint16_t*>(planar->data[0] + row * planar->linesize[0]);
    for (int64_t col = 0; col < width; ++col) y[row * width + col] = static_cast<uint16_t>(src[col] << 6);
  }
  for (int64_t row = 0; row < chroma_h; ++row) {
    const auto* u = reinterpret_cast<const uint16_t*>(planar->data[1] + row * planar->linesize[1]);
    const auto* v = reinterpret_cast<const uint16_t*>(planar->data[2] + row * planar->linesize[2]);
    uint16_t* dst = uv + row * chroma_w * 2;
    for (int64_t col = 0; col < chroma_w; ++col) {
      dst[2 * col] = static_cast<uint16_t>(u[col] << 6);
      dst[2 * col + 1] = static_cast<uint16_t>(v[col] << 6);
    }
  }
}

}  // namespace tt
