// VideoReader: open + describe (VideoInfo), packet-only frame index, seek-and-decode of the needed
// frames into NV12/P010-layout planes. Policies are documented in video_reader.h.
#include "pipeline/video_reader.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <optional>
#include <filesystem>

#include "core/errors.h"
#include "cuda/ops.h"
#include "pipeline/av_handles.h"
#include "pipeline/nvdec.h"

#include <c10/core/impl/VirtualGuardImpl.h>

namespace tt {
namespace {

// FFmpeg's own logging would print every concealed macroblock; the reader reports damage itself.
void quiet_ffmpeg_log() {
  static const bool once = [] {
    av_log_set_level(AV_LOG_FATAL);
    return true;
  }();
  (void)once;
}

std::string tag_or_unknown(const char* name) { return name != nullptr ? name : "unknown"; }

VideoMatrix matrix_from(AVColorSpace space) {
  switch (space) {
    case AVCOL_SPC_BT709: return VideoMatrix::kBt709;
    case AVCOL_SPC_BT2020_NCL: return VideoMatrix::kBt2020Ncl;
    case AVCOL_SPC_BT2020_CL: return VideoMatrix::kBt2020Cl;
    default: return VideoMatrix::kBt601;  // untagged, BT470BG, SMPTE170M and the rest
  }
}

bool is_jpeg_format(AVPixelFormat format) {
  return format == AV_PIX_FMT_YUVJ420P || format == AV_PIX_FMT_YUVJ422P || format == AV_PIX_FMT_YUVJ444P ||
         format == AV_PIX_FMT_YUVJ440P || format == AV_PIX_FMT_YUVJ411P;
}

// The display matrix moved from stream side data (FFmpeg <= 6.x) to codecpar->coded_side_data
// (added in libavcodec 60.30 = FFmpeg 6.1; av_stream_get_side_data is gone in 7.0).
const int32_t* display_matrix(const AVStream* stream) {
#if LIBAVCODEC_VERSION_INT >= AV_VERSION_INT(60, 30, 100)
  const AVPacketSideData* side = av_packet_side_data_get(stream->codecpar->coded_side_data,
                                                         stream->codecpar->nb_coded_side_data,
                                                         AV_PKT_DATA_DISPLAYMATRIX);
  if (side == nullptr || side->size < 9 * static_cast<int>(sizeof(int32_t))) return nullptr;
  return reinterpret_cast<const int32_t*>(side->data);
#else
  size_t size = 0;
  const uint8_t* data = av_stream_get_side_data(stream, AV_PKT_DATA_DISPLAYMATRIX, &size);
  if (data == nullptr || size < 9 * sizeof(int32_t)) return nullptr;
  return reinterpret_cast<const int32_t*>(data);
#endif
}

// av_display_rotation_get gives the counter-clockwise angle the matrix rotates by; the frames
// must be turned the other way to be upright (ffmpeg's autorotate: -90 -> transpose=clock).
int clockwise_rotation(const AVStream* stream) {
  const int32_t* matrix = display_matrix(stream);
  if (matrix == nullptr) return 0;
  const double angle = av_display_rotation_get(matrix);
  if (std::isnan(angle)) return 0;
  long quarter = std::lround(-angle / 90.0);
  quarter = ((quarter % 4) + 4) % 4;
  return static_cast<int>(quarter * 90);
}

// NVDEC refused a file mid-way (FFmpeg dropped to software frames): decode() switches to the CPU.
struct NvdecRefused : std::runtime_error {
  using std::runtime_error::runtime_error;
};

const char* media_type_name(AVMediaType type) {
  const char* name = av_get_media_type_string(type);
  return name != nullptr ? name : "unknown";
}

const AVCodec* find_decoder(AVCodecID id) {
  // FFmpeg's native AV1 decoder only drives hardware; prefer the software ones when present.
  if (id == AV_CODEC_ID_AV1) {
    for (const char* name : {"libdav1d", "libaom-av1"}) {
      const AVCodec* codec = avcodec_find_decoder_by_name(name);
      if (codec != nullptr) return codec;
    }
  }
  return avcodec_find_decoder(id);
}

}  // namespace

const char* video_matrix_name(VideoMatrix matrix) {
  switch (matrix) {
    case VideoMatrix::kBt601: return "bt601";
    case VideoMatrix::kBt709: return "bt709";
    case VideoMatrix::kBt2020Ncl: return "bt2020ncl";
    case VideoMatrix::kBt2020Cl: return "bt2020cl";
  }
  return "bt601";
}

struct VideoReader::State {
  VideoReaderOptions options;
  VideoInfo info;
  FrameIndex index;
  // Declared before the codec context so that it goes after it: FFmpeg's frame pool is freed with
  // the context while copies on this stream may still read it.
  nvdec::OwnedStream decoder_stream;
  av::FormatContextPtr format;
  av::CodecContextPtr codec;
  av::PacketPtr packet;
  av::FramePtr frame;
  av::FramePtr converted;  // swscale target when the stream is not yuv420p/yuvj420p/yuv420p10le
  av::SwsContextPtr converter;
  AVStream* stream = nullptr;
  int device_index = -1;          // CUDA device of options.device, -1 for the CPU
  bool use_nvdec = false;
  nvdec::FormatEvents nvdec_events;  // what the hwaccel's get_format saw (fallback, decoder inits)
  void* cuda_stream = nullptr;    // the stream NVDEC pictures are written on (decoder_stream's)
  int seek_count = 0;
  int64_t decoded_count = 0;
  int64_t generation = 0;         // bumped by every seek; packets carry it, frames of older ones are dropped
  bool drained = false;           // the decoder was sent end-of-stream: it needs a flush before more input
  bool warned_packet = false;
  bool warned_read = false;
  bool warned_corrupt = false;
  bool warned_convert = false;

  void open(const std::string& path);
  void choose_path();
  void open_decoder();
  void switch_to_cpu(const std::string& reason);
  DecodedFrames decode_frames(const std::vector<int64_t>& indices);
  void build_index();
  void seek_to_frame(int64_t frame);
  int send_packet(AVPacket* packet);
  bool from_current_generation(const AVFrame* decoded) const;
  int64_t frame_of_pts(int64_t pts) const;
  int64_t keyframe_at_or_before(int64_t frame) const;
  const AVFrame* to_yuv420(const AVFrame* source);
  void store(const AVFrame* source, DecodedFrames& out, int64_t slot);
  bool index_read_error = false;
  std::string index_problem;
  ScanReport scan_once();
  void warn_once(bool& flag, const std::string& message) {
    if (!flag && !options.quiet) spdlog::warn("{}: {} (reported once per file)", info.path, message);
    flag = true;
  }
};

void VideoReader::State::open(const std::string& path) {
  quiet_ffmpeg_log();
  info.path = path;
  std::error_code fs_error;
  const auto status = std::filesystem::status(path, fs_error);
  TT_CHECK_HINT(std::filesystem::exists(status), ErrorCode::kIo, "check the path (relative paths are relative "
                "to the working folder)", path, ": no such file");
  TT_CHECK_HINT(!std::filesystem::is_directory(status), ErrorCode::kIo, "give a video file, not a folder",
                path, ": is a directory, not a video file");
  TT_CHECK_HINT(std::filesystem::file_size(path, fs_error) > 0 || fs_error, ErrorCode::kDecode, av::kDecodeHint, path,
                ": is empty (0 bytes)");
  {
    std::FILE* file = std::fopen(path.c_str(), "rb");
    TT_CHECK_HINT(file != nullptr, ErrorCode::kIo, "check the file's permissions", path,
                  ": cannot be opened for reading: ", std::strerror(errno));
    std::fclose(file);
  }

  AVFormatContext* raw_format = nullptr;  // avformat_open_input frees it itself on failure
  AV_CHECK(avformat_open_input(&raw_format, path.c_str(), nullptr, nullptr), path,
           "opening the container (not a video file?)");
  format.reset(raw_format);
  AV_CHECK(avformat_find_stream_info(format.get(), nullptr), path, "reading the stream headers");
  info.container = format->iformat != nullptr ? format->iformat->name : "unknown";

  for (unsigned i = 0; i < format->nb_streams; ++i) {
    const AVCodecParameters* par = format->streams[i]->codecpar;
    StreamSummary summary;
    summary.index = static_cast<int>(i);
    summary.type = media_type_name(par->codec_type);
    summary.codec = avcodec_get_name(par->codec_id);
    if (par->codec_type == AVMEDIA_TYPE_VIDEO) {
      summary.width = par->width;
      summary.height = par->height;
    }
    info.streams.push_back(summary);
  }

  int chosen = options.stream_index;
  if (chosen < 0) {
    chosen = av_find_best_stream(format.get(), AVMEDIA_TYPE_VIDEO, -1, -1, nullptr, 0);
    TT_CHECK_HINT(chosen >= 0, ErrorCode::kDecode, av::kDecodeHint, path, ": has no video stream (",
                  av::error_string(chosen), ")");
  }
  TT_CHECK_HINT(chosen < static_cast<int>(format->nb_streams) &&
                    format->streams[chosen]->codecpar->codec_type == AVMEDIA_TYPE_VIDEO,
                ErrorCode::kDecode, "pick a video stream from `teletron probe`", path, ": stream ", chosen,
                " is not a video stream");
  stream = format->streams[chosen];
  info.stream_index = chosen;
  for (unsigned i = 0; i < format->nb_streams; ++i)
    if (static_cast<int>(i) != chosen) format->streams[i]->discard = AVDISCARD_ALL;

  const AVCodecParameters* par = stream->codecpar;
  info.codec = avcodec_get_name(par->codec_id);
  const char* profile = avcodec_profile_name(par->codec_id, par->profile);
  info.profile = profile != nullptr ? profile : "";
  info.width = par->width;
  info.height = par->height;
  TT_CHECK_HINT(info.width > 0 && info.height > 0, ErrorCode::kDecode, av::kDecodeHint, path,
                ": the video stream has no frame size (damaged header?)");
  const auto pixel_format = static_cast<AVPixelFormat>(par->format);
  const AVPixFmtDescriptor* descriptor = av_pix_fmt_desc_get(pixel_format);
  info.pixel_format = descriptor != nullptr ? descriptor->name : "unknown";
  info.bit_depth = descriptor != nullptr ? descriptor->comp[0].depth : 8;
  info.rotation = clockwise_rotation(stream);
  info.matrix = matrix_from(par->color_space);
  info.full_range = par->color_range == AVCOL_RANGE_JPEG || is_jpeg_format(pixel_format);
  info.color_space_tag = tag_or_unknown(av_color_space_name(par->color_space));
  info.color_range_tag = tag_or_unknown(av_color_range_name(par->color_range));
  info.color_primaries_tag = tag_or_unknown(av_color_primaries_name(par->color_primaries));
  info.color_transfer_tag = tag_or_unknown(av_color_transfer_name(par->color_trc));
  const AVRational rate = stream->avg_frame_rate.num > 0 ? stream->avg_frame_rate : stream->r_frame_rate;
  info.frame_rate = rate.den > 0 ? av_q2d(rate) : 0.0;
  if (stream->duration > 0 && stream->duration != AV_NOPTS_VALUE)
    info.duration_seconds = static_cast<double>(stream->duration) * av_q2d(stream->time_base);
  else if (format->duration > 0)
    info.duration_seconds = static_cast<double>(format->duration) / AV_TIME_BASE;
  info.header_frame_count = stream->nb_frames;

  choose_path();
  try {
    open_decoder();
  } catch (const Error& error) {
    if (!use_nvdec) throw;
    switch_to_cpu(error.what());  // NVDEC could not start on this file: the CPU path takes it
  }
  packet.reset(av::check_alloc(av_packet_alloc(), "a packet"));
  frame.reset(av::check_alloc(av_frame_alloc(), "a frame"));
}

void VideoReader::State::choose_path() {
  use_nvdec = false;
  info.decode_path = "cpu";
  if (!options.device.is_cuda()) {
    TT_CHECK(options.device.is_cpu(), ErrorCode::kConfig, info.path, ": frames can be decoded for the CPU or a CUDA "
             "device, not ", options.device.str());
    info.decode_reason = "frames asked for on the CPU";
    return;
  }
  TT_CHECK_HINT(torch::cuda::is_available(), ErrorCode::kConfig, "use --device cpu on machines without a GPU",
                info.path, ": frames asked for on ", options.device.str(), " but LibTorch sees no CUDA device");
  device_index = options.device.has_index()
                     ? options.device.index()
                     : c10::impl::VirtualGuardImpl(c10::DeviceType::CUDA).getDevice().index();
  if (!options.allow_nvdec) {
    info.decode_reason = "NVDEC turned off; CPU decode, frames copied to the GPU";
    return;
  }
  const nvdec::Support support =
      nvdec::support(avcodec_find_decoder(stream->codecpar->codec_id), *stream->codecpar, info.bit_depth, device_index);
  use_nvdec = support.supported;
  info.decode_path = use_nvdec ? "nvdec" : "cpu";
  info.decode_reason = use_nvdec ? support.reason : support.reason + "; CPU decode, frames copied to the GPU";
}

// (Re)creates the codec context for the chosen path. NVDEC uses FFmpeg's native decoder (it drives
// the hwaccel); the CPU path prefers the software AV1 decoders and uses frame threading.
void VideoReader::State::open_decoder() {
  const AVCodecParameters* par = stream->codecpar;
  const AVCodec* decoder = use_nvdec ? avcodec_find_decoder(par->codec_id) : find_decoder(par->codec_id);
  TT_CHECK_HINT(decoder != nullptr, ErrorCode::kDecode,
                "install an FFmpeg built with a decoder for it (AV1: libdav1d), or re-encode the file",
                info.path, ": this FFmpeg build has no decoder for codec '", info.codec, "'");
  info.decoder = use_nvdec ? str_cat(decoder->name, " + NVDEC") : decoder->name;
  codec.reset(av::check_alloc(avcodec_alloc_context3(decoder), "a codec context"));
  AV_CHECK(avcodec_parameters_to_context(codec.get(), par), info.path, "copying the stream parameters");
  codec->pkt_timebase = stream->time_base;
#if LIBAVCODEC_VERSION_MAJOR >= 60
  codec->flags |= AV_CODEC_FLAG_COPY_OPAQUE;
#endif
  drained = false;
  if (use_nvdec) {
    cuda_stream = decoder_stream.get(device_index);
    nvdec_events.fell_back = false;
    nvdec::attach(codec.get(), device_index, cuda_stream, &nvdec_events, info.path);
    codec->thread_count = 1;  // the engine decodes; one thread parses
  } else {
    codec->thread_type = FF_THREAD_FRAME;
    codec->thread_count = options.thread_count;
  }
  AV_CHECK(avcodec_open2(codec.get(), decoder, nullptr), info.path,
           str_cat("opening the ", info.decoder, " decoder"));
}

void VideoReader::State::switch_to_cpu(const std::string& reason) {
  // The NVDEC context (and FFmpeg's frame pool) goes with the old codec context: copies out of it
  // that are still queued finish first.
  decoder_stream.synchronize();
  spdlog::warn("{}: NVDEC could not decode this file ({}); decoding it on the CPU from now on", info.path, reason);
  use_nvdec = false;
  info.decode_path = "cpu";
  info.decode_reason = str_cat("NVDEC failed on this file (", reason, "); CPU decode, frames copied to the GPU");
  open_decoder();
}

// Packets of the chosen stream, demuxed without decoding. Packets the demuxer marks for discard
// (before an edit list's start) produce no output frame and are not frames of the video.
void VideoReader::State::build_index() {
  struct Entry {
    int64_t pts;
    uint8_t key;
  };
  std::vector<Entry> entries;
  int64_t last_pts = AV_NOPTS_VALUE;
  for (;;) {
    const int rc = av_read_frame(format.get(), packet.get());
    if (rc == AVERROR_EOF) break;
    if (rc < 0) {
      TT_CHECK_HINT(!entries.empty(), ErrorCode::kDecode, av::kDecodeHint, info.path,
                    ": reading the first packet failed: ", av::error_string(rc));
      index_read_error = true;
      index_problem = str_cat("the container is damaged or truncated after ", entries.size(), " frames (",
                              av::error_string(rc), ")");
      warn_once(warned_read, index_problem + "; indexing what was read");
      break;
    }
    if (packet->stream_index == info.stream_index && (packet->flags & AV_PKT_FLAG_DISCARD) == 0) {
      int64_t pts = packet->pts != AV_NOPTS_VALUE ? packet->pts : packet->dts;
      if (pts == AV_NOPTS_VALUE) pts = last_pts == AV_NOPTS_VALUE ? 0 : last_pts + std::max<int64_t>(packet->duration, 1);
      last_pts = pts;
      entries.push_back({pts, static_cast<uint8_t>((packet->flags & AV_PKT_FLAG_KEY) != 0)});
    }
    av_packet_unref(packet.get());
  }
  TT_CHECK_HINT(!entries.empty(), ErrorCode::kDecode, av::kDecodeHint, info.path,
                ": the video stream holds no frames");
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.pts < b.pts; });
  index.time_base = av_q2d(stream->time_base);
  for (const Entry& entry : entries) {
    index.pts.push_back(entry.pts);
    index.keyframe.push_back(entry.key);
  }
  index.keyframe[0] = 1;  // decoding always starts somewhere: the first frame is the fallback seek point
  info.frame_count = index.size();
}

int64_t VideoReader::State::frame_of_pts(int64_t pts) const {
  if (pts == AV_NOPTS_VALUE) return -1;
  auto it = std::lower_bound(index.pts.begin(), index.pts.end(), pts);
  if (it != index.pts.end() && *it == pts) return it - index.pts.begin();
  return -1;
}

int64_t VideoReader::State::keyframe_at_or_before(int64_t frame_index) const {
  for (int64_t i = frame_index; i > 0; --i)
    if (index.keyframe[i]) return i;
  return 0;
}

void VideoReader::State::seek_to_frame(int64_t frame_index) {
  ++seek_count;
  const int rc = av_seek_frame(format.get(), info.stream_index, index.pts[frame_index], AVSEEK_FLAG_BACKWARD);
  if (rc < 0) {
    // Some demuxers (raw streams) cannot seek by timestamp: go back to the start by bytes instead.
    AV_CHECK(avformat_seek_file(format.get(), -1, INT64_MIN, 0, 0, AVSEEK_FLAG_BYTE), info.path, "seeking");
  }
  // Auto: only H.264 on NVDEC goes without: FFmpeg's H.264 flush resets the decoder context, so
  // the next picture re-creates the hardware decoder. HEVC's and VP9's flushes keep it, and HEVC
  // needs its flush (a CRA keyframe decodes its leading pictures only after one).
  const bool flush = options.flush_on_seek >= 0 ? options.flush_on_seek == 1
                                                 : !(use_nvdec && stream->codecpar->codec_id == AV_CODEC_ID_H264);
  if (flush || drained) avcodec_flush_buffers(codec.get());
  drained = false;
  ++generation;
}

// Packets carry the seek generation to the frames they produce (FFmpeg >= 6: packet->opaque with
// AV_CODEC_FLAG_COPY_OPAQUE; 5.1: the codec context's reordered_opaque, copied at picture start).
int VideoReader::State::send_packet(AVPacket* source) {
  if (source == nullptr) {
    drained = true;
    return avcodec_send_packet(codec.get(), nullptr);
  }
#if LIBAVCODEC_VERSION_MAJOR >= 60
  source->opaque = reinterpret_cast<void*>(static_cast<intptr_t>(generation));
#else
  codec->reordered_opaque = generation;
#endif
  return avcodec_send_packet(codec.get(), source);
}

bool VideoReader::State::from_current_generation(const AVFrame* decoded) const {
#if LIBAVCODEC_VERSION_MAJOR >= 60
  return reinterpret_cast<intptr_t>(decoded->opaque) == generation;
#else
  return decoded->reordered_opaque == generation;
#endif
}

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

VideoReader::VideoReader(const std::string& path, VideoReaderOptions options) : state_(std::make_unique<State>()) {
  state_->options = options;
  state_->open(path);
  state_->build_index();
}

VideoReader::~VideoReader() = default;

const VideoInfo& VideoReader::info() const { return state_->info; }
const FrameIndex& VideoReader::index() const { return state_->index; }
int VideoReader::last_seek_count() const { return state_->seek_count; }
int64_t VideoReader::last_decoded_count() const { return state_->decoded_count; }
int64_t VideoReader::nvdec_decoder_inits() const { return state_->nvdec_events.inits; }

DecodedFrames VideoReader::decode(const std::vector<int64_t>& indices) {
  State& s = *state_;
  if (s.use_nvdec) {
    std::string reason;
    try {
      return s.decode_frames(indices);
    } catch (const NvdecRefused& refused) {
      reason = refused.what();
    } catch (const Error& error) {
      // A needed frame NVDEC did not produce: the CPU decoder gets one try before it is an error.
      if (error.code() != ErrorCode::kDecode) throw;
      reason = error.what();
    }
    s.switch_to_cpu(reason);
  }
  return s.decode_frames(indices);
}

DecodedFrames VideoReader::State::decode_frames(const std::vector<int64_t>& indices) {
  State& s = *this;
  const VideoInfo& info = s.info;
  const int64_t count = s.index.size();
  for (size_t i = 0; i < indices.size(); ++i) {
    TT_CHECK_HINT(indices[i] >= 0 && indices[i] < count, ErrorCode::kData,
                  str_cat("the file has frames 0..", count - 1), info.path, ": frame index ", indices[i],
                  " is out of range (", count, " frames)");
    TT_CHECK(i == 0 || indices[i] > indices[i - 1], ErrorCode::kInternal,
             "decode() expects sorted unique frame indices, got ", indices[i - 1], " then ", indices[i]);
  }
  DecodedFrames out;
  out.bit_depth = info.bit_depth > 8 ? 10 : 8;
  out.matrix = info.matrix;
  out.full_range = info.full_range;
  const auto dtype = out.bit_depth == 8 ? torch::kUInt8 : torch::kUInt16;
  const auto frames = static_cast<int64_t>(indices.size());
  // NVDEC writes straight into device tensors; the CPU path into host memory (pinned when the
  // frames go on to a GPU), copied over once at the end.
  const bool to_gpu = s.options.device.is_cuda();
  const auto planes = s.use_nvdec ? torch::dtype(dtype).device(s.options.device)
                                  : torch::dtype(dtype).pinned_memory(to_gpu);
  out.y = torch::empty({frames, info.height, info.width}, planes);
  out.uv = torch::empty({frames, (info.height + 1) / 2, (info.width + 1) / 2, 2}, planes);
  out.indices = torch::tensor(std::vector<int64_t>(indices.begin(), indices.end()), torch::kInt64);
  out.seconds = torch::empty({frames}, torch::kFloat64);
  for (int64_t t = 0; t < frames; ++t) out.seconds[t] = s.index.seconds(indices[t]);
  s.seek_count = 0;
  s.decoded_count = 0;
  if (frames == 0) {
    if (to_gpu) out.y = out.y.to(s.options.device), out.uv = out.uv.to(s.options.device);
    return out;
  }
  // Needed frames by index, for the per-packet skip decision.
  std::vector<uint8_t> needed(static_cast<size_t>(count), 0);
  for (int64_t frame_index : indices) needed[static_cast<size_t>(frame_index)] = 1;
  // NVDEC copies into the new tensors on the reader's stream, after the current stream's work (the
  // tensors are the current stream's); whatever way this function ends, the current stream then
  // waits for those copies before it (or the caching allocator, when an error frees the tensors)
  // uses that memory again.
  struct OrderAfterCopies {
    State* state = nullptr;  // null: nothing queued on the reader's stream
    ~OrderAfterCopies() {
      if (state == nullptr) return;
      try {
        nvdec::current_waits_for(state->cuda_stream, state->device_index);
      } catch (const Error& error) {
        // Unwinding already: wait on the host instead, so that no copy outlives the tensors.
        spdlog::error("{}; waiting for the decoder's stream on the host", error.what());
        try {
          state->decoder_stream.synchronize();
        } catch (const Error&) {
        }
      }
    }
  } order_after_copies;
  if (s.use_nvdec) {
    nvdec::wait_for_current(s.cuda_stream, s.device_index);  // the new tensors are free to write
    order_after_copies.state = &s;
  }
  const int64_t reseek_gap = s.options.reseek_gap >= 0 ? s.options.reseek_gap : (s.use_nvdec ? 48 : 1);

  int64_t keyframes = 0;
  for (uint8_t key : s.index.keyframe) keyframes += key;
  const int64_t max_seeks = 2 * keyframes + 2 * frames + 8;
  int64_t next = 0;                    // position in `indices` of the next frame to produce
  int64_t seek_frame = s.keyframe_at_or_before(indices[0]);
  bool need_seek = true;
  bool draining = false;
  int64_t last_frame = -1;             // index of the last frame the decoder returned since the seek
  while (next < frames) {
    if (need_seek) {
      // Every seek moves forward or back to an earlier keyframe, so this bound is never reached by a
      // file whose index is true; a damaged one could otherwise keep the loop going.
      TT_CHECK_HINT(s.seek_count < max_seeks, ErrorCode::kDecode, av::kDecodeHint, info.path, ": seeking for frame ",
                    indices[next], " did not converge after ", s.seek_count, " seeks (damaged index or timestamps?)");
      s.seek_to_frame(seek_frame);
      need_seek = false;
      draining = false;
      last_frame = -1;
    }
    if (!draining) {
      const int rc = av_read_frame(s.format.get(), s.packet.get());
      if (rc < 0) {
        if (rc != AVERROR_EOF)
          s.warn_once(s.warned_read, str_cat("reading stopped early: ", av::error_string(rc)));
        draining = true;
        // End of stream: draining starts even when the call reports an earlier packet's error.
        const int flushed = s.send_packet(nullptr);
        if (flushed < 0 && flushed != AVERROR_EOF)
          s.warn_once(s.warned_packet, str_cat("the decoder reported an error (", av::error_string(flushed),
                                               "); concealing and going on"));
      } else {
        if (s.packet->stream_index == info.stream_index) {
          if (s.options.skip_unneeded_frames) {
            // A frame nothing needs: let the decoder drop it if nothing references it either.
            const int64_t packet_frame = s.frame_of_pts(s.packet->pts);
            const bool skippable = packet_frame >= 0 && needed[static_cast<size_t>(packet_frame)] == 0;
            s.codec->skip_frame = skippable ? AVDISCARD_NONREF : AVDISCARD_DEFAULT;
          }
          const int sent = s.send_packet(s.packet.get());
          if (sent < 0 && sent != AVERROR(EAGAIN))
            s.warn_once(s.warned_packet, str_cat("the decoder rejected a packet (", av::error_string(sent),
                                                 "); concealing and going on"));
        }
        av_packet_unref(s.packet.get());
      }
    }
    bool restart = false;
    for (;;) {
      const int rc = avcodec_receive_frame(s.codec.get(), s.frame.get());
      if (rc == AVERROR(EAGAIN)) break;
      if (rc == AVERROR_EOF) {
        TT_CHECK_HINT(next >= frames, ErrorCode::kDecode, av::kDecodeHint, info.path, ": frame ", indices[next],
                      " (t=", s.index.seconds(indices[next]), " s) never came out of the decoder (damaged data?)");
        break;
      }
      if (rc < 0) {
        s.warn_once(s.warned_packet, str_cat("the decoder reported an error (", av::error_string(rc),
                                             "); concealing and going on"));
        break;
      }
      ++s.decoded_count;
      if (!s.from_current_generation(s.frame.get())) {  // queued before the last seek
        av_frame_unref(s.frame.get());
        continue;
      }
      const int64_t found = s.frame_of_pts(s.frame->best_effort_timestamp);
      const bool corrupt = (s.frame->flags & AV_FRAME_FLAG_CORRUPT) != 0 || s.frame->decode_error_flags != 0;
      if (found >= 0 && found >= indices[next]) {
        if (found > indices[next]) {
          // The wanted frame was skipped: right after a seek the demuxer landed too late, so
          // start from the keyframe before; otherwise the decoder dropped it.
          const bool landed_late = last_frame < seek_frame;  // nothing from the seek keyframe on yet
          TT_CHECK_HINT(landed_late && seek_frame > 0, ErrorCode::kDecode, av::kDecodeHint, info.path,
                        ": frame ", indices[next], " (t=", s.index.seconds(indices[next]),
                        " s) was not produced by the decoder (damaged data?)");
          seek_frame = s.keyframe_at_or_before(seek_frame - 1);
          need_seek = true;
          restart = true;
        } else {
          if (corrupt) {
            TT_CHECK_HINT(!s.options.fail_on_corrupt, ErrorCode::kDecode, av::kDecodeHint, info.path, ": frame ",
                          found, " is damaged (FFmpeg flagged it corrupt)");
            s.warn_once(s.warned_corrupt, str_cat("frame ", found, " is damaged; using FFmpeg's concealment"));
          }
          s.store(s.frame.get(), out, next);
          ++next;
        }
      }
      if (found >= 0) last_frame = std::max(last_frame, found);
      av_frame_unref(s.frame.get());
      if (restart || next >= frames) break;
      // Re-seek when the next needed frame lies in a later GOP far enough ahead that decoding up
      // to its keyframe costs more than a seek (options.reseek_gap).
      // Only forward of the last seek: a demuxer that lands before its target (MPEG-TS seeks are
      // inexact) would otherwise be sent to the same target again and again.
      const int64_t target_key = s.keyframe_at_or_before(indices[next]);
      if (last_frame >= 0 && target_key > last_frame + 1 && target_key - last_frame - 1 >= reseek_gap &&
          target_key > seek_frame) {
        seek_frame = target_key;
        need_seek = true;
        break;
      }
    }
    if (draining && !need_seek && next < frames) {
      TT_CHECK_HINT(false, ErrorCode::kDecode, av::kDecodeHint, info.path, ": frame ", indices[next], " (t=",
                    s.index.seconds(indices[next]), " s) never came out of the decoder (damaged data?)");
    }
  }
  if (s.use_nvdec) {
    order_after_copies.state = nullptr;
    nvdec::current_waits_for(s.cuda_stream, s.device_index);  // here a failure is TT_ERR_SYNC
  } else if (to_gpu) {
    out.y = out.y.to(s.options.device, /*non_blocking=*/true);
    out.uv = out.uv.to(s.options.device, /*non_blocking=*/true);
  }
  return out;
}

ScanReport VideoReader::scan() {
  State& s = *state_;
  if (s.use_nvdec) {
    std::string reason;
    try {
      ScanReport report = s.scan_once();
      if (report.frames_decoded == report.frames_indexed && report.decoder_errors == 0) return report;
      reason = str_cat("NVDEC produced ", report.frames_decoded, " of ", report.frames_indexed, " frames");
    } catch (const NvdecRefused& refused) {
      reason = refused.what();
    }
    s.switch_to_cpu(reason);
  }
  return s.scan_once();
}

ScanReport VideoReader::State::scan_once() {
  ScanReport report;
  report.frames_indexed = index.size();
  report.read_error = index_read_error;
  if (index_read_error) report.problems.push_back(index_problem);
  if (info.header_frame_count > index.size())
    report.problems.push_back(str_cat("the header lists ", info.header_frame_count, " frames but only ", index.size(),
                                      " packets were found (truncated?)"));
  seek_count = 0;
  seek_to_frame(0);
  codec->skip_frame = AVDISCARD_DEFAULT;
  bool draining = false;
  std::string first_decoder_error;
  for (;;) {
    if (!draining) {
      const int rc = av_read_frame(format.get(), packet.get());
      if (rc < 0) {
        draining = true;
        const int flushed = send_packet(nullptr);  // draining starts even when it reports an earlier error
        if (flushed < 0 && flushed != AVERROR_EOF) {
          ++report.decoder_errors;
          if (first_decoder_error.empty()) first_decoder_error = av::error_string(flushed);
        }
      } else {
        if (packet->stream_index == info.stream_index) {
          const int sent = send_packet(packet.get());
          if (sent < 0 && sent != AVERROR(EAGAIN)) {
            ++report.decoder_errors;
            if (first_decoder_error.empty()) first_decoder_error = av::error_string(sent);
          }
        }
        av_packet_unref(packet.get());
      }
    }
    bool done = false;
    for (;;) {
      const int rc = avcodec_receive_frame(codec.get(), frame.get());
      if (rc == AVERROR(EAGAIN)) break;
      if (rc == AVERROR_EOF) {
        done = true;
        break;
      }
      if (rc < 0) {
        ++report.decoder_errors;
        if (first_decoder_error.empty()) first_decoder_error = av::error_string(rc);
        break;
      }
      if (!from_current_generation(frame.get())) {  // queued before the scan's seek
        av_frame_unref(frame.get());
        continue;
      }
      if (use_nvdec && (nvdec_events.fell_back || frame->format != AV_PIX_FMT_CUDA)) {
        av_frame_unref(frame.get());
        throw NvdecRefused("FFmpeg gave software frames, not CUDA surfaces");
      }
      ++report.frames_decoded;
      if ((frame->flags & AV_FRAME_FLAG_CORRUPT) != 0 || frame->decode_error_flags != 0) ++report.corrupt_frames;
      av_frame_unref(frame.get());
    }
    if (done) break;
  }
  decoded_count = report.frames_decoded;
  if (report.decoder_errors > 0)
    report.problems.push_back(str_cat("the decoder reported ", report.decoder_errors, " error(s) (first: ",
                                      first_decoder_error, ")"));
  if (report.frames_decoded < report.frames_indexed)
    report.problems.push_back(str_cat("the decoder produced ", report.frames_decoded, " of ", report.frames_indexed,
                                      " frames"));
  if (report.corrupt_frames > 0)
    report.problems.push_back(str_cat(report.corrupt_frames, " frame(s) are damaged (FFmpeg concealed them)"));
  return report;
}

torch::Tensor VideoReader::decode_rgb(const std::vector<int64_t>& indices, RgbConverter converter) {
  DecodedFrames frames = decode(indices);
  torch::Tensor rgb;  // (T, H, W, 3) uint8
  if (converter == RgbConverter::kSwscale) {
    frames.y = frames.y.cpu();  // libswscale runs on the host
    frames.uv = frames.uv.cpu();
    rgb = yuv420_to_rgb_swscale(frames);
  } else {
    rgb = yuv420_to_rgb(frames.y, frames.uv, yuv_format(frames));
  }
  return rotate_frames(rgb, state_->info.rotation);
}

}  // namespace tt
