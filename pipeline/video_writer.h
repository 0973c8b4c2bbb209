// Writing RGB frames out: an MP4 file through libavcodec/libavformat (sampled videos, `teletron
// sample`) and an animated GIF in memory (TensorBoard image summaries of validation videos).
//
// MP4: H.264 from libx264 where this FFmpeg build has it (Debian's does), else FFmpeg's own MPEG-4
// Part 2 encoder "mpeg4" (the GPU machine's minimal FFmpeg has only mpeg4/mjpeg/png/gif); the
// choice is logged. Frames go RGB -> yuv420p with libswscale, BT.709 limited range, and the stream
// is tagged so (the project's VideoReader and players convert back with the same matrix). yuv420p
// needs even sizes: an odd height or width gets one more row or column, a copy of the last. The
// file is written under PATH.tmp and renamed, so a kill leaves no half file under PATH.
//
// GIF: one palette for every frame, 6 x 7 x 6 levels of R, G, B (252 colours) with 4 x 4 ordered
// (Bayer) dithering: no palette search, the same colours for every video, pure primaries exact.
// FFmpeg's gif encoder and muxer (infinite loop, frame delays in 1/100 s from the fps) write into
// memory through a custom AVIOContext. Any size works, odd ones included.
//
// Frames are (T, H, W, 3) uint8 RGB on any device (copied to the CPU). Errors: a wrong shape or
// dtype is kInternal (a caller's bug); no usable encoder is kConfig; a file that cannot be written
// is kIo; an FFmpeg encoder failure is kInternal with FFmpeg's reason.
#pragma once

#include <torch/types.h>

#include <cstdint>
#include <string>

namespace tt {

class TensorBoardWriter;

struct Mp4Options {
  /// "" picks libx264 when this FFmpeg has it, else mpeg4; a name forces that encoder.
  std::string encoder;
  /// libx264's constant rate factor (0 lossless .. 51; 18 is visually near-lossless).
  int crf = 18;
  /// mpeg4's fixed quantiser (2 best .. 31).
  int mpeg4_qscale = 2;
};

/// The encoder write_mp4 picks by default in this FFmpeg build: "libx264", "mpeg4", or "" for none.
std::string default_mp4_encoder();

/// Writes `frames` (T, H, W, 3) uint8 RGB at `fps` frames per second to `path` as MP4 and returns
/// the encoder's name.
std::string write_mp4(const std::string& path, const torch::Tensor& frames, double fps,
                      const Mp4Options& options = {});

/// `frames` (T, H, W, 3) uint8 RGB at `fps` as the bytes of an animated GIF (looping forever).
std::string encode_gif(const torch::Tensor& frames, double fps);

/// encode_gif, added to `writer` as an image summary (an animated GIF TensorBoard shows) at `step`.
void add_gif(TensorBoardWriter& writer, const std::string& tag, int64_t step, const torch::Tensor& frames,
             double fps, double wall_time);

}  // namespace tt
