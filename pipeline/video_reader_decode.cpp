// VideoReader::decode and its loop: the needed frames of a request decoded forward from their
// keyframes (re-seeking to later GOPs, retrying when a demuxer lands late), ordered after and before
// the caller's CUDA stream on NVDEC, a file NVDEC fails on decoded again on the CPU, and the seek
// generation that packets carry to their frames.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/errors.h"
#include "pipeline/av_handles.h"
#include "pipeline/nvdec.h"
#include "pipeline/video_reader_state.h"

namespace tt {

DecodedFrames VideoReader::decode(const std::vector<int64_t>& indices) {
  State& s = *state_;
  if (s.use_nvdec) {
    std::string reason;
    try {
      return s.decode_frames(indices);
    } catch (const State::NvdecRefused& refused) {
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
  // Counting frames starts from the first one (a GOP may begin with pictures shown before its
  // keyframe, which a decoder that starts at the keyframe drops) and never seeks ahead.
  const bool by_count = s.index.count_outputs;
  int64_t seek_frame = by_count ? 0 : s.keyframe_at_or_before(indices[0]);
  bool need_seek = true;
  bool draining = false;
  int64_t last_frame = -1;             // index of the last frame the decoder returned since the seek
  bool check_landing = false;          // the next packet of the stream is the first after a seek
  int64_t outputs = 0;                 // frames of the current seek out of the decoder (count_outputs)
  // Counting frames needs every frame out of the decoder: none may be skipped.
  const bool skip_unneeded = s.options.skip_unneeded_frames && !by_count;
  if (!skip_unneeded) s.codec->skip_frame = AVDISCARD_DEFAULT;
  // Nothing came out of the seek keyframe or after it before a later frame (or the end): the
  // demuxer landed past the keyframe. Arranges the next seek to start earlier — MPEG-TS / PS seek
  // by dts, which lies before a keyframe's pts when frames are reordered: by dts from now on;
  // otherwise from the keyframe before — and returns true; false when there is no earlier place.
  auto seek_earlier_if_landed_late = [&]() {
    if (last_frame >= seek_frame) return false;
    if (s.can_seek_by_dts(seek_frame)) {
      s.seek_by_dts = true;
    } else {
      if (seek_frame == 0) return false;
      seek_frame = s.keyframe_at_or_before(seek_frame - 1);
    }
    need_seek = true;
    return true;
  };
  while (next < frames) {
    if (need_seek) {
      // Every seek moves forward or back to an earlier keyframe, so this bound is never reached by a
      // file whose index is true; a damaged one could otherwise keep the loop going.
      TT_CHECK_HINT(s.seek_count < max_seeks, ErrorCode::kDecode, av::kDecodeHint, info.path, ": seeking for frame ",
                    indices[next], " did not converge after ", s.seek_count, " seeks (damaged index or timestamps?)");
      s.seek_to_frame(seek_frame);
      check_landing = s.index.check_seeks && !by_count;
      need_seek = false;
      draining = false;
      last_frame = -1;
      outputs = 0;
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
          if (check_landing && s.packet->pts != AV_NOPTS_VALUE) {
            // FFmpeg's generic index can send a seek into the middle of a frame (a raw MJPEG
            // stream: the read chunk's position), whose packet then mixes two frames and decodes to
            // garbage without an error; Ogg stamps a variable-rate Theora stream's packets after a
            // seek otherwise than when read from the start. Not a packet indexed for that time:
            // this file is decoded from the start from now on, frames counted out of the decoder
            // as the CLI counts them. (The first stamped packet: Ogg stamps a page's last one.)
            check_landing = false;
            const int64_t landed = s.frame_of_pts(s.packet->pts);
            if (landed < 0 || s.packet->size != s.index.packet_size[static_cast<size_t>(landed)]) {
              av_packet_unref(s.packet.get());
              s.warn_once(s.warned_seek, "seeks land on other packets than the index names (a raw stream or Ogg?); "
                                         "decoding from the start");
              s.index.count_outputs = true;
              s.info.decodes_from_start = "seeks land on other packets than the index names";
              if (s.options.notes) s.options.notes->set_decodes_from_start(s.info.path, s.info.decodes_from_start);
              return s.decode_frames(indices);
            }
          }
          if (skip_unneeded) {
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
        if (next < frames && seek_earlier_if_landed_late()) {
          restart = true;
          break;
        }
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
      const int64_t found =
          by_count ? seek_frame + outputs++ : s.frame_of_pts(s.frame->best_effort_timestamp);
      const bool corrupt = (s.frame->flags & AV_FRAME_FLAG_CORRUPT) != 0 || s.frame->decode_error_flags != 0;
      if (found >= 0 && found >= indices[next]) {
        if (found > indices[next]) {
          // The wanted frame was skipped: right after a seek the demuxer landed too late (start
          // again from earlier); otherwise the decoder dropped it.
          TT_CHECK_HINT(seek_earlier_if_landed_late(), ErrorCode::kDecode, av::kDecodeHint, info.path,
                        ": frame ", indices[next], " (t=", s.index.seconds(indices[next]),
                        " s) was not produced by the decoder (damaged data?)");
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
      if (!by_count && last_frame >= 0 && target_key > last_frame + 1 && target_key - last_frame - 1 >= reseek_gap &&
          target_key > seek_frame) {
        seek_frame = target_key;
        need_seek = true;
        break;
      }
    }
    if (draining && !need_seek && next < frames && !seek_earlier_if_landed_late()) {
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

}  // namespace tt
