// CPU conversions of decoded frames: NV12/P010-layout planes → RGB through libswscale (the
// reference the CUDA colour kernel will be checked against until tt::yuv420_to_rgb_reference in
// cuda/ops.h takes over), and display rotation. Declared in pipeline/video_reader.h.
#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include <cstring>
#include <vector>

#include "core/errors.h"
#include "pipeline/av_handles.h"
#include "pipeline/video_reader.h"

namespace tt {
namespace {

int sws_colorspace(VideoMatrix matrix) {
  switch (matrix) {
    case VideoMatrix::kBt709: return SWS_CS_ITU709;
    case VideoMatrix::kBt2020Ncl: return SWS_CS_BT2020;
    case VideoMatrix::kBt2020Cl: {
      static bool warned = false;
      if (!warned) spdlog::warn("BT.2020 constant-luminance video: libswscale converts it as BT.2020 NCL");
      warned = true;
      return SWS_CS_BT2020;
    }
    case VideoMatrix::kBt601: return SWS_CS_ITU601;
  }
  return SWS_CS_ITU601;
}

}  // namespace

torch::Tensor yuv420_to_rgb_swscale(const DecodedFrames& frames) {
  TT_ASSERT(frames.y.dim() == 3 && frames.uv.dim() == 4, "expected y (T, H, W) and uv (T, H/2, W/2, 2)");
  const int64_t count = frames.y.size(0);
  const int height = static_cast<int>(frames.y.size(1));
  const int width = static_cast<int>(frames.y.size(2));
  const int64_t chroma_h = frames.uv.size(1);
  const int64_t chroma_w = frames.uv.size(2);
  torch::Tensor rgb = torch::empty({count, height, width, 3}, torch::kUInt8);  // (T, H, W, 3) uint8
  if (count == 0) return rgb;
  const bool ten_bit = frames.bit_depth > 8;
  const AVPixelFormat source_format = ten_bit ? AV_PIX_FMT_YUV420P10LE : AV_PIX_FMT_YUV420P;
  // Bicubic is the ffmpeg CLI's default for its auto-inserted scaler; same flags, same result.
  av::SwsContextPtr context(sws_getContext(width, height, source_format, width, height, AV_PIX_FMT_RGB24,
                                           SWS_BICUBIC, nullptr, nullptr, nullptr));
  TT_CHECK(context != nullptr, ErrorCode::kInternal, "libswscale cannot convert 4:2:0 to rgb24");
  // Never rely on libswscale's defaults (BT.601 limited): matrix and range come from the stream.
  const int* coefficients = sws_getCoefficients(sws_colorspace(frames.matrix));
  const int rc = sws_setColorspaceDetails(context.get(), coefficients, frames.full_range ? 1 : 0,
                                          sws_getCoefficients(SWS_CS_DEFAULT), 1, 0, 1 << 16, 1 << 16);
  TT_CHECK(rc >= 0, ErrorCode::kInternal, "libswscale refused the colour details (matrix ",
           video_matrix_name(frames.matrix), ")");

  // Source planes and the RGB picture are frames from av_frame_get_buffer, as in the ffmpeg CLI:
  // its strides are aligned (so libswscale takes the same SIMD path and the output is bit-identical
  // to the CLI's) and its buffers padded past the last row, which that SIMD code reads and writes
  // (on tightly packed planes it overran the heap on some sizes and read garbage on others).
  const auto frame_of = [](AVPixelFormat format, int w, int h) {
    av::FramePtr frame(av::check_alloc(av_frame_alloc(), "a frame"));
    frame->format = format;
    frame->width = w;
    frame->height = h;
    AV_CHECK(av_frame_get_buffer(frame.get(), 0), "libswscale conversion", "allocating a frame");
    return frame;
  };
  const av::FramePtr planar = frame_of(source_format, width, height);
  const av::FramePtr packed = frame_of(AV_PIX_FMT_RGB24, width, height);
  const torch::Tensor y_all = frames.y.contiguous();
  const torch::Tensor uv_all = frames.uv.contiguous();
  for (int64_t t = 0; t < count; ++t) {
    uint8_t* luma = planar->data[0];
    uint8_t* u = planar->data[1];
    uint8_t* v = planar->data[2];
    const int64_t luma_stride = planar->linesize[0];
    const int64_t u_stride = planar->linesize[1];
    const int64_t v_stride = planar->linesize[2];
    if (ten_bit) {
      // P010 → yuv420p10le: the value sits in the high 10 bits.
      const auto* y_src = reinterpret_cast<const uint16_t*>(y_all[t].data_ptr());
      const auto* uv_src = reinterpret_cast<const uint16_t*>(uv_all[t].data_ptr());
      for (int64_t row = 0; row < height; ++row) {
        auto* y_dst = reinterpret_cast<uint16_t*>(luma + row * luma_stride);
        for (int64_t col = 0; col < width; ++col) y_dst[col] = static_cast<uint16_t>(y_src[row * width + col] >> 6);
      }
      for (int64_t row = 0; row < chroma_h; ++row) {
        auto* u_dst = reinterpret_cast<uint16_t*>(u + row * u_stride);
        auto* v_dst = reinterpret_cast<uint16_t*>(v + row * v_stride);
        const uint16_t* src = uv_src + row * chroma_w * 2;
        for (int64_t col = 0; col < chroma_w; ++col) {
          u_dst[col] = static_cast<uint16_t>(src[2 * col] >> 6);
          v_dst[col] = static_cast<uint16_t>(src[2 * col + 1] >> 6);
        }
      }
    } else {
      const uint8_t* y_src = y_all[t].data_ptr<uint8_t>();
      const uint8_t* uv_src = uv_all[t].data_ptr<uint8_t>();
      for (int64_t row = 0; row < height; ++row)
        std::memcpy(luma + row * luma_stride, y_src + row * width, static_cast<size_t>(width));
      for (int64_t row = 0; row < chroma_h; ++row) {
        uint8_t* u_dst = u + row * u_stride;
        uint8_t* v_dst = v + row * v_stride;
        const uint8_t* src = uv_src + row * chroma_w * 2;
        for (int64_t col = 0; col < chroma_w; ++col) {
          u_dst[col] = src[2 * col];
          v_dst[col] = src[2 * col + 1];
        }
      }
    }
    const int rows = sws_scale(context.get(), planar->data, planar->linesize, 0, height, packed->data,
                               packed->linesize);
    TT_CHECK(rows == height, ErrorCode::kInternal, "libswscale converted ", rows, " of ", height, " rows");
    uint8_t* out = rgb[t].data_ptr<uint8_t>();
    for (int64_t row = 0; row < height; ++row)
      std::memcpy(out + row * width * 3, packed->data[0] + row * packed->linesize[0], static_cast<size_t>(width) * 3);
  }
  return rgb;
}

YuvFormat yuv_format(const DecodedFrames& frames) {
  YuvFormat format;
  format.matrix = YuvMatrix::kBt601;
  if (frames.matrix == VideoMatrix::kBt709) format.matrix = YuvMatrix::kBt709;
  if (frames.matrix == VideoMatrix::kBt2020Ncl || frames.matrix == VideoMatrix::kBt2020Cl)
    format.matrix = YuvMatrix::kBt2020;
  format.full_range = frames.full_range;
  format.bit_depth = frames.bit_depth;
  return format;
}

// torch::rot90 turns from dim 1 towards dim 2 (counter-clockwise on screen) for k > 0, so a
// clockwise turn of q quarters is k = -q.
torch::Tensor rotate_frames(const torch::Tensor& frames, int rotation) {
  TT_ASSERT(rotation % 90 == 0, "rotation must be a multiple of 90, got ", rotation);
  const int64_t quarters = ((rotation / 90) % 4 + 4) % 4;
  if (quarters == 0) return frames;
  return torch::rot90(frames, -quarters, {1, 2}).contiguous();
}

}  // namespace tt
