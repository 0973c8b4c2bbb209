// Fuzz target (structured): pixel conversion of decoded planes (pipeline/video_reader.h:
// yuv420_to_rgb_swscale, yuv_format, rotate_frames; cuda/ops.h: yuv420_to_rgb on the CPU) on
// planes as the reader produces them: (T, H, W) luma and (T, ceil(H/2), ceil(W/2), 2) chroma,
// uint8 for 8-bit, uint16 with the value in the high 10 bits for 10-bit, any size from 1x1 up to
// 64x64 (odd sizes included), any matrix and range, values from the input bytes.
#include <torch/torch.h>

#include <cstring>
#include <string>

#include "cuda/ops.h"
#include "pipeline/video_reader.h"
#include "test/fuzz/fuzz_util.h"

namespace {

// Fills `tensor` (contiguous) with the remaining input bytes, repeated; 10-bit values are shifted
// into the high bits as in P010 (the low 6 bits stay 0).
void fill(torch::Tensor& tensor, tt::fuzz::ByteReader& in, bool ten_bit) {
  const int64_t count = tensor.numel();
  if (in.left() == 0) return;  // zeros
  const uint8_t* bytes = in.rest();
  const size_t left = in.left();
  if (ten_bit) {
    auto* out = reinterpret_cast<uint16_t*>(tensor.data_ptr());
    for (int64_t i = 0; i < count; ++i) {
      const uint16_t value = static_cast<uint16_t>(bytes[(2 * i) % left] << 8 | bytes[(2 * i + 1) % left]);
      out[i] = static_cast<uint16_t>((value & 0x3FF) << 6);
    }
  } else {
    auto* out = tensor.data_ptr<uint8_t>();
    for (int64_t i = 0; i < count; ++i) out[i] = bytes[i % left];
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tt::fuzz::quiet_logs();
  tt::fuzz::ByteReader in(data, size);
  const int64_t count = in.range(0, 2);
  // Up to 200: libswscale's SIMD overran tightly packed planes only at some sizes past 64 (170x136).
  const int64_t height = in.range(1, 200);
  const int64_t width = in.range(1, 200);
  const bool ten_bit = in.flag();
  const int rotations[] = {0, 90, 180, 270, -90, 360, 450};
  const int rotation = rotations[in.range(0, 6)];
  tt::DecodedFrames frames;
  frames.bit_depth = ten_bit ? 10 : 8;
  frames.matrix = static_cast<tt::VideoMatrix>(in.range(0, 3));
  frames.full_range = in.flag();
  const torch::Dtype dtype = ten_bit ? torch::kUInt16 : torch::kUInt8;
  frames.y = torch::empty({count, height, width}, dtype);                          // (T, H, W)
  frames.uv = torch::empty({count, (height + 1) / 2, (width + 1) / 2, 2}, dtype);  // (T, H/2, W/2, 2)
  fill(frames.y, in, ten_bit);
  fill(frames.uv, in, ten_bit);
  try {
    torch::Tensor swscale = tt::yuv420_to_rgb_swscale(frames);  // (T, H, W, 3) uint8
    torch::Tensor kernel = tt::yuv420_to_rgb(frames.y, frames.uv, tt::yuv_format(frames));
    if (swscale.sizes() != kernel.sizes()) tt::fuzz::property_failed("the two converters disagree on the shape");
    torch::Tensor turned = tt::rotate_frames(swscale, rotation);
    const bool swap = ((rotation / 90) % 2) != 0;
    if (turned.size(1) != (swap ? width : height) || turned.size(2) != (swap ? height : width))
      tt::fuzz::property_failed("rotate_frames gave the wrong size");
  } catch (const tt::Error& error) {
    tt::fuzz::rejected(error);
  }
  return 0;
}
