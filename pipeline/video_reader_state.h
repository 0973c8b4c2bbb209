// VideoReader::State, internal to the reader: what its files (video_reader*.cpp) share. Nothing
// outside those files includes it; the API is pipeline/video_reader.h.
#pragma once

#include <spdlog/spdlog.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/cuda_stream.h"
#include "pipeline/av_handles.h"
#include "pipeline/nvdec.h"
#include "pipeline/video_reader.h"

namespace tt {

struct VideoReader::State {
  // NVDEC refused a file mid-way (FFmpeg dropped to software frames): decode() switches to the CPU.
  struct NvdecRefused : std::runtime_error {
    using std::runtime_error::runtime_error;
  };

  VideoReaderOptions options;
  VideoInfo info;
  FrameIndex index;
  // The stream NVDEC's copies run on: the reader's own, not one of LibTorch's pool, which could be
  // the stream of a producer whose VAE encode the copies would then queue behind. Declared before
  // the codec context so that it goes after it: FFmpeg's frame pool is freed with the context while
  // copies on this stream may still read it.
  OwnedCudaStream decoder_stream{"the decoder's stream"};
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
  // Seeks target keyframes' dts instead of their pts: set once a seek by pts landed past its
  // keyframe (MPEG-TS / PS, whose demuxers seek by dts; Matroska's cues are by pts, so not from the start).
  bool seek_by_dts = false;
  bool warned_seek = false;
  bool warned_packet = false;
  bool warned_read = false;
  bool warned_corrupt = false;
  bool warned_convert = false;
  bool index_read_error = false;
  std::string index_problem;
  bool index_reused = false;  // the index came from options.notes (built by an earlier reader)

  // video_reader.cpp: the file, its stream (VideoInfo), the decode path and the decoder.
  void open(const std::string& path);
  void choose_path();
  void open_decoder();
  void switch_to_cpu(const std::string& reason);
  // video_reader_index.cpp: the frame index and seeks.
  void build_index();
  // What the index tells VideoInfo (frame count; the duration where the header has none): after
  // build_index, or after taking an index an earlier reader built (options.notes).
  void finish_index();
  int64_t frame_of_pts(int64_t pts) const;
  int64_t keyframe_at_or_before(int64_t frame) const;
  void seek_to_frame(int64_t frame);
  int64_t seek_target(int64_t frame) const;
  // A seek to `frame` by pts landed late and its dts would land earlier: try by dts.
  bool can_seek_by_dts(int64_t frame) const;
  // video_reader_decode.cpp: the decode loop and the seek generation packets carry.
  DecodedFrames decode_frames(const std::vector<int64_t>& indices);
  int send_packet(AVPacket* packet);
  bool from_current_generation(const AVFrame* decoded) const;
  // video_reader_planes.cpp: decoded frames into DecodedFrames' planes.
  const AVFrame* to_yuv420(const AVFrame* source);
  void store(const AVFrame* source, DecodedFrames& out, int64_t slot);
  // video_reader_scan.cpp: decoding every frame for validate-data.
  ScanReport scan_once();

  void warn_once(bool& flag, const std::string& message) {
    if (flag) return;
    flag = true;
    if (options.quiet || (options.notes && !options.notes->first_warning(info.path, message))) return;
    spdlog::warn("{}: {} (reported once per file)", info.path, message);
  }
};

}  // namespace tt
