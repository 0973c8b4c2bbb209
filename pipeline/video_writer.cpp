// MP4 and animated-GIF writing of RGB frames with libavcodec/libavformat (see video_writer.h).
#include "pipeline/video_writer.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

extern "C" {
#include <libavutil/imgutils.h>
#include <libavutil/opt.h>
}

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "core/errors.h"
#include "core/file_io.h"
#include "core/tensorboard.h"
#include "pipeline/av_handles.h"

namespace tt {
namespace {

// Output contexts are freed, not closed as inputs are; the file (avio_open) is closed by its owner.
struct OutputContextDeleter {
  void operator()(AVFormatContext* context) const { avformat_free_context(context); }
};
using OutputContextPtr = std::unique_ptr<AVFormatContext, OutputContextDeleter>;

struct IoContextDeleter {
  void operator()(AVIOContext* io) const {
    if (io == nullptr) return;
    av_freep(&io->buffer);
    avio_context_free(&io);
  }
};
using IoContextPtr = std::unique_ptr<AVIOContext, IoContextDeleter>;

// A negative FFmpeg return code as tt::Error(code) "<where>: <what> failed: <FFmpeg's reason>".
void check_av(int rc, ErrorCode code, const std::string& where, const char* what) {
  if (rc < 0) throw Error(code, str_cat(where, ": ", what, " failed: ", av::error_string(rc)));
}

// (T, H, W, 3) uint8 on the CPU, contiguous; kInternal for anything else.
torch::Tensor checked_frames(const torch::Tensor& frames, const char* what) {
  TT_CHECK(frames.defined() && frames.dim() == 4 && frames.size(3) == 3 && frames.scalar_type() == torch::kUInt8 &&
               frames.size(0) > 0 && frames.size(1) > 0 && frames.size(2) > 0,
           ErrorCode::kInternal, what, ": expected frames (T, H, W, 3) uint8 with T, H, W > 0, got ",
           frames.defined() ? str_cat(frames.sizes(), " ", frames.scalar_type()) : std::string("an undefined tensor"));
  return frames.to(torch::kCPU).contiguous();
}

// The encoder's packets written to `format`'s stream 0, rescaled from the encoder's time base.
void drain_packets(AVCodecContext* encoder, AVFormatContext* format, AVStream* stream, const std::string& where) {
  av::PacketPtr packet(av::check_alloc(av_packet_alloc(), "a packet"));
  while (true) {
    const int rc = avcodec_receive_packet(encoder, packet.get());
    if (rc == AVERROR(EAGAIN) || rc == AVERROR_EOF) return;
    check_av(rc, ErrorCode::kInternal, where, "avcodec_receive_packet");
    av_packet_rescale_ts(packet.get(), encoder->time_base, stream->time_base);
    packet->stream_index = stream->index;
    check_av(av_interleaved_write_frame(format, packet.get()), ErrorCode::kIo, where, "writing a packet");
  }
}

// Sends one frame (nullptr: end of stream) and writes what comes out.
void encode(AVCodecContext* encoder, const AVFrame* frame, AVFormatContext* format, AVStream* stream,
            const std::string& where) {
  check_av(avcodec_send_frame(encoder, frame), ErrorCode::kInternal, where, "avcodec_send_frame");
  drain_packets(encoder, format, stream, where);
}

// The 252-colour palette: R in 6 levels, G in 7, B in 6; index r * 42 + g * 6 + b.
constexpr int kLevelsR = 6, kLevelsG = 7, kLevelsB = 6;

uint8_t level_value(int index, int levels) {
  return static_cast<uint8_t>(std::lround(255.0 * index / (levels - 1)));
}

// The nearest level below v plus the dither offset, in [0, levels - 1].
int dithered_level(uint8_t v, int levels, float threshold) {
  const int level = static_cast<int>(std::floor(static_cast<float>(v) * (levels - 1) / 255.0f + threshold));
  return std::clamp(level, 0, levels - 1);
}

// 4 x 4 Bayer matrix as thresholds in (0, 1).
constexpr int kBayer[4][4] = {{0, 8, 2, 10}, {12, 4, 14, 6}, {3, 11, 1, 9}, {15, 7, 13, 5}};

#if LIBAVFORMAT_VERSION_MAJOR >= 61
int append_to_string(void* opaque, const uint8_t* data, int size) {
#else
int append_to_string(void* opaque, uint8_t* data, int size) {
#endif
  static_cast<std::string*>(opaque)->append(reinterpret_cast<const char*>(data), static_cast<size_t>(size));
  return size;
}

}  // namespace

std::string default_mp4_encoder() {
  if (avcodec_find_encoder_by_name("libx264") != nullptr) return "libx264";
  if (avcodec_find_encoder_by_name("mpeg4") != nullptr) return "mpeg4";
  return "";
}

std::string write_mp4(const std::string& path, const torch::Tensor& frames_in, double fps, const Mp4Options& options) {
  torch::Tensor frames = checked_frames(frames_in, "write_mp4");  // (T, H, W, 3) uint8
  TT_CHECK(std::isfinite(fps) && fps > 0.0, ErrorCode::kInternal, "write_mp4: fps must be > 0, got ", fps);
  // yuv420p needs even sizes: repeat the last row / column.
  if (frames.size(1) % 2 != 0) frames = torch::cat({frames, frames.narrow(1, frames.size(1) - 1, 1)}, 1);
  if (frames.size(2) % 2 != 0) frames = torch::cat({frames, frames.narrow(2, frames.size(2) - 1, 1)}, 2);
  frames = frames.contiguous();
  const int count = static_cast<int>(frames.size(0)), height = static_cast<int>(frames.size(1)),
            width = static_cast<int>(frames.size(2));

  const std::string name = options.encoder.empty() ? default_mp4_encoder() : options.encoder;
  const AVCodec* codec = name.empty() ? nullptr : avcodec_find_encoder_by_name(name.c_str());
  TT_CHECK_HINT(codec != nullptr, ErrorCode::kConfig,
                "install an FFmpeg whose libavcodec has libx264 or mpeg4 (Debian: apt install libavcodec-dev)",
                "cannot write ", path, ": this FFmpeg build has no ",
                name.empty() ? std::string("libx264 or mpeg4") : name, " encoder");
  const bool x264 = name == "libx264";
  // libx264 prints its statistics through FFmpeg's log; errors still come back as return codes.
  if (av_log_get_level() > AV_LOG_ERROR) av_log_set_level(AV_LOG_ERROR);

  const std::string temporary = path + ".tmp";
  AVFormatContext* raw_format = nullptr;
  check_av(avformat_alloc_output_context2(&raw_format, nullptr, "mp4", temporary.c_str()), ErrorCode::kInternal,
           path, "avformat_alloc_output_context2(mp4)");
  OutputContextPtr format(raw_format);

  av::CodecContextPtr encoder(av::check_alloc(avcodec_alloc_context3(codec), "an encoder context"));
  encoder->width = width;
  encoder->height = height;
  encoder->pix_fmt = AV_PIX_FMT_YUV420P;
  encoder->framerate = av_d2q(fps, 65535);  // mpeg4 takes time-base denominators up to 65535
  encoder->time_base = av_inv_q(encoder->framerate);
  encoder->gop_size = 12;
  encoder->color_range = AVCOL_RANGE_MPEG;
  encoder->colorspace = AVCOL_SPC_BT709;
  encoder->color_primaries = AVCOL_PRI_BT709;
  encoder->color_trc = AVCOL_TRC_BT709;
  if (x264) {
    av_opt_set(encoder->priv_data, "crf", std::to_string(options.crf).c_str(), 0);
    av_opt_set(encoder->priv_data, "preset", "medium", 0);
  } else {
    encoder->max_b_frames = 0;
    encoder->flags |= AV_CODEC_FLAG_QSCALE;
    encoder->global_quality = FF_QP2LAMBDA * options.mpeg4_qscale;
  }
  if ((format->oformat->flags & AVFMT_GLOBALHEADER) != 0) encoder->flags |= AV_CODEC_FLAG_GLOBAL_HEADER;
  check_av(avcodec_open2(encoder.get(), codec, nullptr), ErrorCode::kInternal, path, str_cat("opening ", name).c_str());

  AVStream* stream = av::check_alloc(avformat_new_stream(format.get(), nullptr), "a stream");
  stream->time_base = encoder->time_base;
  stream->avg_frame_rate = encoder->framerate;
  check_av(avcodec_parameters_from_context(stream->codecpar, encoder.get()), ErrorCode::kInternal, path,
           "avcodec_parameters_from_context");

  check_av(avio_open(&format->pb, temporary.c_str(), AVIO_FLAG_WRITE), ErrorCode::kIo, temporary, "creating the file");
  try {
    check_av(avformat_write_header(format.get(), nullptr), ErrorCode::kIo, temporary, "writing the MP4 header");
    av::SwsContextPtr convert(av::check_alloc(
        sws_getContext(width, height, AV_PIX_FMT_RGB24, width, height, AV_PIX_FMT_YUV420P, SWS_BICUBIC, nullptr,
                       nullptr, nullptr),
        "a swscale context"));
    const int* bt709 = sws_getCoefficients(SWS_CS_ITU709);
    sws_setColorspaceDetails(convert.get(), bt709, 1, bt709, 0, 0, 1 << 16, 1 << 16);
    av::FramePtr frame(av::check_alloc(av_frame_alloc(), "a frame"));
    frame->format = AV_PIX_FMT_YUV420P;
    frame->width = width;
    frame->height = height;
    check_av(av_frame_get_buffer(frame.get(), 0), ErrorCode::kMemory, path, "av_frame_get_buffer");
    const uint8_t* rgb = frames.data_ptr<uint8_t>();
    for (int t = 0; t < count; ++t) {
      check_av(av_frame_make_writable(frame.get()), ErrorCode::kMemory, path, "av_frame_make_writable");
      const uint8_t* source[1] = {rgb + static_cast<size_t>(t) * height * width * 3};
      const int source_stride[1] = {width * 3};
      sws_scale(convert.get(), source, source_stride, 0, height, frame->data, frame->linesize);
      frame->pts = t;
      if (!x264) frame->quality = encoder->global_quality;
      encode(encoder.get(), frame.get(), format.get(), stream, path);
    }
    encode(encoder.get(), nullptr, format.get(), stream, path);
    check_av(av_write_trailer(format.get()), ErrorCode::kIo, temporary, "writing the MP4 trailer");
  } catch (...) {
    avio_closep(&format->pb);
    std::remove(temporary.c_str());
    throw;
  }
  check_av(avio_closep(&format->pb), ErrorCode::kIo, temporary, "closing the file");
  rename_or_throw(temporary, path);
  spdlog::info("video: {} ({} frames of {}x{} at {:g} fps) encoded with {}{}", path, count, width, height, fps, name,
               !x264 && options.encoder.empty() ? " (this FFmpeg has no libx264)" : "");
  return name;
}

std::string encode_gif(const torch::Tensor& frames_in, double fps) {
  const torch::Tensor frames = checked_frames(frames_in, "encode_gif");  // (T, H, W, 3) uint8
  TT_CHECK(std::isfinite(fps) && fps > 0.0, ErrorCode::kInternal, "encode_gif: fps must be > 0, got ", fps);
  const int count = static_cast<int>(frames.size(0)), height = static_cast<int>(frames.size(1)),
            width = static_cast<int>(frames.size(2));
  const char* where = "animated GIF";
  const AVCodec* codec = avcodec_find_encoder(AV_CODEC_ID_GIF);
  TT_CHECK(codec != nullptr, ErrorCode::kConfig, "this FFmpeg build has no gif encoder (needed for TensorBoard videos)");

  AVFormatContext* raw_format = nullptr;
  check_av(avformat_alloc_output_context2(&raw_format, nullptr, "gif", nullptr), ErrorCode::kInternal, where,
           "avformat_alloc_output_context2(gif)");
  OutputContextPtr format(raw_format);
  std::string bytes;
  constexpr int kIoBufferSize = 1 << 16;
  auto* io_buffer = static_cast<unsigned char*>(av::check_alloc(av_malloc(kIoBufferSize), "an I/O buffer"));
  IoContextPtr io(avio_alloc_context(io_buffer, kIoBufferSize, 1, &bytes, nullptr, append_to_string, nullptr));
  if (!io) av_free(io_buffer);
  av::check_alloc(io.get(), "an AVIOContext");
  format->pb = io.get();
  format->flags |= AVFMT_FLAG_CUSTOM_IO;

  av::CodecContextPtr encoder(av::check_alloc(avcodec_alloc_context3(codec), "an encoder context"));
  encoder->width = width;
  encoder->height = height;
  encoder->pix_fmt = AV_PIX_FMT_PAL8;
  encoder->time_base = AVRational{1, 100};  // GIF frame delays are in 1/100 s
  check_av(avcodec_open2(encoder.get(), codec, nullptr), ErrorCode::kInternal, where, "opening the gif encoder");
  AVStream* stream = av::check_alloc(avformat_new_stream(format.get(), nullptr), "a stream");
  stream->time_base = encoder->time_base;
  check_av(avcodec_parameters_from_context(stream->codecpar, encoder.get()), ErrorCode::kInternal, where,
           "avcodec_parameters_from_context");
  check_av(avformat_write_header(format.get(), nullptr), ErrorCode::kInternal, where, "writing the GIF header");

  av::FramePtr frame(av::check_alloc(av_frame_alloc(), "a frame"));
  frame->format = AV_PIX_FMT_PAL8;
  frame->width = width;
  frame->height = height;
  check_av(av_frame_get_buffer(frame.get(), 0), ErrorCode::kMemory, where, "av_frame_get_buffer");
  const uint8_t* rgb = frames.data_ptr<uint8_t>();
  for (int t = 0; t < count; ++t) {
    check_av(av_frame_make_writable(frame.get()), ErrorCode::kMemory, where, "av_frame_make_writable");
    auto* palette = reinterpret_cast<uint32_t*>(frame->data[1]);  // 256 entries, 0xAARRGGBB
    std::memset(palette, 0, AVPALETTE_SIZE);
    for (int r = 0; r < kLevelsR; ++r)
      for (int g = 0; g < kLevelsG; ++g)
        for (int b = 0; b < kLevelsB; ++b)
          palette[r * kLevelsG * kLevelsB + g * kLevelsB + b] =
              0xFF000000u | (uint32_t{level_value(r, kLevelsR)} << 16) | (uint32_t{level_value(g, kLevelsG)} << 8) |
              uint32_t{level_value(b, kLevelsB)};
    for (int y = 0; y < height; ++y) {
      const uint8_t* row = rgb + (static_cast<size_t>(t) * height + y) * width * 3;
      uint8_t* out = frame->data[0] + static_cast<size_t>(y) * frame->linesize[0];
      for (int x = 0; x < width; ++x) {
        const float threshold = (kBayer[y % 4][x % 4] + 0.5f) / 16.0f;
        const int r = dithered_level(row[3 * x], kLevelsR, threshold);
        const int g = dithered_level(row[3 * x + 1], kLevelsG, threshold);
        const int b = dithered_level(row[3 * x + 2], kLevelsB, threshold);
        out[x] = static_cast<uint8_t>(r * kLevelsG * kLevelsB + g * kLevelsB + b);
      }
    }
    // The muxer takes each frame's delay from the next frame's pts (the last one repeats the one before).
    frame->pts = std::llround(t * 100.0 / fps);
    encode(encoder.get(), frame.get(), format.get(), stream, where);
  }
  encode(encoder.get(), nullptr, format.get(), stream, where);
  check_av(av_write_trailer(format.get()), ErrorCode::kInternal, where, "writing the GIF trailer");
  avio_flush(io.get());
  return bytes;
}

void add_gif(TensorBoardWriter& writer, const std::string& tag, int64_t step, const torch::Tensor& frames, double fps,
             double wall_time) {
  const std::string gif = encode_gif(frames, fps);
  writer.add_image(tag, step, gif, static_cast<int>(frames.size(1)), static_cast<int>(frames.size(2)), 3, wall_time);
}

}  // namespace tt
