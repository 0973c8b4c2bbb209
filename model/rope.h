// 3D rotary position embedding of HunyuanVideo: positions on the patched latent grid (T', H', W'),
// per-axis dims (16, 56, 56 in the released model), theta 256, frequencies theta^(-2j/d), cos/sin
// repeated interleaved so each pair (x_2j, x_2j+1) rotates together. Computed in fp32 and cached
// per grid shape, outside autograd.
#pragma once

#include <torch/types.h>

#include <map>
#include <mutex>
#include <tuple>
#include <vector>

namespace tt {

struct RopeTable {
  torch::Tensor cos;    // (T'*H'*W', head_dim) fp32, each pair's angle repeated
  torch::Tensor sin;    // (T'*H'*W', head_dim) fp32
  torch::Tensor freqs;  // (T'*H'*W', head_dim/2) complex64 = cos + i sin, one per pair
};

/// Builds the table for a (frames, height, width) token grid (row-major T, H, W order, the order
/// Conv3d patches flatten in).
RopeTable build_rope_table(int64_t frames, int64_t height, int64_t width,
                           const std::vector<int64_t>& axes_dim, double theta,
                           const torch::Device& device);

/// Rotates x (B, H, N, D) by the table: each pair (x_2j, x_2j+1) as one complex number times
/// freqs (one fp32 complex multiply instead of cos/sin/stack arithmetic); result in x's dtype.
torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& table);

/// Thread-safe per-(grid, device) cache of RoPE tables.
class RopeCache {
 public:
  RopeCache(std::vector<int64_t> axes_dim, double theta) : axes_dim_(std::move(axes_dim)), theta_(theta) {}
  const RopeTable& get(int64_t frames, int64_t height, int64_t width, const torch::Device& device);

 private:
  std::vector<int64_t> axes_dim_;
  double theta_;
  std::mutex mutex_;
  std::map<std::tuple<int64_t, int64_t, int64_t, std::string>, RopeTable> tables_;
};

}  // namespace tt
