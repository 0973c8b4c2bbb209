// YUV 4:2:0 (NV12 / P010) -> RGB24 on the GPU: one thread per 2x2 luma quad, which shares one chroma
// column.
//
// Chroma upsampling follows what the ffmpeg CLI does (its rgb24 output is the reference this project
// is held to), and that depends on the input's bit depth because libswscale takes different paths:
// - 8-bit 4:2:0 goes through swscale's unscaled yuv2rgb converter, which replicates chroma 2x2. Measured
//   (mean / p99 / max |err|, 0-255, this math in float32, round half up):
//     nasa_13013.mp4 stream 3 (480x270, BT.709 limited), reference frames 0, 9, 389:
//       replicate  0.713/2/3, 0.715/2/3, 0.913/2/3      bilinear-left  0.925/7/69, 0.914/7/65, 1.143/6/66
//     testsrc2 320x240 x264, ffmpeg -vf scale=in_color_matrix=bt601:in_range=tv,format=rgb24:
//       replicate  0.64/2/3 (vertical cubic 1.42/23/77, bilinear-left 2.9-3.2/64-66/242-253)
//     same, yuvj420p with in_range=pc: replicate  0.23/1/2
//   Odd widths take the same path (321x180: 0.55/2/3).
// - 10-bit (P010) has no unscaled converter: swscale's scaled path upsamples chroma vertically with
//   its bicubic filter (B = 0, C = 0.6, i.e. Keys a = -0.6; chroma rows centred between luma rows)
//   and horizontally by pairs. On testsrc2 320x240 yuv420p10le, BT.709 limited, against the CLI:
//   replicate 1.25/20/82, vertical bilinear 0.83/9/34, vertical cubic (this kernel) 0.63/3/9.
// What remains is a bias: ffmpeg's values sit 0.7-1.2 lower on average per channel (nasa frame 389);
// we keep round-to-nearest of the exact formula rather than imitate swscale's fixed-point arithmetic.
// Odd HEIGHTS (not producible by H.264/HEVC 4:2:0, whose cropping works in chroma rows) take
// swscale's scaled path at a chroma ratio that is not 2, which neither method matches (321x181
// BT.709: replicate 2.70/62/255, vertical cubic 2.43/57/255).
#include "cuda/colour.cuh"

namespace tt::kernels {

// Sample value at byte offset `offset` of `base`, shifted down to bit_depth bits.
static __device__ __forceinline__ float colour_load(const uint8_t* base, int64_t offset, bool ten_bit) {
  if (ten_bit) return static_cast<float>(*reinterpret_cast<const uint16_t*>(base + offset) >> 6);
  return static_cast<float>(base[offset]);
}

// Explicit _rn intrinsics keep nvcc from contracting into FMAs, so the result rounds like the CPU reference.
static __device__ __forceinline__ void colour_store(uint8_t* out, float y, float cb, float cr,
                                                    const YuvCoefficients& k) {
  float v[3];
  v[0] = __fadd_rn(y, __fmul_rn(k.r_cr, cr));
  v[1] = __fsub_rn(__fsub_rn(y, __fmul_rn(k.g_cb, cb)), __fmul_rn(k.g_cr, cr));
  v[2] = __fadd_rn(y, __fmul_rn(k.b_cb, cb));
  for (int i = 0; i < 3; ++i) {
    float r = floorf(__fadd_rn(v[i], 0.5f));
    out[i] = static_cast<uint8_t>(fminf(fmaxf(r, 0.0f), 255.0f));
  }
}

static __global__ void yuv420_to_rgb_kernel(uint8_t* __restrict__ rgb, const uint8_t* __restrict__ y,
                                            const uint8_t* __restrict__ uv, int64_t frames, int height,
                                            int width, int64_t y_pitch, int64_t uv_pitch,
                                            int64_t y_frame_stride, int64_t uv_frame_stride,
                                            YuvCoefficients k, bool ten_bit) {
  const int cx = blockIdx.x * blockDim.x + threadIdx.x;  // chroma column = luma quad column
  const int cy = blockIdx.y * blockDim.y + threadIdx.y;  // chroma row
  const int chroma_w = (width + 1) / 2;
  const int chroma_h = (height + 1) / 2;
  if (cx >= chroma_w || cy >= chroma_h) return;
  const int sample_bytes = ten_bit ? 2 : 1;
  for (int64_t t = blockIdx.z; t < frames; t += gridDim.z) {
    const uint8_t* uv_frame = uv + t * uv_frame_stride;
    const int64_t column = static_cast<int64_t>(cx) * 2 * sample_bytes;
    // Normalised chroma pair of chroma row r (clamped to the frame).
    auto chroma_at = [&](int r, float* cb, float* cr) {
      r = min(max(r, 0), chroma_h - 1);
      const int64_t offset = r * uv_pitch + column;
      *cb = __fmul_rn(__fsub_rn(colour_load(uv_frame, offset, ten_bit), k.c_offset), k.c_gain);
      *cr = __fmul_rn(__fsub_rn(colour_load(uv_frame, offset + sample_bytes, ten_bit), k.c_offset), k.c_gain);
    };
    float cb[2], cr[2];  // for luma rows 2cy and 2cy + 1
    if (!ten_bit) {
      chroma_at(cy, &cb[0], &cr[0]);
      cb[1] = cb[0];
      cr[1] = cr[0];
    } else {
      // Rows cy-2 .. cy+2: even luma row uses the first four, odd the last four (see colour.h).
      float b[5], r[5];
      for (int j = 0; j < 5; ++j) chroma_at(cy - 2 + j, &b[j], &r[j]);
      cb[0] = __fmul_rn(chroma_cubic_tap(false, 0), b[0]);
      cr[0] = __fmul_rn(chroma_cubic_tap(false, 0), r[0]);
      cb[1] = __fmul_rn(chroma_cubic_tap(true, 0), b[1]);
      cr[1] = __fmul_rn(chroma_cubic_tap(true, 0), r[1]);
      for (int j = 1; j < 4; ++j) {
        cb[0] = __fadd_rn(cb[0], __fmul_rn(chroma_cubic_tap(false, j), b[j]));
        cr[0] = __fadd_rn(cr[0], __fmul_rn(chroma_cubic_tap(false, j), r[j]));
        cb[1] = __fadd_rn(cb[1], __fmul_rn(chroma_cubic_tap(true, j), b[j + 1]));
        cr[1] = __fadd_rn(cr[1], __fmul_rn(chroma_cubic_tap(true, j), r[j + 1]));
      }
    }
    const uint8_t* y_frame = y + t * y_frame_stride;
    uint8_t* out_frame = rgb + t * static_cast<int64_t>(height) * width * 3;
    for (int dy = 0; dy < 2; ++dy) {
      const int row = 2 * cy + dy;
      if (row >= height) break;
      for (int dx = 0; dx < 2; ++dx) {
        const int col = 2 * cx + dx;
        if (col >= width) break;
        const float luma =
            colour_load(y_frame, row * y_pitch + static_cast<int64_t>(col) * sample_bytes, ten_bit);
        const float yv = __fmul_rn(__fsub_rn(luma, k.y_offset), k.y_gain);
        colour_store(out_frame + (static_cast<int64_t>(row) * width + col) * 3, yv, cb[dy], cr[dy], k);
      }
    }
  }
}

cudaError_t yuv420_to_rgb(uint8_t* rgb, const void* y, const void* uv, int64_t frames, int height, int width,
                          int64_t y_pitch_bytes, int64_t uv_pitch_bytes, int64_t y_frame_stride_bytes,
                          int64_t uv_frame_stride_bytes, YuvFormat format, cudaStream_t stream) {
  if (frames == 0 || height == 0 || width == 0) return cudaSuccess;
  if (format.bit_depth != 8 && format.bit_depth != 10) return cudaErrorInvalidValue;
  const dim3 threads(32, 8);
  const unsigned chroma_w = static_cast<unsigned>((width + 1) / 2);
  const unsigned chroma_h = static_cast<unsigned>((height + 1) / 2);
  const int64_t z = frames < 65535 ? frames : 65535;
  const dim3 blocks((chroma_w + threads.x - 1) / threads.x, (chroma_h + threads.y - 1) / threads.y,
                    static_cast<unsigned>(z));
  yuv420_to_rgb_kernel<<<blocks, threads, 0, stream>>>(
      rgb, static_cast<const uint8_t*>(y), static_cast<const uint8_t*>(uv), frames, height, width,
      y_pitch_bytes, uv_pitch_bytes, y_frame_stride_bytes, uv_frame_stride_bytes, yuv_coefficients(format),
      format.bit_depth == 10);
  return cudaGetLastError();
}

}  // namespace tt::kernels
