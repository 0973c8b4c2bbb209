// Fused video augmentation: one thread per output pixel reads its antialiased source window straight
// from the decoded uint8 RGB frame, then flips, jitters and normalises, writing bf16 or fp32 in the
// model's (3, T, H, W) layout. The resize filter reproduces torch's interpolate(bilinear,
// align_corners=False, antialias=True): a triangle whose support widens with the downscale factor
// (plain bilinear with edge clamping when enlarging), weights normalised per output pixel.
#include "cuda/augment.cuh"

namespace tt::kernels {
namespace {

// One axis of the resize: output pixel i of `out_size` samples input [first, first + count) with
// weights triangle((j + 0.5 - center) * inv_scale) / total, exactly as torch computes them.
struct AxisWindow {
  float center;
  float inv_scale;
  int64_t first;
  int64_t count;
  float total;
};

__host__ __device__ float triangle(float x) {
  x = fabsf(x);
  return x < 1.0f ? 1.0f - x : 0.0f;
}

__host__ __device__ AxisWindow axis_window(int64_t i, int64_t in_size, int64_t out_size) {
  AxisWindow w;
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  const float support = scale >= 1.0f ? scale : 1.0f;  // bilinear: interp_size 2, half of it times scale
  w.inv_scale = scale >= 1.0f ? 1.0f / scale : 1.0f;
  w.center = scale * (static_cast<float>(i) + 0.5f);
  int64_t lo = static_cast<int64_t>(w.center - support + 0.5f);  // truncation, as torch
  int64_t hi = static_cast<int64_t>(w.center + support + 0.5f);
  if (lo < 0) lo = 0;
  if (hi > in_size) hi = in_size;
  w.first = lo;
  w.count = hi - lo;
  w.total = 0.0f;
  for (int64_t j = 0; j < w.count; ++j)
    w.total += triangle((static_cast<float>(j + lo) - w.center + 0.5f) * w.inv_scale);
  return w;
}

__host__ __device__ float weight(const AxisWindow& w, int64_t j) {
  return triangle((static_cast<float>(j + w.first) - w.center + 0.5f) * w.inv_scale);
}

__host__ __device__ float clamp01(float x) {
  return fminf(fmaxf(x, 0.0f), 1.0f);
}

__host__ __device__ float grey_of(float r, float g, float b) {
  return 0.299f * r + 0.587f * g + 0.114f * b;
}

}  // namespace

static __global__ void augment_grey_sum_kernel(unsigned long long* __restrict__ grey_sum,
                                               const uint8_t* __restrict__ rgb, int64_t pixels) {
  unsigned long long local = 0;
  int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < pixels; p += stride) {
    const uint8_t* px = rgb + 3 * p;
    local += 299ull * px[0] + 587ull * px[1] + 114ull * px[2];
  }
  for (int offset = 16; offset > 0; offset /= 2) local += __shfl_down_sync(0xffffffffu, local, offset);
  if ((threadIdx.x & 31) == 0) atomicAdd(grey_sum, local);
}

// Output pixel i (of frames * out_h * out_w) of the clip; shared by the kernel and the host emulation.
static __host__ __device__ void augment_pixel(float* out_f32, __nv_bfloat16* out_bf16, const uint8_t* rgb,
                                              float mean, int64_t frames, int64_t in_h, int64_t in_w,
                                              int64_t out_h, int64_t out_w, const AugmentKernelArgs& args,
                                              int64_t i) {
  const int64_t plane = out_h * out_w;
  const int64_t total = frames * plane;
  const int64_t t = i / plane;
  const int64_t y = (i % plane) / out_w;
  const int64_t x = i % out_w;
  const int64_t ry = args.crop_y + y;
  const int64_t rx = args.crop_x + (args.flip ? out_w - 1 - x : x);
  const AxisWindow wy = axis_window(ry, in_h, args.resized_h);
  const AxisWindow wx = axis_window(rx, in_w, args.resized_w);

  float r = 0.0f, g = 0.0f, b = 0.0f;
  const uint8_t* frame = rgb + t * in_h * in_w * 3;
  for (int64_t j = 0; j < wy.count; ++j) {
    const float vy = weight(wy, j);
    if (vy == 0.0f) continue;
    const uint8_t* row = frame + (wy.first + j) * in_w * 3;
    float rr = 0.0f, rg = 0.0f, rb = 0.0f;
    for (int64_t k = 0; k < wx.count; ++k) {
      const float vx = weight(wx, k);
      const uint8_t* px = row + (wx.first + k) * 3;
      rr += vx * px[0];
      rg += vx * px[1];
      rb += vx * px[2];
    }
    r += vy * rr;
    g += vy * rg;
    b += vy * rb;
  }
  const float norm = 1.0f / (255.0f * wy.total * wx.total);
  r *= norm;
  g *= norm;
  b *= norm;

  // Jitter in the order and with the clamps of pipeline/augment.h.
  r = clamp01(r * args.brightness);
  g = clamp01(g * args.brightness);
  b = clamp01(b * args.brightness);
  const float contrast_ref = fminf(mean * args.brightness, 1.0f);
  const float keep = 1.0f - args.contrast;
  r = clamp01(args.contrast * r + keep * contrast_ref);
  g = clamp01(args.contrast * g + keep * contrast_ref);
  b = clamp01(args.contrast * b + keep * contrast_ref);
  const float grey = grey_of(r, g, b);
  const float fade = 1.0f - args.saturation;
  r = clamp01(args.saturation * r + fade * grey);
  g = clamp01(args.saturation * g + fade * grey);
  b = clamp01(args.saturation * b + fade * grey);
  if (args.hue) {
    const float* m = args.hue_matrix;
    const float hr = m[0] * r + m[1] * g + m[2] * b;
    const float hg = m[3] * r + m[4] * g + m[5] * b;
    const float hb = m[6] * r + m[7] * g + m[8] * b;
    r = clamp01(hr);
    g = clamp01(hg);
    b = clamp01(hb);
  }

  const int64_t at = t * plane + y * out_w + x;  // channel c lives at c * total + at
  if (out_f32 != nullptr) {
    out_f32[at] = 2.0f * r - 1.0f;
    out_f32[total + at] = 2.0f * g - 1.0f;
    out_f32[2 * total + at] = 2.0f * b - 1.0f;
  } else {
    out_bf16[at] = __float2bfloat16_rn(2.0f * r - 1.0f);
    out_bf16[total + at] = __float2bfloat16_rn(2.0f * g - 1.0f);
    out_bf16[2 * total + at] = __float2bfloat16_rn(2.0f * b - 1.0f);
  }
}

// grey_sum / (255000 * pixels): the clip's mean grey in [0, 1].
static __host__ __device__ float mean_grey(unsigned long long grey_sum, int64_t frames, int64_t in_h,
                                           int64_t in_w) {
  const double pixels = static_cast<double>(frames) * static_cast<double>(in_h) * static_cast<double>(in_w);
  return static_cast<float>(static_cast<double>(grey_sum) / (255000.0 * pixels));
}

static __global__ void augment_clip_kernel(float* __restrict__ out_f32, __nv_bfloat16* __restrict__ out_bf16,
                                           const uint8_t* __restrict__ rgb,
                                           const unsigned long long* __restrict__ grey_sum, int64_t frames,
                                           int64_t in_h, int64_t in_w, int64_t out_h, int64_t out_w,
                                           AugmentKernelArgs args) {
  const int64_t total = frames * out_h * out_w;
  const float mean = mean_grey(*grey_sum, frames, in_h, in_w);
  int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride)
    augment_pixel(out_f32, out_bf16, rgb, mean, frames, in_h, in_w, out_h, out_w, args, i);
}

cudaError_t augment_grey_sum(unsigned long long* grey_sum, const uint8_t* rgb, int64_t pixels,
                             cudaStream_t stream) {
  cudaError_t status = cudaMemsetAsync(grey_sum, 0, sizeof(unsigned long long), stream);
  if (status != cudaSuccess || pixels == 0) return status;
  const int threads = 256;  // a multiple of 32: every warp is full for the shuffle reduction
  int64_t blocks = (pixels + threads - 1) / threads;
  if (blocks > 1024) blocks = 1024;
  augment_grey_sum_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(grey_sum, rgb, pixels);
  return cudaGetLastError();
}

cudaError_t augment_clip(float* out_f32, __nv_bfloat16* out_bf16, const uint8_t* rgb,
                         const unsigned long long* grey_sum, int64_t frames, int64_t in_h, int64_t in_w,
                         int64_t out_h, int64_t out_w, const AugmentKernelArgs& args, cudaStream_t stream) {
  const int64_t total = frames * out_h * out_w;
  if (total == 0) return cudaSuccess;
  const int threads = 256;
  int64_t blocks = (total + threads - 1) / threads;
  if (blocks > 65535) blocks = 65535;
  augment_clip_kernel<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(
      out_f32, out_bf16, rgb, grey_sum, frames, in_h, in_w, out_h, out_w, args);
  return cudaGetLastError();
}

void augment_clip_host(float* out_f32, const uint8_t* rgb, int64_t frames, int64_t in_h, int64_t in_w,
                       int64_t out_h, int64_t out_w, const AugmentKernelArgs& args) {
  const int64_t pixels = frames * in_h * in_w;
  unsigned long long grey_sum = 0;
  for (int64_t p = 0; p < pixels; ++p)
    grey_sum += 299ull * rgb[3 * p] + 587ull * rgb[3 * p + 1] + 114ull * rgb[3 * p + 2];
  const float mean = pixels > 0 ? mean_grey(grey_sum, frames, in_h, in_w) : 0.0f;
  const int64_t total = frames * out_h * out_w;
  for (int64_t i = 0; i < total; ++i)
    augment_pixel(out_f32, nullptr, rgb, mean, frames, in_h, in_w, out_h, out_w, args, i);
}

}  // namespace tt::kernels
