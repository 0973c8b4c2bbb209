// VideoReader::State's frame index: every packet of the stream demuxed without decoding (exact
// frame counts, frame times), pts to frame lookup, the keyframe at or before a frame, and seeks.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/errors.h"
#include "pipeline/av_handles.h"
#include "pipeline/video_reader_state.h"

namespace tt {

// Packets of the chosen stream, demuxed without decoding. Packets the demuxer marks for discard
// (before an edit list's start) produce no output frame and are not frames of the video.
void VideoReader::State::build_index() {
  struct Entry {
    int64_t pts;
    int64_t dts;
    int64_t size;
    uint8_t key;
  };
  std::vector<Entry> entries;
  int64_t last_pts = AV_NOPTS_VALUE;
  bool stamped = false;  // some packet of the stream carried a pts or a dts
  // Containers whose timestamps do not name reordered frames (B-frames): AVI stores no presentation
  // times (its timestamps count packets in decoding order, and FFmpeg's guesses trail by the
  // decoder's delay); an MPEG program stream stamps only some pictures, and after a seek its demuxer
  // gives the stamps to other pictures than from the start. There frame i is the i-th frame out of
  // the decoder, decoding from the start of the file (as `ffmpeg -vf select=eq(n\,i)` counts).
  const bool reordered = stream->codecpar->video_delay > 0;
  const bool avi = info.container == "avi";
  index.count_outputs = reordered && (avi || info.container == "mpeg");
  if (index.count_outputs)
    info.decodes_from_start = avi ? "AVI with reordered frames (B-frames) stores no presentation times"
                                  : "an MPEG program stream with reordered frames (B-frames) stamps only some pictures";
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
      // AVI: its packet's time (FFmpeg's generated pts trail by the delay); elsewhere pts, generated
      // where missing (AVFMT_FLAG_GENPTS, set at open).
      stamped = stamped || packet->pts != AV_NOPTS_VALUE || packet->dts != AV_NOPTS_VALUE;
      int64_t pts = packet->pts != AV_NOPTS_VALUE && !(index.count_outputs && avi) ? packet->pts : packet->dts;
      if (pts == AV_NOPTS_VALUE) pts = last_pts == AV_NOPTS_VALUE ? 0 : last_pts + std::max<int64_t>(packet->duration, 1);
      last_pts = pts;
      entries.push_back({pts, packet->dts, packet->size, static_cast<uint8_t>((packet->flags & AV_PKT_FLAG_KEY) != 0)});
    }
    av_packet_unref(packet.get());
  }
  TT_CHECK_HINT(!entries.empty(), ErrorCode::kDecode, av::kDecodeHint, info.path,
                ": the video stream holds no frames");
  // Raw elementary streams (.h264, .hevc: no container) carry no timestamps at all: the times above
  // count packet durations (the frame rate), and the decoder's frames carry none to look up, so
  // frame i is the i-th frame out of the decoder from the start, as in AVI.
  if (!stamped) {
    index.count_outputs = true;
    info.decodes_from_start = "a raw elementary stream without timestamps";
  }
  index.check_seeks = (format->iformat->flags & AVFMT_GENERIC_INDEX) != 0;
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.pts < b.pts; });
  index.time_base = av_q2d(stream->time_base);
  for (const Entry& entry : entries) {
    index.pts.push_back(entry.pts);
    index.dts.push_back(entry.dts);
    index.packet_size.push_back(entry.size);
    index.keyframe.push_back(entry.key);
  }
  // Two frames with one time (Theora in Ogg at a variable rate: its granule positions cannot stamp
  // every frame) cannot be told apart by timestamp either.
  for (size_t k = 1; k < index.pts.size() && !index.count_outputs; ++k)
    if (index.pts[k] == index.pts[k - 1]) {
      index.count_outputs = true;
      info.decodes_from_start = "two frames share one timestamp";
    }
  index.keyframe[0] = 1;  // decoding always starts somewhere: the first frame is the fallback seek point
  finish_index();
}

void VideoReader::State::finish_index() {
  info.frame_count = index.size();
  // No duration in the header (raw streams): the index's span plus one frame.
  if (info.duration_seconds <= 0.0 && index.size() > 0) {
    const double frame_seconds = info.frame_rate > 0.0 ? 1.0 / info.frame_rate : 0.0;
    info.duration_seconds = index.seconds(index.size() - 1) - index.seconds(0) + frame_seconds;
  }
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

int64_t VideoReader::State::seek_target(int64_t frame_index) const {
  // The first frame always by the earlier of its two timestamps: nothing lies before it, so no
  // container lands a GOP early, and MPEG-TS (which seeks by dts) lands on its packet.
  const int64_t pts = index.pts[frame_index];
  const int64_t dts = index.dts[frame_index];
  return (seek_by_dts || frame_index == 0) && dts != AV_NOPTS_VALUE ? std::min(pts, dts) : pts;
}

bool VideoReader::State::can_seek_by_dts(int64_t frame_index) const {
  const int64_t dts = index.dts[frame_index];
  return !seek_by_dts && frame_index > 0 && dts != AV_NOPTS_VALUE && dts < index.pts[frame_index];
}

void VideoReader::State::seek_to_frame(int64_t frame_index) {
  ++seek_count;
  const int rc = av_seek_frame(format.get(), info.stream_index, seek_target(frame_index), AVSEEK_FLAG_BACKWARD);
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

}  // namespace tt
