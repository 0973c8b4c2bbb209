// 3D RoPE tables and rotation (see rope.h).
#include "model/rope.h"

#include <torch/torch.h>

namespace tt {
namespace {

// (N) positions -> (N, dim) angles, each frequency repeated twice (interleaved pairs).
torch::Tensor axis_angles(const torch::Tensor& positions, int64_t dim, double theta) {
  auto j = torch::arange(0, dim, 2, positions.options()).slice(0, 0, dim / 2);
  auto freqs = 1.0 / torch::pow(theta, j / static_cast<double>(dim));  // (dim/2)
  auto angles = torch::outer(positions, freqs);                        // (N, dim/2)
  return angles.repeat_interleave(2, 1);                              // (N, dim)
}

}  // namespace

RopeTable build_rope_table(int64_t frames, int64_t height, int64_t width,
                           const std::vector<int64_t>& axes_dim, double theta,
                           const torch::Device& device) {
  torch::NoGradGuard no_grad;
  auto options = torch::TensorOptions().dtype(torch::kFloat32).device(device);
  auto grids = torch::meshgrid({torch::arange(frames, options), torch::arange(height, options),
                                torch::arange(width, options)},
                               "ij");
  std::vector<torch::Tensor> parts;
  for (int axis = 0; axis < 3; ++axis) {
    parts.push_back(axis_angles(grids[axis].reshape({-1}), axes_dim[axis], theta));
  }
  auto angles = torch::cat(parts, 1);  // (N, head_dim)
  auto pair_angles = angles.slice(1, 0, angles.size(1), 2);  // (N, head_dim/2)
  auto freqs = torch::polar(torch::ones_like(pair_angles), pair_angles).contiguous();
  return RopeTable{torch::cos(angles).contiguous(), torch::sin(angles).contiguous(), freqs};
}

torch::Tensor apply_rope(const torch::Tensor& x, const RopeTable& table) {
  // (x_r + i x_i)(cos + i sin) = (x_r cos - x_i sin) + i (x_i cos + x_r sin)
  auto pairs = torch::view_as_complex(x.to(torch::kFloat32).unflatten(-1, {-1, 2}));  // (..., D/2)
  return torch::view_as_real(pairs * table.freqs).flatten(-2).to(x.scalar_type());
}

const RopeTable& RopeCache::get(int64_t frames, int64_t height, int64_t width,
                                const torch::Device& device) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_tuple(frames, height, width, device.str());
  auto found = tables_.find(key);
  if (found != tables_.end()) return found->second;
  auto table = build_rope_table(frames, height, width, axes_dim_, theta_, device);
  return tables_.emplace(key, std::move(table)).first->second;
}

}  // namespace tt
