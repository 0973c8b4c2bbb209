// Segment (variable-length) joint attention: see segment_attention.h.
#include "model/segment_attention.h"

#include <ATen/autocast_mode.h>
#include <torch/torch.h>

#include "core/errors.h"

#ifdef TELETRON_WITH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace tt {

torch::Tensor segment_offsets(const torch::Tensor& lengths, int64_t tokens) {
  TT_ASSERT(lengths.dim() == 1, "segment_offsets: lengths must be (B), got ", lengths.sizes());
  const int64_t batch = lengths.size(0);
  auto valid = lengths.to(torch::kInt32).clamp(0, tokens);
  // Per sample, the two segment lengths: its valid tokens, then its padding.
  auto pieces = torch::stack({valid, tokens - valid}, 1).flatten();  // (2B)
  auto offsets = torch::zeros({2 * batch + 1}, valid.options());
  offsets.slice(0, 1).copy_(pieces.cumsum(0, torch::kInt32));
  return offsets;
}

namespace {

// The dtype the kernels run in: the autocast dtype when autocast is on for q's device type.
torch::ScalarType attention_dtype(const torch::Tensor& q) {
  const auto device_type = q.device().type();
  if (q.is_floating_point() && at::autocast::is_autocast_enabled(device_type))
    return at::autocast::get_autocast_dtype(device_type);
  return q.scalar_type();
}

}  // namespace

bool segment_attention_takes(const torch::Tensor& q) {
  if (!q.is_cuda() || q.dim() != 4) return false;
  const auto dtype = attention_dtype(q);
  const int64_t d = q.size(3);
  if (!((dtype == torch::kBFloat16 || dtype == torch::kHalf) && d % 8 == 0 && d <= 256)) return false;
#ifdef TELETRON_WITH_CUDA
  // Flash attention's kernels need sm_80 or newer; older GPUs keep the masked path.
  return at::cuda::getDeviceProperties(q.device().index())->major >= 8;
#else
  return false;
#endif
}

torch::Tensor segment_attention_reference(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                          const torch::Tensor& offsets) {
  TT_ASSERT(q.dim() == 4 && k.sizes() == q.sizes() && v.sizes() == q.sizes(),
            "segment_attention: q, k, v must be (B, H, S, D) alike, got ", q.sizes(), k.sizes(), v.sizes());
  const int64_t batch = q.size(0), tokens = q.size(2);
  TT_ASSERT(offsets.dim() == 1 && offsets.size(0) == 2 * batch + 1, "segment_attention: offsets must be (2B + 1)");
  // Position p of sample b lies in its first segment (valid) when p < offsets[2b + 1] - b S.
  auto local = offsets.slice(0, 1, 2 * batch + 1, 2).to(torch::kLong) -
               torch::arange(batch, offsets.options().dtype(torch::kLong)) * tokens;  // (B) valid lengths
  auto position = torch::arange(tokens, local.options()).unsqueeze(0);                // (1, S)
  auto is_valid = position < local.unsqueeze(1);                                      // (B, S)
  // Same segment: both valid or both padding.
  auto same = is_valid.unsqueeze(2) == is_valid.unsqueeze(1);  // (B, S, S)
  auto out = at::scaled_dot_product_attention(q, k, v, same.to(q.device()).unsqueeze(1));
  return out.transpose(1, 2).flatten(2, 3);
}

torch::Tensor segment_attention(const torch::Tensor& q, const torch::Tensor& k, const torch::Tensor& v,
                                const torch::Tensor& offsets) {
  if (!segment_attention_takes(q)) return segment_attention_reference(q, k, v, offsets);
  TT_ASSERT(k.sizes() == q.sizes() && v.sizes() == q.sizes(), "segment_attention: q, k, v must be alike, got ",
            q.sizes(), k.sizes(), v.sizes());
  const int64_t batch = q.size(0), heads = q.size(1), tokens = q.size(2), d = q.size(3);
  TT_ASSERT(offsets.is_cuda() && offsets.scalar_type() == torch::kInt32 && offsets.size(0) == 2 * batch + 1,
            "segment_attention: offsets must be (2B + 1) int32 on the device");
  const auto dtype = attention_dtype(q);
  // (B, H, S, D) -> (B S, H, D): the packed layout of the variable-length kernels, made contiguous.
  // With B = 1 a reshape alone is a strided view (head stride S D), the kernel's output takes the
  // same strides, and the (B, S, H D) view below would fail: 1b runs at batch 1 hit that.
  auto packed = [&](const torch::Tensor& t) {
    return t.to(dtype).transpose(1, 2).contiguous().view({batch * tokens, heads, d});
  };
  auto result = at::_flash_attention_forward(packed(q), packed(k), packed(v), offsets, offsets, tokens, tokens,
                                             /*dropout_p=*/0.0, /*is_causal=*/false, /*return_debug_mask=*/false);
  return std::get<0>(result).view({batch, tokens, heads * d});
}

}  // namespace tt
