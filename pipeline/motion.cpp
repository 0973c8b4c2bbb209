// Motion scores from optical flow (see motion.h).
#include "pipeline/motion.h"

#include <torch/nn/functional.h>
#include <torch/torch.h>

#include <algorithm>
#include <cmath>

#include "core/errors.h"

namespace tt {

namespace F = torch::nn::functional;

std::vector<int64_t> motion_pair_starts(int64_t frames, int64_t pairs) {
  std::vector<int64_t> starts;
  if (frames < 2 || pairs < 1) return starts;
  const int64_t last = frames - 2;  // the last first frame that has a next frame
  const int64_t count = std::min(pairs, last + 1);
  for (int64_t k = 0; k < count; ++k) {
    // The middle of stratum k of `count` equal strata over [0, last].
    const double middle = (static_cast<double>(k) + 0.5) * static_cast<double>(last + 1) / static_cast<double>(count);
    starts.push_back(std::min<int64_t>(last, static_cast<int64_t>(std::floor(middle))));
  }
  return starts;
}

torch::Tensor motion_frames(const torch::Tensor& frames, int64_t short_side) {
  TT_CHECK(short_side >= 16, ErrorCode::kConfig, "motion: the working resolution's short side must be >= 16, got ",
           short_side);
  TT_CHECK((frames.dim() == 3 || (frames.dim() == 4 && frames.size(1) == 3)) && frames.size(-1) >= 2 &&
               frames.size(-2) >= 2,
           ErrorCode::kData, "motion: frames (N, H, W) or (N, 3, H, W) are needed, got ", frames.sizes());
  torch::Tensor x = frames.scalar_type() == torch::kUInt8 ? frames.to(torch::kFloat32) / 255.0
                                                          : frames.to(torch::kFloat32);
  if (x.dim() == 4) {
    const torch::Tensor luma = torch::tensor({0.2126f, 0.7152f, 0.0722f}, x.options()).view({1, 3, 1, 1});
    x = (x * luma).sum(1);
  }
  const int64_t h = x.size(1), w = x.size(2);
  const double scale = static_cast<double>(short_side) / static_cast<double>(std::min(h, w));
  const auto nh = std::max<int64_t>(2, std::lround(static_cast<double>(h) * scale));
  const auto nw = std::max<int64_t>(2, std::lround(static_cast<double>(w) * scale));
  if (nh == h && nw == w) return x;
  return F::interpolate(x.unsqueeze(1), F::InterpolateFuncOptions()
                                            .size(std::vector<int64_t>{nh, nw})
                                            .mode(torch::kBilinear)
                                            .align_corners(false)
                                            .antialias(scale < 1.0))
      .squeeze(1);
}

double motion_score(const torch::Tensor& first, const torch::Tensor& second, const std::vector<int64_t>& gaps,
                    const MotionOptions& options) {
  TT_CHECK(first.dim() == 3 && first.sizes() == second.sizes() && first.size(0) > 0 &&
               static_cast<size_t>(first.size(0)) == gaps.size(),
           ErrorCode::kData, "motion: K pairs of (h, w) frames and K gaps are needed, got ", first.sizes(), ", ",
           second.sizes(), " and ", gaps.size(), " gaps");
  const torch::Tensor flow = tvl1_flow(first, second, options.tvl1);  // (K, 2, h, w)
  const torch::Tensor magnitude = torch::sqrt((flow * flow).sum(1)).mean({1, 2}).to(torch::kFloat64).cpu();
  double total = 0;
  for (size_t k = 0; k < gaps.size(); ++k) {
    TT_CHECK(gaps[k] >= 1, ErrorCode::kData, "motion: pair ", k, " has a frame gap of ", gaps[k]);
    total += magnitude[static_cast<int64_t>(k)].item<double>() / static_cast<double>(gaps[k]);
  }
  return total / static_cast<double>(gaps.size());
}

}  // namespace tt
