// TV-L1 optical flow on the GPU: the scheme of pipeline/optical_flow_tvl1.cpp, kernel for kernel
// the arithmetic of its tensor-op reference (forward differences zero at the last column and row,
// the divergence their negative adjoint, the warp bilinear with coordinates clamped to the image,
// the warped frame's central gradient with edge values repeated), so that the two agree to fp32
// rounding. One thread per pixel; the dual step reads the neighbours the primal step wrote, so the
// two are separate launches. The pyramid (area shrink, flow upsampling) stays on tensor ops: it
// runs once per level.
#include "cuda/tvl1.cuh"

namespace tt::kernels {
namespace {

constexpr int kThreads = 256;

int64_t ceil_div(int64_t a, int64_t b) {
  return (a + b - 1) / b;
}

// Scratch planes, each (b, h, w) inside a (b, 4, h, w) buffer.
enum Plane { kWarped = 0, kGradX = 1, kGradY = 2, kRho = 3 };

// scratch[kWarped] <- i1 sampled at p + u(p), bilinear, the point clamped to the image.
__global__ void warp_kernel(const float* __restrict__ i1, const float* __restrict__ u, float* __restrict__ scratch,
                            int64_t b, int64_t h, int64_t w) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t plane = h * w;
  if (i >= b * plane) return;
  const int64_t n = i / plane, at = i % plane, y = at / w, x = at % w;
  const float* flow = u + n * 2 * plane;
  const float fx = fminf(fmaxf(static_cast<float>(x) + flow[at], 0.0f), static_cast<float>(w - 1));
  const float fy = fminf(fmaxf(static_cast<float>(y) + flow[plane + at], 0.0f), static_cast<float>(h - 1));
  const int64_t x0 = static_cast<int64_t>(floorf(fx)), y0 = static_cast<int64_t>(floorf(fy));
  const int64_t x1 = x0 + 1 < w ? x0 + 1 : x0, y1 = y0 + 1 < h ? y0 + 1 : y0;
  const float ax = fx - static_cast<float>(x0), ay = fy - static_cast<float>(y0);
  const float* image = i1 + n * plane;
  const float top = image[y0 * w + x0] * (1.0f - ax) + image[y0 * w + x1] * ax;
  const float bottom = image[y1 * w + x0] * (1.0f - ax) + image[y1 * w + x1] * ax;
  scratch[(n * 4 + kWarped) * plane + at] = top * (1.0f - ay) + bottom * ay;
}

// The warped frame's central gradient (edges repeated) and the residual linearised at this warp's
// flow: rho_c = warped - i0 - gx ux - gy uy.
__global__ void linearise_kernel(const float* __restrict__ i0, const float* __restrict__ u,
                                 float* __restrict__ scratch, int64_t b, int64_t h, int64_t w) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t plane = h * w;
  if (i >= b * plane) return;
  const int64_t n = i / plane, at = i % plane, y = at / w, x = at % w;
  const float* warped = scratch + (n * 4 + kWarped) * plane;
  const int64_t left = x > 0 ? x - 1 : 0, right = x + 1 < w ? x + 1 : x;
  const int64_t up = y > 0 ? y - 1 : 0, down = y + 1 < h ? y + 1 : y;
  const float gx = (warped[y * w + right] - warped[y * w + left]) * 0.5f;
  const float gy = (warped[down * w + x] - warped[up * w + x]) * 0.5f;
  const float* flow = u + n * 2 * plane;
  scratch[(n * 4 + kGradX) * plane + at] = gx;
  scratch[(n * 4 + kGradY) * plane + at] = gy;
  scratch[(n * 4 + kRho) * plane + at] = warped[at] - i0[n * plane + at] - gx * flow[at] - gy * flow[plane + at];
}

// v: the pointwise minimiser of the linearised L1 data term plus the coupling; then
// u = v + theta div p for each component.
__global__ void primal_kernel(float* __restrict__ u, const float* __restrict__ p, const float* __restrict__ scratch,
                              int64_t b, int64_t h, int64_t w, float lt, float theta) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t plane = h * w;
  if (i >= b * plane) return;
  const int64_t n = i / plane, at = i % plane, y = at / w, x = at % w;
  const float gx = scratch[(n * 4 + kGradX) * plane + at];
  const float gy = scratch[(n * 4 + kGradY) * plane + at];
  float* flow = u + n * 2 * plane;
  const float ux = flow[at], uy = flow[plane + at];
  const float grad_sq = fmaxf(gx * gx + gy * gy, 1e-12f);
  const float rho = scratch[(n * 4 + kRho) * plane + at] + gx * ux + gy * uy;
  const float shift = rho < -lt * grad_sq ? lt : (rho > lt * grad_sq ? -lt : -rho / grad_sq);
  const float* duals = p + n * 4 * plane;
  float div[2];
  for (int c = 0; c < 2; ++c) {
    const float* px = duals + (2 * c) * plane;
    const float* py = duals + (2 * c + 1) * plane;
    div[c] = px[at] - (x > 0 ? px[at - 1] : 0.0f) + py[at] - (y > 0 ? py[at - w] : 0.0f);
  }
  flow[at] = ux + shift * gx + theta * div[0];
  flow[plane + at] = uy + shift * gy + theta * div[1];
}

// p <- (p + step grad u) / (1 + step |grad u|), forward differences zero at the last column / row.
__global__ void dual_kernel(const float* __restrict__ u, float* __restrict__ p, int64_t b, int64_t h, int64_t w,
                            float step) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * kThreads + threadIdx.x;
  const int64_t plane = h * w;
  if (i >= b * plane) return;
  const int64_t n = i / plane, at = i % plane, y = at / w, x = at % w;
  for (int c = 0; c < 2; ++c) {
    const float* f = u + (n * 2 + c) * plane;
    const float dx = x + 1 < w ? f[at + 1] - f[at] : 0.0f;
    const float dy = y + 1 < h ? f[at + w] - f[at] : 0.0f;
    const float norm = 1.0f + step * sqrtf(dx * dx + dy * dy);
    float* px = p + (n * 4 + 2 * c) * plane;
    float* py = p + (n * 4 + 2 * c + 1) * plane;
    px[at] = (px[at] + step * dx) / norm;
    py[at] = (py[at] + step * dy) / norm;
  }
}

}  // namespace

cudaError_t tvl1_refine(const float* i0, const float* i1, float* u, float* p, float* scratch, int64_t b, int64_t h,
                        int64_t w, const Tvl1Params& params, cudaStream_t stream) {
  const int64_t pixels = b * h * w;
  if (pixels == 0) return cudaSuccess;
  const auto blocks = static_cast<unsigned>(ceil_div(pixels, kThreads));
  const float lt = params.lambda * params.theta, step = params.tau / params.theta;
  for (int64_t warp = 0; warp < params.warps; ++warp) {
    warp_kernel<<<blocks, kThreads, 0, stream>>>(i1, u, scratch, b, h, w);
    linearise_kernel<<<blocks, kThreads, 0, stream>>>(i0, u, scratch, b, h, w);
    for (int64_t it = 0; it < params.iterations; ++it) {
      primal_kernel<<<blocks, kThreads, 0, stream>>>(u, p, scratch, b, h, w, lt, params.theta);
      dual_kernel<<<blocks, kThreads, 0, stream>>>(u, p, b, h, w, step);
    }
    const cudaError_t status = cudaGetLastError();
    if (status != cudaSuccess) return status;
  }
  return cudaSuccess;
}

}  // namespace tt::kernels
