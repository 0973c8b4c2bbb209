// Colour description of a decoded YUV 4:2:0 stream (matrix, range, bit depth) and the conversion
// coefficients derived from it; shared by the decoder, the CUDA colour kernel and its CPU reference.
#pragma once

namespace tt {

enum class YuvMatrix { kBt601, kBt709, kBt2020 };

struct YuvFormat {
  YuvMatrix matrix = YuvMatrix::kBt601;  /// untagged streams are BT.601
  bool full_range = false;  /// false: limited ("tv", Y 16-235 at 8 bit); true: full ("pc", "jpeg")
  int bit_depth = 8;        /// 8 (NV12, uint8) or 10 (P010, uint16 with the value in the high bits)
};

/// Chroma upsampling, chosen to match the ffmpeg CLI's rgb24 output (the reference this project is
/// held to), which takes a different libswscale path per bit depth (details in colour.cu):
/// - 8-bit: chroma replicated 2x2 (swscale's unscaled yuv2rgb converter);
/// - 10-bit: replicated horizontally, and vertically a 4-tap cubic (Keys, a = -0.6, swscale's
///   SWS_BICUBIC) with chroma rows sited between luma rows (MPEG-2 / H.264 default siting): luma
///   row 2k sits at chroma position k - 1/4, row 2k + 1 at k + 1/4; edge rows repeat.
/// Tap j (0..3) of luma row 2k on chroma rows k-2 .. k+1; row 2k + 1 uses the mirrored taps on
/// rows k-1 .. k+2. Keys' kernel at distances 1.75, 0.75, 0.25, 1.25 (constexpr: the CUDA kernel
/// uses it too).
constexpr float chroma_cubic_tap(bool odd_row, int j) {
  constexpr float taps[4] = {-0.028125f, 0.240625f, 0.871875f, -0.084375f};
  return taps[odd_row ? 3 - j : j];
}
inline bool chroma_vertical_cubic(const YuvFormat& format) { return format.bit_depth == 10; }

/// rgb (0-255 scale) = y' + matrix * (cb', cr'), with y' = (Y - y_offset) * y_gain and
/// c' = (C - c_offset) * c_gain on the sample values (already shifted down to bit_depth bits).
struct YuvCoefficients {
  float y_offset, y_gain, c_offset, c_gain;
  float r_cr, g_cb, g_cr, b_cb;  // R = y + r_cr cr; G = y - g_cb cb - g_cr cr; B = y + b_cb cb
};

/// Coefficients of `format` (bit_depth must be 8 or 10). Gains are formed so that a 10-bit limited-range
/// input equal to an 8-bit one shifted left by 2 converts to bit-identical values.
inline YuvCoefficients yuv_coefficients(const YuvFormat& format) {
  double kr = 0.299, kb = 0.114;
  if (format.matrix == YuvMatrix::kBt709) {
    kr = 0.2126;
    kb = 0.0722;
  } else if (format.matrix == YuvMatrix::kBt2020) {
    kr = 0.2627;
    kb = 0.0593;
  }
  const double kg = 1.0 - kr - kb;
  const double scale = format.bit_depth == 10 ? 4.0 : 1.0;  // 2^(bit_depth - 8)
  YuvCoefficients c{};
  if (format.full_range) {
    const double max_value = format.bit_depth == 10 ? 1023.0 : 255.0;
    c.y_offset = 0.0f;
    c.y_gain = static_cast<float>(255.0 / max_value);
    c.c_offset = static_cast<float>(128.0 * scale);
    c.c_gain = c.y_gain;
  } else {
    c.y_offset = static_cast<float>(16.0 * scale);
    c.y_gain = static_cast<float>(255.0 / 219.0 / scale);
    c.c_offset = static_cast<float>(128.0 * scale);
    c.c_gain = static_cast<float>(255.0 / 224.0 / scale);
  }
  c.r_cr = static_cast<float>(2.0 * (1.0 - kr));
  c.g_cb = static_cast<float>(2.0 * kb * (1.0 - kb) / kg);
  c.g_cr = static_cast<float>(2.0 * kr * (1.0 - kr) / kg);
  c.b_cb = static_cast<float>(2.0 * (1.0 - kb));
  return c;
}

}  // namespace tt
