// VideoReader::scan (validate-data): every frame of a file decoded once without keeping it,
// damage counted and described, and a file NVDEC refuses or decodes short scanned again on the CPU.
#include <string>

#include "core/errors.h"
#include "pipeline/av_handles.h"
#include "pipeline/video_reader_state.h"

namespace tt {

ScanReport VideoReader::scan() {
  State& s = *state_;
  if (s.use_nvdec) {
    std::string reason;
    try {
      ScanReport report = s.scan_once();
      if (report.frames_decoded == report.frames_indexed && report.decoder_errors == 0) return report;
      reason = str_cat("NVDEC produced ", report.frames_decoded, " of ", report.frames_indexed, " frames");
    } catch (const State::NvdecRefused& refused) {
      reason = refused.what();
    }
    s.switch_to_cpu(reason);
  }
  return s.scan_once();
}

const std::string& VideoReader::try_seeks() {
  const State& s = *state_;
  const int64_t count = s.index.size();
  for (const int64_t frame : {count / 2 + 1, count - 2}) {
    if (!s.index.check_seeks || s.index.count_outputs || frame <= 0 || frame >= count) break;
    (void)decode({frame});  // a landing other than indexed switches the reader to counting and says why
  }
  return s.info.decodes_from_start;
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

}  // namespace tt
