// The only torch <-> kernel boundary: argument checks, current stream, output allocation, and the
// CPU references the [gpu] tests compare against.
#include "cuda/ops.h"

#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

#include "cuda/colour.cuh"
#include "cuda/flow_matching.cuh"
#include "cuda/keyed_random.cuh"
#include "cuda/spin.cuh"
#endif

#include <ATen/Parallel.h>

#include "cuda/keyed_random.h"

namespace tt {

bool kernels_built() {
#ifdef TELETRON_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::pair<torch::Tensor, torch::Tensor> flow_matching_mix_reference(const torch::Tensor& x0,
                                                                    const torch::Tensor& noise,
                                                                    const torch::Tensor& sigmas) {
  std::vector<int64_t> view(x0.dim(), 1);
  view[0] = x0.size(0);
  auto s = sigmas.view(view);
  return {(1 - s) * x0 + s * noise, noise - x0};
}

std::pair<torch::Tensor, torch::Tensor> flow_matching_mix(const torch::Tensor& x0, const torch::Tensor& noise,
                                                          const torch::Tensor& sigmas) {
  TORCH_CHECK(x0.sizes() == noise.sizes(), "flow_matching_mix: x0 ", x0.sizes(), " vs noise ", noise.sizes());
  TORCH_CHECK(sigmas.dim() == 1 && sigmas.size(0) == x0.size(0),
              "flow_matching_mix: sigmas must be (B), got ", sigmas.sizes());
  if (!x0.is_cuda()) return flow_matching_mix_reference(x0, noise, sigmas);
#ifdef TELETRON_WITH_CUDA
  TORCH_CHECK(x0.scalar_type() == torch::kFloat32 && noise.scalar_type() == torch::kFloat32 &&
                  sigmas.scalar_type() == torch::kFloat32,
              "flow_matching_mix: expected fp32 tensors");
  TORCH_CHECK(noise.device() == x0.device() && sigmas.device() == x0.device(),
              "flow_matching_mix: tensors on different devices");
  auto a = x0.contiguous();
  auto e = noise.contiguous();
  auto s = sigmas.contiguous();
  auto noisy = torch::empty_like(a);
  auto target = torch::empty_like(a);
  const int64_t total = a.numel();
  const int64_t per_sample = a.size(0) > 0 ? total / a.size(0) : 1;
  auto stream = c10::cuda::getCurrentCUDAStream(a.device().index());
  cudaError_t status = kernels::flow_matching_mix(noisy.data_ptr<float>(), target.data_ptr<float>(),
                                                  a.data_ptr<float>(), e.data_ptr<float>(),
                                                  s.data_ptr<float>(), total, per_sample, stream.stream());
  TORCH_CHECK(status == cudaSuccess, "flow_matching_mix kernel launch failed: ", cudaGetErrorString(status));
  return {noisy, target};
#else
  TORCH_CHECK(false, "flow_matching_mix: teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
}

// ---- keyed random numbers ----

namespace {

enum class KeyedKind { kNormal, kUniform };

torch::Tensor keyed_draw(const torch::Tensor& keys, at::IntArrayRef row_shape, uint64_t seed, uint32_t draw,
                         KeyedKind kind) {
  const char* name = kind == KeyedKind::kNormal ? "keyed_normal" : "keyed_uniform";
  TORCH_CHECK(keys.dim() == 1 && keys.scalar_type() == torch::kInt64, name, ": expected keys (B) int64, got ",
              keys.sizes(), " ", keys.scalar_type());
  std::vector<int64_t> shape = {keys.size(0)};
  int64_t per_row = 1;
  for (const int64_t size : row_shape) {
    TORCH_CHECK(size >= 0, name, ": negative size in ", row_shape);
    shape.push_back(size);
    per_row *= size;
  }
  // The element's block index is a 32-bit Philox counter word.
  TORCH_CHECK((per_row + 3) / 4 <= int64_t{1} << 32, name, ": ", per_row,
              " elements per row is more than 2^34");
  const torch::Tensor k = keys.contiguous();
  auto out = torch::empty(shape, k.options().dtype(torch::kFloat32));
  const int64_t batch = k.size(0);
  if (k.is_cuda()) {
#ifdef TELETRON_WITH_CUDA
    const c10::cuda::CUDAGuard guard(k.device());
    auto stream = c10::cuda::getCurrentCUDAStream(k.device().index());
    const cudaError_t status = kind == KeyedKind::kNormal
                                   ? kernels::keyed_normal(out.data_ptr<float>(), k.data_ptr<int64_t>(),
                                                           batch, per_row, seed, draw, stream.stream())
                                   : kernels::keyed_uniform(out.data_ptr<float>(), k.data_ptr<int64_t>(),
                                                            batch, per_row, seed, draw, stream.stream());
    TORCH_CHECK(status == cudaSuccess, name, " kernel launch failed: ", cudaGetErrorString(status));
    return out;
#else
    TORCH_CHECK(false, name, ": teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
  }
  TORCH_CHECK(k.device().is_cpu(), name, ": keys on ", k.device(), " (CPU or CUDA expected)");
  const int64_t* key = k.data_ptr<int64_t>();
  float* values = out.data_ptr<float>();
  const int64_t groups = (per_row + 3) / 4;
  at::parallel_for(0, batch * groups, 4096, [&](int64_t begin, int64_t end) {
    for (int64_t work = begin; work < end; ++work) {
      const int64_t b = work / groups;
      const int64_t group = work - b * groups;
      const keyed::Block block =
          keyed::block_of(seed, static_cast<uint64_t>(key[b]), draw, static_cast<uint32_t>(group));
      float drawn[4];
      if (kind == KeyedKind::kNormal) {
        keyed::normals_of(block, drawn);
      } else {
        for (int j = 0; j < 4; ++j) drawn[j] = keyed::open_unit(block.v[j]);
      }
      float* row = values + b * per_row;
      for (int j = 0; j < 4; ++j) {
        const int64_t i = group * 4 + j;
        if (i < per_row) row[i] = drawn[j];
      }
    }
  });
  return out;
}

}  // namespace

torch::Tensor keyed_normal(const torch::Tensor& keys, at::IntArrayRef row_shape, uint64_t seed,
                           uint32_t draw) {
  return keyed_draw(keys, row_shape, seed, draw, KeyedKind::kNormal);
}

torch::Tensor keyed_uniform(const torch::Tensor& keys, at::IntArrayRef row_shape, uint64_t seed,
                            uint32_t draw) {
  return keyed_draw(keys, row_shape, seed, draw, KeyedKind::kUniform);
}

torch::Tensor stochastic_round_bf16(const torch::Tensor& x, const torch::Tensor& key, uint64_t seed) {
  TORCH_CHECK(x.scalar_type() == torch::kFloat32, "stochastic_round_bf16: x must be fp32, got ",
              x.scalar_type());
  TORCH_CHECK(key.dim() == 1 && key.size(0) == 1 && key.device() == x.device(),
              "stochastic_round_bf16: key must be (1) int64 on x's device");
  const auto uniform = keyed_uniform(key, {x.numel()}, seed, keyed::kStochasticRounding).view(x.sizes());
  // (0, 1] -> 16 bits in [0, 65535]; added to the magnitude bits below the bf16 mantissa, they
  // carry into it with probability (dropped bits) / 2^16, then the low half is cleared.
  const auto noise = (uniform * 65536.0).floor_().clamp_max_(65535.0).to(torch::kInt32);
  auto bits = x.contiguous().view(torch::kInt32) + noise;
  bits.bitwise_and_(static_cast<int32_t>(0xFFFF0000u));
  return bits.view(torch::kFloat32).to(torch::kBFloat16);  // exact: the low 16 bits are zero
}

std::function<torch::Tensor(const torch::Tensor&, int64_t, const torch::Tensor&)> keyed_bf16_rounding(
    uint64_t seed) {
  return [seed](const torch::Tensor& x, int64_t index, const torch::Tensor& step) {
    const auto key = (step.to(torch::kInt64) * (int64_t{1} << 32) + index).view({1});
    return stochastic_round_bf16(x, key, seed);
  };
}

// ---- colour conversion ----

namespace {

// Dtype, shape and device checks shared by the kernel path and the reference.
void yuv420_check(const torch::Tensor& y, const torch::Tensor& uv, const YuvFormat& format) {
  TORCH_CHECK(format.bit_depth == 8 || format.bit_depth == 10,
              "yuv420_to_rgb: format.bit_depth must be 8 or 10, got ", format.bit_depth);
  const auto expected = format.bit_depth == 8 ? torch::kUInt8 : torch::kUInt16;
  TORCH_CHECK(y.scalar_type() == expected && uv.scalar_type() == expected, "yuv420_to_rgb: bit_depth ",
              format.bit_depth, " expects ", expected, " planes, got y ", y.scalar_type(), " and uv ",
              uv.scalar_type());
  TORCH_CHECK(y.dim() == 3, "yuv420_to_rgb: expected y (T, H, W), got ", y.sizes());
  const int64_t frames = y.size(0), height = y.size(1), width = y.size(2);
  TORCH_CHECK(uv.dim() == 4 && uv.size(0) == frames && uv.size(1) == (height + 1) / 2 &&
                  uv.size(2) == (width + 1) / 2 && uv.size(3) == 2,
              "yuv420_to_rgb: expected uv (", frames, ", ", (height + 1) / 2, ", ", (width + 1) / 2,
              ", 2) for y ", y.sizes(), ", got ", uv.sizes());
  TORCH_CHECK(y.device() == uv.device(), "yuv420_to_rgb: y on ", y.device(), " but uv on ", uv.device());
}

// Sample values shifted down to bit_depth bits, as fp32.
torch::Tensor yuv420_samples(const torch::Tensor& plane, int bit_depth) {
  auto v = plane.to(torch::kInt32);
  if (bit_depth == 10) v = torch::bitwise_right_shift(v, 6);
  return v.to(torch::kFloat32);
}

// Chroma (T, ceil(H/2), ceil(W/2)) -> (T, H, W): replicated 2x2, or (10-bit) filtered vertically
// with the cubic taps of cuda/colour.h and replicated horizontally. The taps are summed left to
// right, one rounding per multiply and add, as the kernel does.
torch::Tensor yuv420_upsample(const torch::Tensor& c, int64_t height, int64_t width, bool vertical_cubic) {
  torch::Tensor rows;  // (T, 2 * ceil(H/2), ceil(W/2))
  if (!vertical_cubic) {
    rows = c.repeat_interleave(2, 1);
  } else {
    const int64_t chroma_h = c.size(1);
    auto taps = [&](bool odd_row, int64_t first) {
      // first: offset of the first tap from the chroma row (-2 for even luma rows, -1 for odd)
      torch::Tensor sum;
      for (int j = 0; j < 4; ++j) {
        auto index =
            (torch::arange(chroma_h, torch::kInt64) + (first + j)).clamp(0, chroma_h - 1).to(c.device());
        auto term = c.index_select(1, index) * chroma_cubic_tap(odd_row, j);
        sum = j == 0 ? term : sum + term;
      }
      return sum;
    };
    auto even = taps(false, -2);
    auto odd = taps(true, -1);
    rows = torch::stack({even, odd}, 2).flatten(1, 2);
  }
  return rows.repeat_interleave(2, 2).narrow(1, 0, height).narrow(2, 0, width);
}

}  // namespace

torch::Tensor yuv420_to_rgb_reference(const torch::Tensor& y, const torch::Tensor& uv,
                                      const YuvFormat& format) {
  yuv420_check(y, uv, format);
  const YuvCoefficients k = yuv_coefficients(format);
  const int64_t height = y.size(1), width = y.size(2);
  // Operation order (and no fused multiply-adds) as in the kernel, so both round alike.
  auto luma = (yuv420_samples(y, format.bit_depth) - k.y_offset) * k.y_gain;     // (T, H, W) fp32
  auto chroma = (yuv420_samples(uv, format.bit_depth) - k.c_offset) * k.c_gain;  // (T, H/2, W/2, 2) fp32
  const bool cubic = chroma_vertical_cubic(format);
  auto cb = yuv420_upsample(chroma.select(3, 0).contiguous(), height, width, cubic);  // (T, H, W) fp32
  auto cr = yuv420_upsample(chroma.select(3, 1).contiguous(), height, width, cubic);  // (T, H, W) fp32
  auto r = luma + cr * k.r_cr;
  auto g = (luma - cb * k.g_cb) - cr * k.g_cr;
  auto b = luma + cb * k.b_cb;
  auto rgb = torch::stack({r, g, b}, -1);  // (T, H, W, 3) fp32
  return (rgb + 0.5f).floor().clamp(0, 255).to(torch::kUInt8);
}

torch::Tensor yuv420_to_rgb(const torch::Tensor& y, const torch::Tensor& uv, const YuvFormat& format) {
  yuv420_check(y, uv, format);
  if (!y.is_cuda()) return yuv420_to_rgb_reference(y, uv, format);
#ifdef TELETRON_WITH_CUDA
  TORCH_CHECK(y.size(1) < (int64_t{1} << 30) && y.size(2) < (int64_t{1} << 30),
              "yuv420_to_rgb: frame too large: ", y.sizes());
  // Row-strided views (a pitch wider than the row) go to the kernel as they are; anything else is copied.
  auto yp = y;
  if (yp.stride(2) != 1 || yp.stride(1) < 0 || yp.stride(0) < 0) yp = y.clone(at::MemoryFormat::Contiguous);
  auto uvp = uv;
  if (uvp.stride(3) != 1 || uvp.stride(2) != 2 || uvp.stride(1) < 0 || uvp.stride(0) < 0) {
    uvp = uv.clone(at::MemoryFormat::Contiguous);
  }
  const c10::cuda::CUDAGuard guard(y.device());
  const int64_t es = yp.element_size();
  auto rgb = torch::empty({y.size(0), y.size(1), y.size(2), 3}, y.options().dtype(torch::kUInt8));
  auto stream = c10::cuda::getCurrentCUDAStream(y.device().index());
  cudaError_t status = kernels::yuv420_to_rgb(
      rgb.data_ptr<uint8_t>(), yp.data_ptr(), uvp.data_ptr(), y.size(0), static_cast<int>(y.size(1)),
      static_cast<int>(y.size(2)), yp.stride(1) * es, uvp.stride(1) * es, yp.stride(0) * es,
      uvp.stride(0) * es, format, stream.stream());
  TORCH_CHECK(status == cudaSuccess, "yuv420_to_rgb kernel launch failed: ", cudaGetErrorString(status));
  return rgb;
#else
  TORCH_CHECK(false, "yuv420_to_rgb: teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
}

}  // namespace tt

// ---- augmentation ----

#ifdef TELETRON_WITH_CUDA
#include "cuda/augment.cuh"
#endif

namespace tt {
namespace {

void augment_check(const torch::Tensor& rgb, const AugmentKernelArgs& args, int64_t out_h, int64_t out_w,
                   const char* name) {
  TORCH_CHECK(rgb.dim() == 4 && rgb.size(3) == 3 && rgb.scalar_type() == torch::kUInt8, name,
              ": expected rgb (T, H, W, 3) uint8, got ", rgb.sizes(), " ", rgb.scalar_type());
  TORCH_CHECK(rgb.size(1) > 0 && rgb.size(2) > 0 && out_h > 0 && out_w > 0, name, ": empty frame ",
              rgb.sizes(), " or output ", out_h, "x", out_w);
  TORCH_CHECK(args.crop_y >= 0 && args.crop_x >= 0 && args.crop_y + out_h <= args.resized_h &&
                  args.crop_x + out_w <= args.resized_w,
              name, ": crop window (", args.crop_y, ", ", args.crop_x, ") + ", out_h, "x", out_w,
              " outside the resized frame ", args.resized_h, "x", args.resized_w);
}

}  // namespace

torch::Tensor augment_clip_cuda(const torch::Tensor& rgb, const AugmentKernelArgs& args, int64_t out_h,
                                int64_t out_w, torch::Dtype dtype) {
  augment_check(rgb, args, out_h, out_w, "augment_clip_cuda");
  TORCH_CHECK(rgb.is_cuda(), "augment_clip_cuda: expected a CUDA tensor; CPU clips use augment_reference");
  TORCH_CHECK(dtype == torch::kBFloat16 || dtype == torch::kFloat32,
              "augment_clip_cuda: dtype must be bf16 or fp32, got ", dtype);
#ifdef TELETRON_WITH_CUDA
  const c10::cuda::CUDAGuard guard(rgb.device());
  auto src = rgb.contiguous();
  const int64_t frames = src.size(0), in_h = src.size(1), in_w = src.size(2);
  auto out = torch::empty({3, frames, out_h, out_w}, src.options().dtype(dtype));  // (3, T, out_h, out_w)
  auto grey_sum = torch::empty({1}, src.options().dtype(torch::kInt64));           // (1) scratch
  auto stream = c10::cuda::getCurrentCUDAStream(src.device().index()).stream();
  auto* sum = reinterpret_cast<unsigned long long*>(grey_sum.data_ptr<int64_t>());
  cudaError_t status = kernels::augment_grey_sum(sum, src.data_ptr<uint8_t>(), frames * in_h * in_w, stream);
  TORCH_CHECK(status == cudaSuccess, "augment grey-sum kernel launch failed: ", cudaGetErrorString(status));
  float* out_f32 = dtype == torch::kFloat32 ? out.data_ptr<float>() : nullptr;
  __nv_bfloat16* out_bf16 =
      dtype == torch::kBFloat16 ? reinterpret_cast<__nv_bfloat16*>(out.data_ptr<at::BFloat16>()) : nullptr;
  status = kernels::augment_clip(out_f32, out_bf16, src.data_ptr<uint8_t>(), sum, frames, in_h, in_w, out_h,
                                 out_w, args, stream);
  TORCH_CHECK(status == cudaSuccess, "augment kernel launch failed: ", cudaGetErrorString(status));
  return out;
#else
  TORCH_CHECK(false, "augment_clip_cuda: teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
}

torch::Tensor augment_clip_emulated(const torch::Tensor& rgb, const AugmentKernelArgs& args, int64_t out_h,
                                    int64_t out_w) {
  augment_check(rgb, args, out_h, out_w, "augment_clip_emulated");
  TORCH_CHECK(!rgb.is_cuda(), "augment_clip_emulated: expected a CPU tensor");
#ifdef TELETRON_WITH_CUDA
  auto src = rgb.contiguous();
  auto out = torch::empty({3, src.size(0), out_h, out_w}, src.options().dtype(torch::kFloat32));
  kernels::augment_clip_host(out.data_ptr<float>(), src.data_ptr<uint8_t>(), src.size(0), src.size(1),
                             src.size(2), out_h, out_w, args);
  return out;
#else
  TORCH_CHECK(false, "augment_clip_emulated: teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
}

}  // namespace tt

// ---- group norm ----

#ifdef TELETRON_WITH_CUDA
#include "cuda/causal_im2col.h"
#include "cuda/group_norm.h"
#include "cuda/residual_bias.h"
#endif

namespace tt {
namespace {

void group_norm_check_param(const torch::Tensor& x, const torch::Tensor& param, const char* name) {
  TORCH_CHECK(param.dim() == 1 && param.size(0) == x.size(1), "group_norm_silu: expected ", name, " (",
              x.size(1), "), got ", param.sizes());
  TORCH_CHECK(param.scalar_type() == torch::kFloat32 || param.scalar_type() == x.scalar_type(),
              "group_norm_silu: ", name, " must be fp32 or x's ", x.scalar_type(), ", got ",
              param.scalar_type());
  TORCH_CHECK(param.device() == x.device(), "group_norm_silu: x on ", x.device(), " but ", name, " on ",
              param.device());
}

void group_norm_check(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                      int64_t groups) {
  TORCH_CHECK(x.dim() >= 3 && x.dim() <= 5,
              "group_norm_silu: expected x (N, C, L), (N, C, H, W) or (N, C, D, H, W), got ", x.sizes());
  TORCH_CHECK(x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32,
              "group_norm_silu: x must be bf16 or fp32, got ", x.scalar_type());
  TORCH_CHECK(groups > 0 && x.size(1) % groups == 0, "group_norm_silu: groups must divide C = ", x.size(1),
              ", got ", groups);
  group_norm_check_param(x, weight, "weight");
  group_norm_check_param(x, bias, "bias");
}

// The memory format y is given: x's, with contiguous winning where both fit (size-1 dims).
at::MemoryFormat group_norm_format(const torch::Tensor& x) {
  if (x.is_contiguous()) return at::MemoryFormat::Contiguous;
  if (x.dim() == 5 && x.is_contiguous(at::MemoryFormat::ChannelsLast3d))
    return at::MemoryFormat::ChannelsLast3d;
  if (x.dim() == 4 && x.is_contiguous(at::MemoryFormat::ChannelsLast)) return at::MemoryFormat::ChannelsLast;
  return x.suggest_memory_format();  // strided views are copied into this
}

}  // namespace

torch::Tensor group_norm_silu_reference(const torch::Tensor& x, const torch::Tensor& weight,
                                        const torch::Tensor& bias, int64_t groups, double eps, bool silu) {
  group_norm_check(x, weight, bias, groups);
  namespace F = torch::nn::functional;
  auto options = F::GroupNormFuncOptions(groups)
                     .weight(weight.to(torch::kFloat32))
                     .bias(bias.to(torch::kFloat32))
                     .eps(eps);
  auto y = F::group_norm(x.to(torch::kFloat32), options);  // like x, fp32
  if (silu) y = F::silu(y);
  return y.to(x.scalar_type()).contiguous(group_norm_format(x));
}

#ifdef TELETRON_WITH_CUDA
namespace {

// The kernels on src (dense in the layout `shape.channels_last` says) into y; `shape` brings the
// layout and any padding of y, the rest is filled in here. On the current stream of src's device.
void run_group_norm(torch::Tensor& y, const torch::Tensor& src, const torch::Tensor& weight,
                    const torch::Tensor& bias, int64_t groups, double eps, bool silu,
                    kernels::GroupNormShape shape, const torch::Tensor& pre_bias = {}) {
  shape.batch = src.size(0);
  shape.channels = src.size(1);
  shape.spatial = src.numel() / (shape.batch * shape.channels);
  shape.groups = groups;
  shape.bf16 = src.scalar_type() == torch::kBFloat16;
  shape.silu = silu;
  shape.eps = eps;
  auto w = weight.to(torch::kFloat32).contiguous();  // (C) fp32
  auto b = bias.to(torch::kFloat32).contiguous();    // (C) fp32
  torch::Tensor pb = pre_bias.defined() ? pre_bias.to(torch::kFloat32).contiguous() : torch::Tensor();
  auto scratch =
      torch::empty({kernels::group_norm_scratch_size(shape)}, src.options().dtype(torch::kFloat32));
  auto stream = c10::cuda::getCurrentCUDAStream(src.device().index()).stream();
  const cudaError_t status = kernels::group_norm_silu(
      y.data_ptr(), src.data_ptr(), w.data_ptr<float>(), b.data_ptr<float>(),
      pb.defined() ? pb.data_ptr<float>() : nullptr, scratch.data_ptr<float>(), shape, stream);
  TORCH_CHECK(status == cudaSuccess, "group_norm_silu kernel launch failed: ", cudaGetErrorString(status));
}

}  // namespace
#endif

void replicate_pad_borders(torch::Tensor& out, int64_t time, int64_t space) {
  TORCH_CHECK(out.dim() == 5 && time >= 0 && space >= 0 && out.size(2) > time && out.size(3) > 2 * space &&
                  out.size(4) > 2 * space,
              "replicate_pad_borders: pads (", time, ", ", space, ") do not fit ", out.sizes());
  const int64_t t = out.size(2) - time, h = out.size(3) - 2 * space, w = out.size(4) - 2 * space;
#ifdef TELETRON_WITH_CUDA
  // Channels-last CUDA buffers: one kernel copies every pad position from the interior position it
  // clamps to (instead of five strided ATen copies).
  if (out.is_cuda() && (out.scalar_type() == torch::kBFloat16 || out.scalar_type() == torch::kFloat32) &&
      out.size(1) <= 1024 && !out.is_contiguous() && out.is_contiguous(at::MemoryFormat::ChannelsLast3d)) {
    const c10::cuda::CUDAGuard guard(out.device());
    const cudaError_t status = kernels::replicate_borders_last(
        out.data_ptr(), out.scalar_type() == torch::kBFloat16, out.size(0), out.size(1), t, h, w, time, space,
        c10::cuda::getCurrentCUDAStream(out.device().index()).stream());
    TORCH_CHECK(status == cudaSuccess,
                "replicate_borders_last kernel launch failed: ", cudaGetErrorString(status));
    return;
  }
#endif
  torch::Tensor frames = out.narrow(2, time, t);
  if (space > 0) {
    torch::Tensor rows = frames.narrow(4, space, w);
    rows.narrow(3, 0, space).copy_(rows.narrow(3, space, 1).expand_as(rows.narrow(3, 0, space)));
    rows.narrow(3, space + h, space)
        .copy_(rows.narrow(3, space + h - 1, 1).expand_as(rows.narrow(3, 0, space)));
    frames.narrow(4, 0, space).copy_(frames.narrow(4, space, 1).expand_as(frames.narrow(4, 0, space)));
    frames.narrow(4, space + w, space)
        .copy_(frames.narrow(4, space + w - 1, 1).expand_as(frames.narrow(4, 0, space)));
  }
  if (time > 0) out.narrow(2, 0, time).copy_(out.narrow(2, time, 1).expand_as(out.narrow(2, 0, time)));
}

torch::Tensor group_norm_silu_padded(const torch::Tensor& x, const torch::Tensor& weight,
                                     const torch::Tensor& bias, int64_t groups, double eps, bool silu,
                                     int64_t time, int64_t space, const torch::Tensor& pre_bias,
                                     bool borders_by_norm) {
  group_norm_check(x, weight, bias, groups);
  if (pre_bias.defined()) group_norm_check_param(x, pre_bias, "pre_bias");
  TORCH_CHECK(x.dim() == 5 && time >= 0 && space >= 0,
              "group_norm_silu_padded: x must be (N, C, T, H, W) and the "
              "pads >= 0, got ",
              x.sizes(), " and (", time, ", ", space, ")");
  const int64_t t = x.size(2), h = x.size(3), w = x.size(4);
#ifdef TELETRON_WITH_CUDA
  const bool fast = x.is_cuda() && x.numel() > 0 && x.size(1) <= kernels::kGroupNormMaxChannelsLast &&
                    !x.is_contiguous() && x.is_contiguous(at::MemoryFormat::ChannelsLast3d);
#else
  const bool fast = false;  // group_norm_silu below names the missing kernels for CUDA input
#endif
  torch::Tensor out =
      torch::empty({x.size(0), x.size(1), t + time, h + 2 * space, w + 2 * space},
                   x.options().memory_format(fast ? at::MemoryFormat::ChannelsLast3d : group_norm_format(x)));
  if (!fast) {  // the sum (rounded to x's dtype), the norm, then one copy into the interior and the borders
    const torch::Tensor source =
        pre_bias.defined() ? (x.to(torch::kFloat32) + pre_bias.to(torch::kFloat32).view({1, -1, 1, 1, 1}))
                                 .to(x.scalar_type())
                           : x;
    out.narrow(2, time, t)
        .narrow(3, space, h)
        .narrow(4, space, w)
        .copy_(group_norm_silu(source, weight, bias, groups, eps, silu));
    replicate_pad_borders(out, time, space);
  } else {
#ifdef TELETRON_WITH_CUDA
    const c10::cuda::CUDAGuard guard(x.device());
    kernels::GroupNormShape shape;
    shape.channels_last = true;
    shape.frames = t;
    shape.height = h;
    shape.width = w;
    shape.pad_front = time;
    shape.pad_side = space;
    shape.pads_in_apply = borders_by_norm;
    run_group_norm(out, x, weight, bias, groups, eps, silu, shape, pre_bias);  // and the borders
#endif
  }
  return out;
}

torch::Tensor group_norm_silu(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& bias,
                              int64_t groups, double eps, bool silu) {
  group_norm_check(x, weight, bias, groups);
  if (!x.is_cuda()) return group_norm_silu_reference(x, weight, bias, groups, eps, silu);
#ifdef TELETRON_WITH_CUDA
  const c10::cuda::CUDAGuard guard(x.device());
  const auto format = group_norm_format(x);
  const int64_t channels = x.size(1);
  // Past kGroupNormMaxChannelsLast channels, channels-last input takes the channels-first kernels on a copy.
  const bool channels_last =
      format != at::MemoryFormat::Contiguous && channels <= kernels::kGroupNormMaxChannelsLast;
  auto src = x.contiguous(channels_last ? format : at::MemoryFormat::Contiguous);
  auto y = torch::empty_like(src);  // src's strides
  if (x.numel() == 0) return y.contiguous(format);
  kernels::GroupNormShape shape;
  shape.channels_last = channels_last;
  run_group_norm(y, src, weight, bias, groups, eps, silu, shape);
  return y.contiguous(format);
#else
  TORCH_CHECK(false, "group_norm_silu: teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
}

torch::Tensor& add_residual_bias_(torch::Tensor& out, const torch::Tensor& other, const torch::Tensor& bias) {
  TORCH_CHECK(out.dim() >= 2 && other.sizes() == out.sizes() && other.scalar_type() == out.scalar_type() &&
                  other.device() == out.device(),
              "add_residual_bias_: other must be like out ", out.sizes(), " ", out.scalar_type(), ", got ",
              other.sizes(), " ", other.scalar_type(), " on ", other.device());
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == out.size(1) && bias.device() == out.device(),
              "add_residual_bias_: expected bias (", out.size(1), ") on ", out.device(), ", got ",
              bias.sizes(), " on ", bias.device());
#ifdef TELETRON_WITH_CUDA
  const auto format = out.dim() == 5 ? at::MemoryFormat::ChannelsLast3d : at::MemoryFormat::ChannelsLast;
  const bool fast = out.is_cuda() && (out.dim() == 4 || out.dim() == 5) &&
                    (out.scalar_type() == torch::kBFloat16 || out.scalar_type() == torch::kFloat32) &&
                    out.is_contiguous(format) && other.is_contiguous(format) &&
                    out.strides() == other.strides();
  if (fast) {
    const c10::cuda::CUDAGuard guard(out.device());
    const torch::Tensor b = bias.to(torch::kFloat32).contiguous();
    const cudaError_t status =
        kernels::add_residual_bias(out.data_ptr(), other.data_ptr(), b.data_ptr<float>(), out.numel(),
                                   out.size(1), out.scalar_type() == torch::kBFloat16,
                                   c10::cuda::getCurrentCUDAStream(out.device().index()).stream());
    TORCH_CHECK(status == cudaSuccess,
                "add_residual_bias kernel launch failed: ", cudaGetErrorString(status));
    return out;
  }
#endif
  std::vector<int64_t> shape(static_cast<size_t>(out.dim()), 1);
  shape[1] = out.size(1);
  return out.add_(other).add_(bias.to(out.scalar_type()).view(shape));
}

torch::Tensor add_residual_bias_padded(const torch::Tensor& x, const torch::Tensor& other,
                                       const torch::Tensor& bias, int64_t time, int64_t space) {
  TORCH_CHECK(x.dim() == 5 && other.sizes() == x.sizes() && other.scalar_type() == x.scalar_type() &&
                  other.device() == x.device(),
              "add_residual_bias_padded: expected x (N, C, T, H, W) and other like it, got ", x.sizes(), " ",
              x.scalar_type(), " and ", other.sizes(), " ", other.scalar_type(), " on ", other.device());
  TORCH_CHECK(bias.dim() == 1 && bias.size(0) == x.size(1) && bias.device() == x.device(),
              "add_residual_bias_padded: expected bias (", x.size(1), ") on ", x.device(), ", got ",
              bias.sizes(), " on ", bias.device());
  TORCH_CHECK(time >= 0 && space >= 0, "add_residual_bias_padded: pads must be >= 0, got ", time, ", ",
              space);
  const int64_t t = x.size(2), h = x.size(3), w = x.size(4);
  torch::Tensor out = torch::empty({x.size(0), x.size(1), t + time, h + 2 * space, w + 2 * space},
                                   x.options().memory_format(x.suggest_memory_format()));
#ifdef TELETRON_WITH_CUDA
  const auto format = at::MemoryFormat::ChannelsLast3d;
  if (x.is_cuda() && (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32) &&
      x.is_contiguous(format) && other.is_contiguous(format) && out.is_contiguous(format) && x.numel() > 0) {
    const c10::cuda::CUDAGuard guard(x.device());
    const torch::Tensor b = bias.to(torch::kFloat32).contiguous();
    kernels::PaddedShape shape;
    shape.batch = x.size(0);
    shape.channels = x.size(1);
    shape.frames = t;
    shape.height = h;
    shape.width = w;
    shape.time = time;
    shape.space = space;
    const cudaError_t status = kernels::add_residual_bias_padded(
        out.data_ptr(), x.data_ptr(), other.data_ptr(), b.data_ptr<float>(), shape,
        x.scalar_type() == torch::kBFloat16, c10::cuda::getCurrentCUDAStream(x.device().index()).stream());
    TORCH_CHECK(status == cudaSuccess,
                "add_residual_bias_padded kernel launch failed: ", cudaGetErrorString(status));
    if (time > 0 || space > 0) replicate_pad_borders(out, time, space);
    return out;
  }
#endif
  torch::Tensor sum = x.clone();
  add_residual_bias_(sum, other, bias);
  out.narrow(2, time, t).narrow(3, space, h).narrow(4, space, w).copy_(sum);
  sum.reset();
  if (time > 0 || space > 0) replicate_pad_borders(out, time, space);
  return out;
}

torch::Tensor causal_conv3d_gemm(const torch::Tensor& x, const torch::Tensor& weight,
                                 const torch::Tensor& bias) {
  TORCH_CHECK(x.dim() == 5 && weight.dim() == 5 && weight.size(1) == x.size(1) && weight.size(2) == 3 &&
                  weight.size(3) == 3 && weight.size(4) == 3,
              "causal_conv3d_gemm: expected x (N, C, T, H, W) and weight (O, C, 3, 3, 3), got ", x.sizes(),
              " and ", weight.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)),
              "causal_conv3d_gemm: expected bias (", weight.size(0), "), got ", bias.sizes());
  const int64_t batch = x.size(0), channels = x.size(1), frames = x.size(2), height = x.size(3),
                width = x.size(4);
  const int64_t outputs = weight.size(0);
#ifdef TELETRON_WITH_CUDA
  if (x.is_cuda() && (x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kFloat32) &&
      x.numel() > 0) {
    const c10::cuda::CUDAGuard guard(x.device());
    kernels::Im2colShape shape;
    shape.batch = batch;
    shape.channels = channels;
    shape.frames = frames;
    shape.height = height;
    shape.width = width;
    for (int d = 0; d < 5; ++d) shape.stride[d] = x.stride(d);
    const int64_t taps = 27 * channels;
    shape.columns = (taps + 1 + 7) / 8 * 8;
    // The weight as a (columns, O) matrix in the im2col order, the bias as the row the ones column meets.
    torch::Tensor matrix = torch::zeros({shape.columns, outputs}, x.options());
    matrix.narrow(0, 0, taps).copy_(weight.permute({2, 3, 4, 1, 0}).reshape({taps, outputs}));
    if (bias.defined()) matrix.select(0, taps).copy_(bias);
    torch::Tensor out = torch::empty({batch, frames, height, width, outputs}, x.options());
    const int64_t rows = batch * frames * height * width;
    torch::Tensor out_rows = out.view({rows, outputs});
    // Rows in chunks of about 256 MiB of im2col matrix: its memory stays small beside the output.
    const int64_t chunk = std::max<int64_t>(1, (int64_t{256} << 20) / (shape.columns * x.element_size()));
    torch::Tensor cols = torch::empty({std::min(chunk, rows), shape.columns}, x.options());
    const auto stream = c10::cuda::getCurrentCUDAStream(x.device().index()).stream();
    for (int64_t first = 0; first < rows; first += chunk) {
      const int64_t count = std::min(chunk, rows - first);
      torch::Tensor part = cols.narrow(0, 0, count);
      const cudaError_t status = kernels::causal_im2col(part.data_ptr(), x.data_ptr(), shape, first, count,
                                                        x.scalar_type() == torch::kBFloat16, stream);
      TORCH_CHECK(status == cudaSuccess, "causal_im2col kernel launch failed: ", cudaGetErrorString(status));
      torch::Tensor target = out_rows.narrow(0, first, count);
      at::mm_out(target, part, matrix);
    }
    return out.permute({0, 4, 1, 2, 3});  // (N, O, T, H, W), channels-last
  }
#endif
  namespace F = torch::nn::functional;
  const torch::Tensor padded = F::pad(x, F::PadFuncOptions({1, 1, 1, 1, 2, 0}).mode(torch::kReplicate));
  return F::conv3d(padded, weight, F::Conv3dFuncOptions().bias(bias))
      .contiguous(at::MemoryFormat::ChannelsLast3d);
}

torch::Tensor spin_until_set(const torch::Tensor& flag, double timeout_s) {
  TORCH_CHECK(flag.is_cuda() && flag.scalar_type() == torch::kInt32 && flag.numel() == 1,
              "spin_until_set: flag must be a (1) int32 CUDA tensor, got ", flag.sizes(), " ",
              flag.scalar_type(), " on ", flag.device());
  TORCH_CHECK(timeout_s > 0, "spin_until_set: timeout_s must be > 0, got ", timeout_s);
#ifdef TELETRON_WITH_CUDA
  const c10::cuda::CUDAGuard guard(flag.device());
  auto timed_out = torch::empty({1}, flag.options());  // (1) int32
  const cudaError_t status = kernels::spin_until_set(
      flag.data_ptr<int32_t>(), timed_out.data_ptr<int32_t>(), static_cast<int64_t>(timeout_s * 1e9),
      c10::cuda::getCurrentCUDAStream(flag.device().index()).stream());
  TORCH_CHECK(status == cudaSuccess, "spin kernel launch failed: ", cudaGetErrorString(status));
  return timed_out;
#else
  TORCH_CHECK(false, "spin_until_set: teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
}

void busy_for(const torch::Device& device, double seconds) {
  TORCH_CHECK(device.is_cuda(), "busy_for: needs a CUDA device, got ", device);
  TORCH_CHECK(seconds > 0 && seconds < 60, "busy_for: seconds must be in (0, 60), got ", seconds);
#ifdef TELETRON_WITH_CUDA
  const c10::cuda::CUDAGuard guard(device);
  const cudaError_t status = kernels::busy_for(static_cast<int64_t>(seconds * 1e9),
                                               c10::cuda::getCurrentCUDAStream(device.index()).stream());
  TORCH_CHECK(status == cudaSuccess, "busy kernel launch failed: ", cudaGetErrorString(status));
#else
  TORCH_CHECK(false, "busy_for: teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
}

}  // namespace tt

// ---- Transformer block ops: gated residual, QK RMSNorm + RoPE, GELU-tanh ----

#ifdef TELETRON_WITH_CUDA
#include "cuda/gated_residual.cuh"
#include "cuda/gelu_tanh.cuh"
#include "cuda/rms_norm_rope.cuh"
#endif

namespace tt {
namespace {

// The dtype the references compute in: fp64 for fp64 inputs (finite-difference tests), else fp32.
torch::Dtype math_dtype(const torch::Tensor& x) {
  return x.scalar_type() == torch::kFloat64 ? torch::kFloat64 : torch::kFloat32;
}

void check_kernel_dtype(const torch::Tensor& t, const char* name, const char* what) {
  TORCH_CHECK(t.scalar_type() == torch::kBFloat16 || t.scalar_type() == torch::kFloat32, name, ": ", what,
              " must be bf16 or fp32 on CUDA, got ", t.scalar_type());
}

void check_same(const torch::Tensor& a, const torch::Tensor& b, const char* name, const char* a_name,
                const char* b_name) {
  TORCH_CHECK(a.scalar_type() == b.scalar_type(), name, ": ", a_name, " is ", a.scalar_type(), " but ",
              b_name, " is ", b.scalar_type());
  TORCH_CHECK(a.device() == b.device(), name, ": ", a_name, " on ", a.device(), " but ", b_name, " on ",
              b.device());
}

void gated_residual_check(const torch::Tensor& x, const torch::Tensor& y, const torch::Tensor& gate,
                          const char* name) {
  TORCH_CHECK(x.dim() == 3, name, ": expected x (B, N, C), got ", x.sizes());
  TORCH_CHECK(y.sizes() == x.sizes(), name, ": y ", y.sizes(), " does not match x ", x.sizes());
  TORCH_CHECK(gate.dim() == 2 && gate.size(0) == x.size(0) && gate.size(1) == x.size(2), name,
              ": expected gate (", x.size(0), ", ", x.size(2), "), got ", gate.sizes());
  check_same(x, y, name, "x", "y");
  check_same(x, gate, name, "x", "gate");
}

#ifdef TELETRON_WITH_CUDA
cudaStream_t current_stream(const torch::Tensor& t) {
  return c10::cuda::getCurrentCUDAStream(t.device().index()).stream();
}
#endif

#ifndef TELETRON_WITH_CUDA
[[noreturn]] void no_kernels(const char* name) {
  TORCH_CHECK(false, name, ": teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
}
#endif

}  // namespace

torch::Tensor gated_residual_forward_reference(const torch::Tensor& x, const torch::Tensor& y,
                                               const torch::Tensor& gate) {
  gated_residual_check(x, y, gate, "gated_residual_forward");
  const auto m = math_dtype(x);
  return (x.to(m) + gate.to(m).unsqueeze(1) * y.to(m)).to(x.scalar_type());
}

torch::Tensor gated_residual_forward(const torch::Tensor& x, const torch::Tensor& y,
                                     const torch::Tensor& gate) {
  gated_residual_check(x, y, gate, "gated_residual_forward");
  if (!x.is_cuda()) return gated_residual_forward_reference(x, y, gate);
#ifdef TELETRON_WITH_CUDA
  check_kernel_dtype(x, "gated_residual_forward", "x");
  const c10::cuda::CUDAGuard guard(x.device());
  auto xc = x.contiguous(), yc = y.contiguous(), gc = gate.contiguous();
  auto out = torch::empty_like(xc);  // (B, N, C)
  const cudaError_t status = kernels::gated_residual_forward(
      out.data_ptr(), xc.data_ptr(), yc.data_ptr(), gc.data_ptr(), x.size(0), x.size(1), x.size(2),
      x.scalar_type() == torch::kBFloat16, current_stream(x));
  TORCH_CHECK(status == cudaSuccess,
              "gated_residual_forward kernel launch failed: ", cudaGetErrorString(status));
  return out;
#else
  no_kernels("gated_residual_forward");
#endif
}

std::pair<torch::Tensor, torch::Tensor> gated_residual_backward_reference(const torch::Tensor& grad,
                                                                          const torch::Tensor& y,
                                                                          const torch::Tensor& gate) {
  gated_residual_check(grad, y, gate, "gated_residual_backward");
  const auto m = math_dtype(grad);
  auto g = grad.to(m);
  auto dy = (g * gate.to(m).unsqueeze(1)).to(y.scalar_type());
  auto dgate = (g * y.to(m)).sum(1).to(gate.scalar_type());
  return {dy, dgate};
}

std::pair<torch::Tensor, torch::Tensor> gated_residual_backward(const torch::Tensor& grad,
                                                                const torch::Tensor& y,
                                                                const torch::Tensor& gate) {
  gated_residual_check(grad, y, gate, "gated_residual_backward");
  if (!grad.is_cuda()) return gated_residual_backward_reference(grad, y, gate);
#ifdef TELETRON_WITH_CUDA
  check_kernel_dtype(grad, "gated_residual_backward", "grad");
  const c10::cuda::CUDAGuard guard(grad.device());
  auto gc = grad.contiguous(), yc = y.contiguous(), gate_c = gate.contiguous();
  const int64_t batch = y.size(0), tokens = y.size(1), channels = y.size(2);
  auto dy = torch::empty_like(yc);         // (B, N, C)
  auto dgate = torch::empty_like(gate_c);  // (B, C)
  auto scratch = torch::empty({kernels::gated_residual_scratch_size(batch, tokens, channels)},
                              yc.options().dtype(torch::kFloat32));  // per-chunk partials of dgate
  const cudaError_t status =
      kernels::gated_residual_backward(dy.data_ptr(), dgate.data_ptr(), gc.data_ptr(), yc.data_ptr(),
                                       gate_c.data_ptr(), scratch.data_ptr<float>(), batch, tokens, channels,
                                       y.scalar_type() == torch::kBFloat16, current_stream(y));
  TORCH_CHECK(status == cudaSuccess,
              "gated_residual_backward kernel launch failed: ", cudaGetErrorString(status));
  return {dy, dgate};
#else
  no_kernels("gated_residual_backward");
#endif
}

namespace {

void rms_norm_rope_check(const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& rope,
                         int64_t rope_tokens, const char* name) {
  TORCH_CHECK(x.dim() == 4, name, ": expected x (B, H, N, D), got ", x.sizes());
  const int64_t dim = x.size(3);
  TORCH_CHECK(dim % 2 == 0, name, ": head dim must be even, got ", dim);
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == dim, name, ": expected weight (", dim, "), got ",
              weight.sizes());
  TORCH_CHECK(weight.device() == x.device(), name, ": x on ", x.device(), " but weight on ", weight.device());
  TORCH_CHECK(rope_tokens >= 0 && rope_tokens <= x.size(2), name, ": rope_tokens must be in [0, ", x.size(2),
              "], got ", rope_tokens);
  if (rope_tokens == 0) return;
  TORCH_CHECK(rope.defined() && rope.dim() == 3 && rope.size(0) >= rope_tokens && rope.size(1) == dim / 2 &&
                  rope.size(2) == 2,
              name, ": expected rope (>= ", rope_tokens, ", ", dim / 2, ", 2), got ",
              rope.defined() ? rope.sizes() : at::IntArrayRef{});
  TORCH_CHECK(rope.scalar_type() == torch::kFloat32 || rope.scalar_type() == torch::kFloat64, name,
              ": rope must be fp32 (fp64 for the reference), got ", rope.scalar_type());
  TORCH_CHECK(rope.device() == x.device(), name, ": x on ", x.device(), " but rope on ", rope.device());
}

// A caller's destination for rms_norm_rope's out or dx: x's sizes, dtype and device, unit stride along D.
void rms_norm_rope_check_destination(const torch::Tensor& dest, const torch::Tensor& x, const char* name) {
  if (!dest.defined()) return;
  TORCH_CHECK(
      dest.sizes() == x.sizes() && dest.scalar_type() == x.scalar_type() && dest.device() == x.device(), name,
      ": the destination ", dest.sizes(), " ", dest.scalar_type(), " on ", dest.device(),
      " does not match x ", x.sizes(), " ", x.scalar_type(), " on ", x.device());
  TORCH_CHECK(dest.stride(3) == 1, name, ": the destination must have unit stride along D, got ",
              dest.strides());
}

// result, or result copied into dest when a destination is given.
torch::Tensor into(const torch::Tensor& dest, const torch::Tensor& result) {
  return dest.defined() ? dest.copy_(result) : result;
}

// (x_a, x_b) pairs of t (..., N, D) rotated by rope (N, D/2, 2) (cos, sin); `sign` -1 rotates back.
torch::Tensor rotate_pairs(const torch::Tensor& t, const torch::Tensor& rope, double sign) {
  auto pairs = t.unflatten(-1, {-1, 2});  // (..., N, D/2, 2)
  auto a = pairs.select(-1, 0), b = pairs.select(-1, 1);
  auto c = rope.select(-1, 0), s = rope.select(-1, 1) * sign;  // (N, D/2)
  return torch::stack({a * c - b * s, b * c + a * s}, -1).flatten(-2);
}

// The first rope_tokens tokens of t (B, H, N, D) rotated, the rest as they are.
torch::Tensor rotate_head(const torch::Tensor& t, const torch::Tensor& rope, int64_t rope_tokens,
                          double sign) {
  if (rope_tokens == 0) return t;
  auto rotated =
      rotate_pairs(t.slice(2, 0, rope_tokens), rope.slice(0, 0, rope_tokens).to(t.scalar_type()), sign);
  if (rope_tokens == t.size(2)) return rotated;
  return torch::cat({rotated, t.slice(2, rope_tokens)}, 2);
}

#ifdef TELETRON_WITH_CUDA
kernels::RmsNormRopeShape rms_norm_rope_shape(const torch::Tensor& x, int64_t rope_tokens, double eps) {
  kernels::RmsNormRopeShape s;
  s.batch = x.size(0);
  s.heads = x.size(1);
  s.tokens = x.size(2);
  s.dim = x.size(3);
  s.stride_batch = x.stride(0);
  s.stride_heads = x.stride(1);
  s.stride_tokens = x.stride(2);
  s.rope_tokens = rope_tokens;
  s.eps = static_cast<float>(eps);
  s.bf16 = x.scalar_type() == torch::kBFloat16;
  s.out = s.grad = {s.heads * s.tokens * s.dim, s.tokens * s.dim, s.dim};  // dense (B, H, N, D)
  return s;
}

// x as the kernels read it: unit stride along D, else a contiguous copy.
torch::Tensor rms_norm_rope_input(const torch::Tensor& x) {
  return x.stride(3) == 1 ? x : x.contiguous();
}

kernels::RowStrides row_strides(const torch::Tensor& t) {
  return {t.stride(0), t.stride(1), t.stride(2)};
}

// (B, H, N, D) stored token-major, (B, N, H, D) in memory: the layout of q, k, v as views of the
// QKV projection and of ATen's elementwise ops on them (the unfused path's), which cuDNN's flash
// attention runs faster with than head-major q and k beside a token-major v (5 ms per 1b pass).
torch::Tensor empty_token_major(const torch::Tensor& like) {
  return torch::empty({like.size(0), like.size(2), like.size(1), like.size(3)}, like.options())
      .permute({0, 2, 1, 3});
}

const float* rope_pointer(const torch::Tensor& rope, int64_t rope_tokens, torch::Tensor& holder) {
  if (rope_tokens == 0) return nullptr;
  holder = rope.to(torch::kFloat32).contiguous();  // (>= rope_tokens, D/2, 2)
  return holder.data_ptr<float>();
}
#endif

}  // namespace

std::pair<torch::Tensor, torch::Tensor> rms_norm_rope_forward_reference(const torch::Tensor& x,
                                                                        const torch::Tensor& weight,
                                                                        const torch::Tensor& rope,
                                                                        int64_t rope_tokens, double eps) {
  rms_norm_rope_check(x, weight, rope, rope_tokens, "rms_norm_rope_forward");
  const auto m = math_dtype(x);
  auto xm = x.to(m);
  auto w = weight.to(x.scalar_type()).to(m);
  auto rstd = torch::rsqrt(xm.pow(2).mean(-1) + eps);                          // (B, H, N)
  auto normed = (xm * rstd.unsqueeze(-1) * w).to(x.scalar_type()).to(m);       // rounded as stored
  auto out = rotate_head(normed, rope, rope_tokens, 1.0).to(x.scalar_type());  // (B, H, N, D)
  return {out.contiguous(), rstd};
}

std::pair<torch::Tensor, torch::Tensor> rms_norm_rope_forward(const torch::Tensor& x,
                                                              const torch::Tensor& weight,
                                                              const torch::Tensor& rope, int64_t rope_tokens,
                                                              double eps, const torch::Tensor& out_to) {
  rms_norm_rope_check(x, weight, rope, rope_tokens, "rms_norm_rope_forward");
  rms_norm_rope_check_destination(out_to, x, "rms_norm_rope_forward");
  if (!x.is_cuda()) {
    auto [out, rstd] = rms_norm_rope_forward_reference(x, weight, rope, rope_tokens, eps);
    return {into(out_to, out), rstd};
  }
#ifdef TELETRON_WITH_CUDA
  check_kernel_dtype(x, "rms_norm_rope_forward", "x");
  TORCH_CHECK(x.size(3) <= kernels::kRmsNormRopeMaxDim, "rms_norm_rope_forward: head dim ", x.size(3),
              " is more than the kernel's ", kernels::kRmsNormRopeMaxDim);
  const c10::cuda::CUDAGuard guard(x.device());
  auto src = rms_norm_rope_input(x);
  auto w = weight.to(x.scalar_type()).to(torch::kFloat32).contiguous();  // (D) fp32, rounded as the model's
  torch::Tensor rope_holder;
  const float* rope_data = rope_pointer(rope, rope_tokens, rope_holder);
  auto out = out_to.defined() ? out_to : empty_token_major(x);
  auto rstd = torch::empty({x.size(0), x.size(1), x.size(2)}, x.options().dtype(torch::kFloat32));
  kernels::RmsNormRopeShape shape = rms_norm_rope_shape(src, rope_tokens, eps);
  shape.out = row_strides(out);
  const cudaError_t status =
      kernels::rms_norm_rope_forward(out.data_ptr(), rstd.data_ptr<float>(), src.data_ptr(),
                                     w.data_ptr<float>(), rope_data, shape, current_stream(x));
  TORCH_CHECK(status == cudaSuccess,
              "rms_norm_rope_forward kernel launch failed: ", cudaGetErrorString(status));
  return {out, rstd};
#else
  no_kernels("rms_norm_rope_forward");
#endif
}

std::pair<torch::Tensor, torch::Tensor> rms_norm_rope_backward_reference(
    const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& rstd,
    const torch::Tensor& rope, int64_t rope_tokens) {
  rms_norm_rope_check(x, weight, rope, rope_tokens, "rms_norm_rope_backward");
  TORCH_CHECK(grad.sizes() == x.sizes(), "rms_norm_rope_backward: grad ", grad.sizes(), " vs x ", x.sizes());
  const auto m = math_dtype(x);
  auto g = rotate_head(grad.to(m), rope, rope_tokens, -1.0);  // gradient of the normalised x̂w
  auto r = rstd.to(m).unsqueeze(-1);                          // (B, H, N, 1)
  auto xh = x.to(m) * r;                                      // x̂
  auto gw = g * weight.to(x.scalar_type()).to(m);
  auto dx = r * (gw - xh * (gw * xh).mean(-1, /*keepdim=*/true));
  auto dweight = (g * xh).sum({0, 1, 2});
  return {dx.to(x.scalar_type()), dweight.to(weight.scalar_type())};
}

std::pair<torch::Tensor, torch::Tensor> rms_norm_rope_backward(
    const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& weight, const torch::Tensor& rstd,
    const torch::Tensor& rope, int64_t rope_tokens, const torch::Tensor& dx_out) {
  rms_norm_rope_check(x, weight, rope, rope_tokens, "rms_norm_rope_backward");
  TORCH_CHECK(grad.sizes() == x.sizes(), "rms_norm_rope_backward: grad ", grad.sizes(), " vs x ", x.sizes());
  rms_norm_rope_check_destination(dx_out, x, "rms_norm_rope_backward");
  if (!x.is_cuda()) {
    auto [dx, dweight] = rms_norm_rope_backward_reference(grad, x, weight, rstd, rope, rope_tokens);
    return {into(dx_out, dx), dweight};
  }
#ifdef TELETRON_WITH_CUDA
  check_kernel_dtype(x, "rms_norm_rope_backward", "x");
  check_same(grad, x, "rms_norm_rope_backward", "grad", "x");
  TORCH_CHECK(rstd.scalar_type() == torch::kFloat32 && rstd.numel() == x.size(0) * x.size(1) * x.size(2),
              "rms_norm_rope_backward: expected rstd (B, H, N) fp32, got ", rstd.sizes(), " ",
              rstd.scalar_type());
  TORCH_CHECK(x.size(3) <= kernels::kRmsNormRopeMaxDim, "rms_norm_rope_backward: head dim ", x.size(3),
              " is more than the kernel's ", kernels::kRmsNormRopeMaxDim);
  const c10::cuda::CUDAGuard guard(x.device());
  auto src = rms_norm_rope_input(x);
  auto gc = grad.stride(3) == 1 ? grad : grad.contiguous();  // any strides along B, H, N read in place
  auto rc = rstd.contiguous();
  auto w = weight.to(x.scalar_type()).to(torch::kFloat32).contiguous();  // (D) fp32
  torch::Tensor rope_holder;
  const float* rope_data = rope_pointer(rope, rope_tokens, rope_holder);
  kernels::RmsNormRopeShape shape = rms_norm_rope_shape(src, rope_tokens, 0.0);
  auto dx = dx_out.defined() ? dx_out : empty_token_major(x);
  shape.out = row_strides(dx);
  shape.grad = row_strides(gc);
  auto dweight = torch::empty({x.size(3)}, x.options().dtype(torch::kFloat32));                // (D) fp32
  auto scratch = torch::empty({kernels::rms_norm_rope_scratch_size(shape)}, dweight.options());
  const cudaError_t status = kernels::rms_norm_rope_backward(
      dx.data_ptr(), dweight.data_ptr<float>(), gc.data_ptr(), src.data_ptr(), rc.data_ptr<float>(),
      w.data_ptr<float>(), rope_data, scratch.data_ptr<float>(), shape, current_stream(x));
  TORCH_CHECK(status == cudaSuccess,
              "rms_norm_rope_backward kernel launch failed: ", cudaGetErrorString(status));
  return {dx, dweight.to(weight.scalar_type())};
#else
  no_kernels("rms_norm_rope_backward");
#endif
}

namespace {

constexpr double kGeluBeta = 0.7978845608028654;  // sqrt(2 / pi)
constexpr double kGeluKappa = 0.044715;

// The row stride of x read as (rows, M) rows of its last dim, in place, or 0 when it cannot be.
int64_t gelu_row_stride(const torch::Tensor& x) {
  if (x.is_contiguous()) return x.dim() == 0 ? 1 : x.size(-1);
  if (x.dim() < 2 || x.stride(-1) != 1 || x.stride(-2) < x.size(-1)) return 0;
  for (int64_t i = 0; i + 2 < x.dim(); ++i) {
    if (x.stride(i) != x.stride(i + 1) * x.size(i + 1)) return 0;
  }
  return x.stride(-2);
}

}  // namespace

torch::Tensor gelu_tanh_forward_reference(const torch::Tensor& x) {
  const auto m = math_dtype(x);
  auto v = x.to(m);
  auto inner = kGeluBeta * (v + kGeluKappa * (v * v * v));
  return (0.5 * v * (1 + torch::tanh(inner))).to(x.scalar_type()).contiguous();
}

torch::Tensor gelu_tanh_forward(const torch::Tensor& x) {
  if (!x.is_cuda()) return gelu_tanh_forward_reference(x);
#ifdef TELETRON_WITH_CUDA
  check_kernel_dtype(x, "gelu_tanh_forward", "x");
  const c10::cuda::CUDAGuard guard(x.device());
  int64_t row_stride = gelu_row_stride(x);
  auto src = row_stride > 0 ? x : x.contiguous();
  if (row_stride == 0) row_stride = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  auto y = torch::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const cudaError_t status =
      kernels::gelu_tanh_forward(y.data_ptr(), src.data_ptr(), rows, cols, row_stride,
                                 x.scalar_type() == torch::kBFloat16, current_stream(x));
  TORCH_CHECK(status == cudaSuccess, "gelu_tanh_forward kernel launch failed: ", cudaGetErrorString(status));
  return y;
#else
  no_kernels("gelu_tanh_forward");
#endif
}

torch::Tensor gelu_tanh_backward_reference(const torch::Tensor& grad, const torch::Tensor& x) {
  TORCH_CHECK(grad.sizes() == x.sizes(), "gelu_tanh_backward: grad ", grad.sizes(), " vs x ", x.sizes());
  const auto m = math_dtype(x);
  auto v = x.to(m);
  auto x_sq = v * v;
  auto tanh_inner = torch::tanh(kGeluBeta * (v + kGeluKappa * (x_sq * v)));
  auto left_derivative = 0.5 * (1 + tanh_inner);
  auto right_derivative = 0.5 * v * (1 - tanh_inner * tanh_inner) * (kGeluBeta * (1 + 3 * kGeluKappa * x_sq));
  return (grad.to(m) * (left_derivative + right_derivative)).to(x.scalar_type()).contiguous();
}

namespace {

// gelu_tanh_backward, and with `value` also gelu_tanh(x) (dense) from the same pass.
std::pair<torch::Tensor, torch::Tensor> gelu_backward(const char* name, const torch::Tensor& grad,
                                                      const torch::Tensor& x, torch::Tensor out, bool value) {
  TORCH_CHECK(grad.sizes() == x.sizes(), name, ": grad ", grad.sizes(), " vs x ", x.sizes());
  TORCH_CHECK(!out.defined() || (out.sizes() == x.sizes() && out.scalar_type() == x.scalar_type() &&
                                 out.device() == x.device()),
              name, ": out must have x's shape, dtype and device");
  if (!x.is_cuda()) {
    torch::Tensor dx = gelu_tanh_backward_reference(grad, x);
    if (out.defined()) dx = out.copy_(dx);
    return {dx, value ? gelu_tanh_forward_reference(x) : torch::Tensor()};
  }
#ifdef TELETRON_WITH_CUDA
  check_kernel_dtype(x, name, "x");
  check_same(grad, x, name, "grad", "x");
  const c10::cuda::CUDAGuard guard(x.device());
  int64_t row_stride = gelu_row_stride(x);
  auto src = row_stride > 0 ? x : x.contiguous();
  if (row_stride == 0) row_stride = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t cols = x.dim() == 0 ? 1 : x.size(-1);
  const int64_t rows = cols == 0 ? 0 : x.numel() / cols;
  int64_t grad_stride = gelu_row_stride(grad);  // a column slice of a wider gradient reads in place
  auto gc = grad_stride > 0 ? grad : grad.contiguous();
  if (grad_stride == 0) grad_stride = cols;
  // out: written in place where its rows have one stride, else through a dense result.
  const int64_t out_stride = out.defined() ? gelu_row_stride(out) : 0;
  const auto dense = x.options().memory_format(at::MemoryFormat::Contiguous);
  auto dx = out_stride > 0 ? out : torch::empty(x.sizes(), dense);
  auto y = value ? torch::empty(x.sizes(), dense) : torch::Tensor();
  const cudaError_t status =
      kernels::gelu_tanh_backward(dx.data_ptr(), value ? y.data_ptr() : nullptr, gc.data_ptr(),
                                  src.data_ptr(), rows, cols, out_stride > 0 ? out_stride : cols, grad_stride,
                                  row_stride, x.scalar_type() == torch::kBFloat16, current_stream(x));
  TORCH_CHECK(status == cudaSuccess, name, " kernel launch failed: ", cudaGetErrorString(status));
  if (out.defined() && out_stride == 0) dx = out.copy_(dx);
  return {dx, y};
#else
  no_kernels(name);
#endif
}

}  // namespace

torch::Tensor gelu_tanh_backward(const torch::Tensor& grad, const torch::Tensor& x, torch::Tensor out) {
  return gelu_backward("gelu_tanh_backward", grad, x, std::move(out), false).first;
}

std::pair<torch::Tensor, torch::Tensor> gelu_tanh_backward_and_value(const torch::Tensor& grad,
                                                                     const torch::Tensor& x,
                                                                     torch::Tensor out) {
  return gelu_backward("gelu_tanh_backward_and_value", grad, x, std::move(out), true);
}

}  // namespace tt

// ---- optical flow: TV-L1 ----

#ifdef TELETRON_WITH_CUDA
#include "cuda/tvl1.cuh"
#endif

namespace tt {

torch::Tensor tvl1_refine(const torch::Tensor& i0, const torch::Tensor& i1, const torch::Tensor& flow,
                          double lambda, double theta, double tau, int64_t warps, int64_t iterations) {
  TORCH_CHECK(i0.dim() == 3 && i1.sizes() == i0.sizes(), "tvl1_refine: frames (B, H, W) of one shape, got ",
              i0.sizes(), " and ", i1.sizes());
  TORCH_CHECK(flow.dim() == 4 && flow.size(0) == i0.size(0) && flow.size(1) == 2 &&
                  flow.size(2) == i0.size(1) && flow.size(3) == i0.size(2),
              "tvl1_refine: flow (", i0.size(0), ", 2, ", i0.size(1), ", ", i0.size(2), ") expected, got ",
              flow.sizes());
  TORCH_CHECK(i0.is_cuda() && i1.device() == i0.device() && flow.device() == i0.device(),
              "tvl1_refine: frames and flow on one CUDA device (the CPU reference is pipeline's tvl1_flow)");
  TORCH_CHECK(i0.is_floating_point() && i1.is_floating_point() && flow.is_floating_point(),
              "tvl1_refine: floating-point frames and flow expected");
#ifdef TELETRON_WITH_CUDA
  const c10::cuda::CUDAGuard guard(i0.device());
  const torch::Tensor a = i0.to(torch::kFloat32).contiguous();
  const torch::Tensor b = i1.to(torch::kFloat32).contiguous();
  torch::Tensor u = flow.to(flow.options().dtype(torch::kFloat32), /*non_blocking=*/false, /*copy=*/true,
                            torch::MemoryFormat::Contiguous);  // refined in place: a copy of its own
  torch::Tensor p = torch::zeros({a.size(0), 4, a.size(1), a.size(2)}, a.options());
  torch::Tensor scratch = torch::empty_like(p);
  const kernels::Tvl1Params params{static_cast<float>(lambda), static_cast<float>(theta),
                                   static_cast<float>(tau), warps, iterations};
  const cudaError_t status = kernels::tvl1_refine(
      a.data_ptr<float>(), b.data_ptr<float>(), u.data_ptr<float>(), p.data_ptr<float>(),
      scratch.data_ptr<float>(), a.size(0), a.size(1), a.size(2), params, current_stream(a));
  TORCH_CHECK(status == cudaSuccess, "tvl1_refine kernel launch failed: ", cudaGetErrorString(status));
  return u;
#else
  (void)lambda, (void)theta, (void)tau, (void)warps, (void)iterations;
  no_kernels("tvl1_refine");
#endif
}

}  // namespace tt

// ---- a Linear's weight and bias gradients in one GEMM ----

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAContextLight.h>

#include "cuda/weight_grad.cuh"
#endif

namespace tt {
namespace {

// Rows of unit column stride `ld` apart (ld >= cols), or 0.
int64_t row_ld(const torch::Tensor& t, int64_t cols) {
  if (t.dim() != 2 || t.size(1) != cols) return 0;
  if (t.size(1) > 1 && t.stride(1) != 1) return 0;
  if (t.size(0) > 1 && t.stride(0) < cols) return 0;
  return std::max<int64_t>(t.size(0) > 1 ? t.stride(0) : cols, cols);
}

}  // namespace

bool weight_bias_grad(const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& weight_grad,
                      const torch::Tensor& bias_grad) {
#ifdef TELETRON_WITH_CUDA
  if (!grad.is_cuda() || grad.dim() != 2 || x.dim() != 2 || grad.size(0) != x.size(0)) return false;
  const auto half = grad.scalar_type();
  if ((half != torch::kBFloat16 && half != torch::kHalf) || x.scalar_type() != half) return false;
  const int64_t tokens = grad.size(0), out = grad.size(1), in = x.size(1);
  if (weight_grad.scalar_type() != torch::kFloat32 || weight_grad.dim() != 2 || weight_grad.size(0) != out)
    return false;
  if (bias_grad.defined() && (bias_grad.scalar_type() != torch::kFloat32 || bias_grad.dim() != 1 ||
                              bias_grad.size(0) != out || bias_grad.stride(0) != 1))
    return false;
  for (const torch::Tensor* t : {&x, &weight_grad, &bias_grad})
    if (t->defined() && t->device() != grad.device()) return false;
  const int64_t grad_ld = row_ld(grad, out), x_ld = row_ld(x, in), weight_ld = row_ld(weight_grad, in);
  if (grad_ld == 0 || x_ld == 0 || weight_ld == 0) return false;
  const c10::cuda::CUDAGuard guard(grad.device());
  kernels::LtContext lt;
  lt.handle = at::cuda::getCurrentCUDABlasLtHandle();
  lt.workspace = at::cuda::getCUDABlasLtWorkspace();
  lt.workspace_bytes = at::cuda::getCUDABlasLtWorkspaceSize();
  lt.stream = current_stream(grad);
  const cublasStatus_t status = kernels::weight_bias_grad(
      lt, grad.data_ptr(), grad_ld, x.data_ptr(), x_ld, tokens, out, in, half == torch::kBFloat16,
      weight_grad.data_ptr<float>(), weight_ld, bias_grad.defined() ? bias_grad.data_ptr<float>() : nullptr);
  if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;
  TORCH_CHECK(status == CUBLAS_STATUS_SUCCESS, "weight_bias_grad: cuBLASLt failed with status ",
              static_cast<int>(status));
  return true;
#else
  return false;
#endif
}

}  // namespace tt

// ---- adaLN modulation: LayerNorm, then shift + x̂ (1 + scale) ----

#ifdef TELETRON_WITH_CUDA
#include "cuda/layer_norm_modulate.cuh"
#endif

namespace tt {
namespace {

void layer_norm_modulate_check(const torch::Tensor& x, const torch::Tensor& scale, const char* name) {
  TORCH_CHECK(x.dim() == 3, name, ": expected x (B, N, C), got ", x.sizes());
  TORCH_CHECK(scale.dim() == 2 && scale.size(0) == x.size(0) && scale.size(1) == x.size(2), name,
              ": expected (B, C) = (", x.size(0), ", ", x.size(2), "), got ", scale.sizes());
}

}  // namespace

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_modulate_forward_reference(
    const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale, double eps) {
  layer_norm_modulate_check(x, shift, "layer_norm_modulate_forward");
  layer_norm_modulate_check(x, scale, "layer_norm_modulate_forward");
  auto [normed, mean, rstd] = at::native_layer_norm(x, {x.size(-1)}, {}, {}, eps);
  return {torch::addcmul(shift.unsqueeze(1), normed, 1 + scale.unsqueeze(1)), mean, rstd};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_modulate_forward(
    const torch::Tensor& x, const torch::Tensor& shift, const torch::Tensor& scale, double eps) {
  if (!x.is_cuda()) return layer_norm_modulate_forward_reference(x, shift, scale, eps);
#ifdef TELETRON_WITH_CUDA
  const char* name = "layer_norm_modulate_forward";
  layer_norm_modulate_check(x, shift, name);
  layer_norm_modulate_check(x, scale, name);
  check_kernel_dtype(x, name, "x");
  check_same(x, shift, name, "x", "shift");
  check_same(x, scale, name, "x", "scale");
  TORCH_CHECK(x.size(2) <= kernels::kLayerNormModulateMaxChannels, name, ": ", x.size(2),
              " channels are more than the kernel's ", kernels::kLayerNormModulateMaxChannels);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous(), shift_c = shift.contiguous(), scale_c = scale.contiguous();
  auto m = torch::empty_like(xc);
  auto mean = torch::empty({x.size(0), x.size(1), 1}, x.options().dtype(torch::kFloat32));
  auto rstd = torch::empty_like(mean);
  const cudaError_t status = kernels::layer_norm_modulate_forward(
      m.data_ptr(), mean.data_ptr<float>(), rstd.data_ptr<float>(), xc.data_ptr(), shift_c.data_ptr(),
      scale_c.data_ptr(), x.size(0), x.size(1), x.size(2), static_cast<float>(eps),
      x.scalar_type() == torch::kBFloat16, current_stream(x));
  TORCH_CHECK(status == cudaSuccess, name, " kernel launch failed: ", cudaGetErrorString(status));
  return {m, mean, rstd};
#else
  no_kernels("layer_norm_modulate_forward");
#endif
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_modulate_backward_reference(
    const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& mean,
    const torch::Tensor& rstd) {
  layer_norm_modulate_check(x, scale, "layer_norm_modulate_backward");
  TORCH_CHECK(grad.sizes() == x.sizes(), "layer_norm_modulate_backward: grad ", grad.sizes(), " vs x ",
              x.sizes());
  const auto normed = ((x.to(mean.scalar_type()) - mean) * rstd).to(x.scalar_type());
  const auto grad_normed = (grad * (1 + scale.unsqueeze(1))).to(x.scalar_type());
  auto dx = std::get<0>(
      at::native_layer_norm_backward(grad_normed, x, {x.size(-1)}, mean, rstd, {}, {}, {true, false, false}));
  return {dx, grad.sum(1), (grad * normed).sum(1)};
}

std::tuple<torch::Tensor, torch::Tensor, torch::Tensor> layer_norm_modulate_backward(
    const torch::Tensor& grad, const torch::Tensor& x, const torch::Tensor& scale, const torch::Tensor& mean,
    const torch::Tensor& rstd) {
  if (!x.is_cuda()) return layer_norm_modulate_backward_reference(grad, x, scale, mean, rstd);
#ifdef TELETRON_WITH_CUDA
  const char* name = "layer_norm_modulate_backward";
  layer_norm_modulate_check(x, scale, name);
  TORCH_CHECK(grad.sizes() == x.sizes(), name, ": grad ", grad.sizes(), " vs x ", x.sizes());
  check_kernel_dtype(x, name, "x");
  check_same(x, grad, name, "x", "grad");
  check_same(x, scale, name, "x", "scale");
  TORCH_CHECK(mean.scalar_type() == torch::kFloat32 && rstd.scalar_type() == torch::kFloat32 &&
                  mean.numel() == x.size(0) * x.size(1) && rstd.numel() == mean.numel(),
              name, ": expected mean and rstd (B, N, 1) fp32");
  TORCH_CHECK(x.size(2) <= kernels::kLayerNormModulateMaxChannels, name, ": ", x.size(2),
              " channels are more than the kernel's ", kernels::kLayerNormModulateMaxChannels);
  const c10::cuda::CUDAGuard guard(x.device());
  const auto xc = x.contiguous(), gc = grad.contiguous(), scale_c = scale.contiguous();
  const auto mean_c = mean.contiguous(), rstd_c = rstd.contiguous();
  auto dx = torch::empty_like(xc);
  auto dshift = torch::empty({x.size(0), x.size(2)}, x.options());
  auto dscale = torch::empty_like(dshift);
  auto scratch = torch::empty({kernels::layer_norm_modulate_scratch_size(x.size(0), x.size(1), x.size(2))},
                              x.options().dtype(torch::kFloat32));
  const cudaError_t status = kernels::layer_norm_modulate_backward(
      dx.data_ptr(), dshift.data_ptr(), dscale.data_ptr(), gc.data_ptr(), xc.data_ptr(), scale_c.data_ptr(),
      mean_c.data_ptr<float>(), rstd_c.data_ptr<float>(), scratch.data_ptr<float>(), x.size(0), x.size(1),
      x.size(2), x.scalar_type() == torch::kBFloat16, current_stream(x));
  TORCH_CHECK(status == cudaSuccess, name, " kernel launch failed: ", cudaGetErrorString(status));
  return {dx, dshift, dscale};
#else
  no_kernels("layer_norm_modulate_backward");
#endif
}

}  // namespace tt
