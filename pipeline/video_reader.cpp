// VideoReader: a file opened and its stream described (VideoInfo: rotation from the display matrix,
// colour matrix and range, codec names), the decode path chosen (NVDEC or CPU, and why) and the
// decoder opened, a file switched to the CPU path, the accessors and decode_rgb. The rest of the
// reader: video_reader_index.cpp (frame index, seeks), video_reader_decode.cpp (decode and its
// loop), video_reader_planes.cpp (frames into planes), video_reader_scan.cpp (validate-data's scan),
// all sharing video_reader_state.h. Policies are documented in video_reader.h.
#include "pipeline/video_reader.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cerrno>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <c10/core/impl/VirtualGuardImpl.h>

#include "core/content_hash.h"
#include "core/errors.h"
#include "cuda/ops.h"
#include "pipeline/av_handles.h"
#include "pipeline/nvdec.h"
#include "pipeline/video_reader_state.h"

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

// FFmpeg keeps what a file says in its colour fields, also values none of its enumerators has (a
// damaged, crafted or newer file): the int behind the field, read without loading the enum (a
// load of a value outside an enum's range is undefined behaviour).
template <typename Enum>
int raw_value(const Enum& field) {
  static_assert(sizeof(Enum) == sizeof(int), "FFmpeg's colour enums are int-sized");
  int value = 0;
  std::memcpy(&value, &field, sizeof value);
  return value;
}

// FFmpeg's name of colour-enum value `value` (below `count`, the enum's *_NB), or "unknown".
template <typename Enum>
std::string colour_tag(int value, int count, const char* (*name_of)(Enum)) {
  if (value < 0 || value >= count) return "unknown";
  return tag_or_unknown(name_of(static_cast<Enum>(value)));
}

VideoMatrix matrix_from(int space) {
  if (space == AVCOL_SPC_BT709) return VideoMatrix::kBt709;
  if (space == AVCOL_SPC_BT2020_NCL) return VideoMatrix::kBt2020Ncl;
  if (space == AVCOL_SPC_BT2020_CL) return VideoMatrix::kBt2020Cl;
  return VideoMatrix::kBt601;  // untagged, BT470BG, SMPTE170M, values FFmpeg does not know, and the rest
}

bool is_jpeg_format(AVPixelFormat format) {
  return format == AV_PIX_FMT_YUVJ420P || format == AV_PIX_FMT_YUVJ422P || format == AV_PIX_FMT_YUVJ444P ||
         format == AV_PIX_FMT_YUVJ440P || format == AV_PIX_FMT_YUVJ411P;
}

// Grey (with or without alpha): one luma plane, no chroma, not paletted.
bool is_grey_format(const AVPixFmtDescriptor* descriptor) {
  return descriptor != nullptr && (descriptor->nb_components == 1 || descriptor->nb_components == 2) &&
         (descriptor->flags & (AV_PIX_FMT_FLAG_PAL | AV_PIX_FMT_FLAG_RGB | AV_PIX_FMT_FLAG_HWACCEL)) == 0;
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
  // Packets without a pts get one from the packets after them (as `ffmpeg -fflags +genpts`): an
  // MPEG program stream stamps only some of its pictures, and the index needs every frame's time.
  format->flags |= AVFMT_FLAG_GENPTS;

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
  // The stream's or the codec's sample aspect (FFmpeg's guess prefers the stream's); implausible
  // ratios (a damaged header) count as square.
  const AVRational sar = av_guess_sample_aspect_ratio(format.get(), stream, nullptr);
  const int64_t sar_num = sar.num, sar_den = sar.den;  // 64-bit: a crafted ratio near INT_MAX
  if (sar_num > 0 && sar_den > 0 && sar_num <= 16 * sar_den && sar_den <= 16 * sar_num) {
    int reduced_num = 1, reduced_den = 1;
    av_reduce(&reduced_num, &reduced_den, sar_num, sar_den, INT_MAX);
    info.sar_num = reduced_num;
    info.sar_den = reduced_den;
  }
  const int color_space = raw_value(par->color_space);
  const int color_range = raw_value(par->color_range);
  info.matrix = matrix_from(color_space);
  // Grey is full range unless tagged limited, as libswscale (and so the ffmpeg CLI) reads it.
  info.full_range = color_range == AVCOL_RANGE_JPEG || is_jpeg_format(pixel_format) ||
                    (is_grey_format(descriptor) && color_range != AVCOL_RANGE_MPEG);
  info.color_space_tag = colour_tag(color_space, AVCOL_SPC_NB, av_color_space_name);
  info.color_range_tag = colour_tag(color_range, AVCOL_RANGE_NB, av_color_range_name);
  info.color_primaries_tag = colour_tag(raw_value(par->color_primaries), AVCOL_PRI_NB, av_color_primaries_name);
  info.color_transfer_tag = colour_tag(raw_value(par->color_trc), AVCOL_TRC_NB, av_color_transfer_name);
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

bool VideoFileNotes::first_warning(const std::string& path, const std::string& message) {
  const std::lock_guard<std::mutex> lock(mutex_);
  return warned_.emplace(path, message).second;
}

void VideoFileNotes::set_decodes_from_start(const std::string& path, const std::string& reason) {
  const std::lock_guard<std::mutex> lock(mutex_);
  decodes_from_start_[path] = reason;
}

std::string VideoFileNotes::decodes_from_start(const std::string& path) const {
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = decodes_from_start_.find(path);
  return it == decodes_from_start_.end() ? std::string() : it->second;
}

std::string VideoFileNotes::stamp_of(const std::string& path) {
  try {
    return file_stamp(path);
  } catch (const Error&) {
    return {};
  }
}

std::shared_ptr<const VideoFileNotes::Indexed> VideoFileNotes::index(const std::string& path,
                                                                     const std::string& stamp,
                                                                     int stream_index) const {
  if (stamp.empty()) return nullptr;
  const std::lock_guard<std::mutex> lock(mutex_);
  const auto it = indexes_.find(path);
  if (it == indexes_.end() || it->second->stamp != stamp || it->second->stream_index != stream_index)
    return nullptr;
  return it->second;
}

void VideoFileNotes::keep_index(const std::string& path, Indexed indexed) {
  const int64_t frames = indexed.index.size();
  if (indexed.stamp.empty() || frames > kIndexBudgetFrames) return;
  const std::lock_guard<std::mutex> lock(mutex_);
  auto [it, added] = indexes_.try_emplace(path);
  if (added) index_order_.push_back(path);
  else
    indexed_frames_ -= it->second->index.size();
  indexed_frames_ += frames;
  it->second = std::make_shared<const Indexed>(std::move(indexed));
  while (indexed_frames_ > kIndexBudgetFrames && !index_order_.empty()) {
    const auto oldest = indexes_.find(index_order_.front());
    indexed_frames_ -= oldest->second->index.size();
    indexes_.erase(oldest);
    index_order_.pop_front();
  }
}

VideoReader::VideoReader(const std::string& path, VideoReaderOptions options) : state_(std::make_unique<State>()) {
  State& s = *state_;
  s.options = std::move(options);
  if (!s.options.notes) {
    s.open(path);
    s.build_index();
    return;
  }
  VideoFileNotes& notes = *s.options.notes;
  // Before opening: a file replaced after this shows as another stamp to the next reader.
  std::string stamp = VideoFileNotes::stamp_of(path);
  s.open(path);
  if (const auto kept = notes.index(s.info.path, stamp, s.info.stream_index)) {
    s.index = kept->index;
    s.info.decodes_from_start = kept->decodes_from_start;
    s.index_problem = kept->read_problem;
    s.index_read_error = !s.index_problem.empty();
    s.index_reused = true;
    s.finish_index();
  } else {
    s.build_index();
    notes.keep_index(s.info.path, {s.index, s.info.stream_index, s.info.decodes_from_start, s.index_problem,
                                   std::move(stamp)});
  }
  if (!s.index.count_outputs) {
    // An earlier reader of this file found its seeks land elsewhere: count from the start at once.
    std::string reason = notes.decodes_from_start(s.info.path);
    if (!reason.empty()) {
      s.index.count_outputs = true;
      s.info.decodes_from_start = std::move(reason);
    }
  }
}

VideoReader::~VideoReader() = default;

const VideoInfo& VideoReader::info() const { return state_->info; }
const FrameIndex& VideoReader::index() const { return state_->index; }
bool VideoReader::index_reused() const { return state_->index_reused; }
int VideoReader::last_seek_count() const { return state_->seek_count; }
int64_t VideoReader::last_decoded_count() const { return state_->decoded_count; }
int64_t VideoReader::nvdec_decoder_inits() const { return state_->nvdec_events.inits; }

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
