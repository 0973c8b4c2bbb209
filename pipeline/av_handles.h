// RAII owners for FFmpeg handles (one unique_ptr type with a deleter per AV* handle) and AV_CHECK,
// which turns a negative FFmpeg return code into tt::Error(kDecode) naming the file, the call and
// FFmpeg's own reason (av_strerror). Everything here compiles against FFmpeg 5.1 to 7.x.
#pragma once

extern "C" {
#include <libavcodec/avcodec.h>
#include <libavformat/avformat.h>
#include <libavutil/avutil.h>
#include <libavutil/display.h>
#include <libavutil/frame.h>
#include <libavutil/pixdesc.h>
#include <libswscale/swscale.h>
}

#include <memory>
#include <string>

#include "core/errors.h"

namespace tt::av {

struct FormatContextDeleter {
  void operator()(AVFormatContext* context) const { avformat_close_input(&context); }
};
struct CodecContextDeleter {
  void operator()(AVCodecContext* context) const { avcodec_free_context(&context); }
};
struct FrameDeleter {
  void operator()(AVFrame* frame) const { av_frame_free(&frame); }
};
struct PacketDeleter {
  void operator()(AVPacket* packet) const { av_packet_free(&packet); }
};
struct SwsContextDeleter {
  void operator()(SwsContext* context) const { sws_freeContext(context); }
};

using FormatContextPtr = std::unique_ptr<AVFormatContext, FormatContextDeleter>;
using CodecContextPtr = std::unique_ptr<AVCodecContext, CodecContextDeleter>;
using FramePtr = std::unique_ptr<AVFrame, FrameDeleter>;
using PacketPtr = std::unique_ptr<AVPacket, PacketDeleter>;
using SwsContextPtr = std::unique_ptr<SwsContext, SwsContextDeleter>;

/// FFmpeg's text for an AVERROR code, e.g. "Invalid data found when processing input".
inline std::string error_string(int code) {
  char buffer[AV_ERROR_MAX_STRING_SIZE] = {0};
  if (av_strerror(code, buffer, sizeof(buffer)) < 0) return "FFmpeg error " + std::to_string(code);
  return buffer;
}

/// Allocations that FFmpeg reports as nullptr are out-of-memory, not bad data.
template <typename T>
T* check_alloc(T* pointer, const char* what) {
  if (pointer == nullptr) throw Error(ErrorCode::kMemory, str_cat("FFmpeg could not allocate ", what));
  return pointer;
}

inline constexpr const char* kDecodeHint =
    "check the file with `ffprobe FILE`; re-encode or remove it from the dataset if it is damaged";

}  // namespace tt::av

/// Runs an FFmpeg call; a negative result throws kDecode "<path>: <what> failed: <FFmpeg reason>".
#define AV_CHECK(expr, path, what)                                                                \
  do {                                                                                            \
    const int av_check_rc_ = (expr);                                                              \
    if (av_check_rc_ < 0)                                                                         \
      throw ::tt::Error(::tt::ErrorCode::kDecode,                                                 \
                        ::tt::str_cat((path), ": ", (what), " failed: ", ::tt::av::error_string(av_check_rc_)), \
                        ::tt::av::kDecodeHint);                                                   \
  } while (0)
