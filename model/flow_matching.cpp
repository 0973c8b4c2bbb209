// Flow-matching sigma sampling and noising (see flow_matching.h).
#include "model/flow_matching.h"

#include <torch/torch.h>

#include "core/errors.h"
#include "cuda/keyed_random.h"
#include "cuda/ops.h"

namespace tt {

torch::Tensor shift_sigmas(const torch::Tensor& sigmas, double shift) {
  return shift * sigmas / (1.0 + (shift - 1.0) * sigmas);
}

torch::Tensor sample_keys(int64_t step, int64_t first, int64_t count, torch::Device device) {
  TT_ASSERT(step >= 0 && step < (int64_t{1} << 31), "sample_keys: step ", step, " out of range");
  TT_ASSERT(first >= 0 && count >= 0 && first + count <= (int64_t{1} << 32), "sample_keys: samples ", first, "+",
            count, " out of range");
  const int64_t base = (step << 32) + first;
  return torch::arange(base, base + count, torch::TensorOptions().dtype(torch::kInt64).device(device));
}

torch::Tensor sample_keys(const torch::Tensor& step, int64_t first, int64_t count) {
  TT_ASSERT(step.dim() == 0 && step.scalar_type() == torch::kInt64, "sample_keys: expected a 0-d int64 step, got ",
            step.sizes(), " ", step.scalar_type());
  TT_ASSERT(first >= 0 && count >= 0 && first + count <= (int64_t{1} << 32), "sample_keys: samples ", first, "+",
            count, " out of range");
  const auto options = torch::TensorOptions().dtype(torch::kInt64).device(step.device());
  return torch::arange(first, first + count, options) + step * (int64_t{1} << 32);
}

torch::Tensor sample_sigmas(const torch::Tensor& keys, const FlowMatchingOptions& options, uint64_t seed) {
  torch::Tensor sigmas;
  if (options.sampling == TimestepSampling::kLogitNormal) {
    const torch::Tensor normal = keyed_normal(keys, {}, seed, keyed::kSigmaNormal);
    sigmas = torch::sigmoid(normal * options.logit_std + options.logit_mean);
  } else {
    sigmas = keyed_uniform(keys, {}, seed, keyed::kSigmaUniform);
  }
  return shift_sigmas(sigmas, options.shift);
}

FlowMatchingSample make_flow_matching_sample(const torch::Tensor& x0, const FlowMatchingOptions& options,
                                             const torch::Tensor& keys, uint64_t seed) {
  TT_ASSERT(keys.dim() == 1 && keys.size(0) == x0.size(0) && keys.device() == x0.device(),
            "make_flow_matching_sample: keys ", keys.sizes(), " on ", keys.device().str(), " for x0 ", x0.sizes(),
            " on ", x0.device().str());
  FlowMatchingSample sample;
  sample.sigmas = sample_sigmas(keys, options, seed);
  const torch::Tensor noise = keyed_normal(keys, x0.sizes().slice(1), seed, keyed::kNoise);
  auto mixed = flow_matching_mix(x0.to(torch::kFloat32), noise, sample.sigmas);
  sample.noisy = mixed.first;
  sample.target = mixed.second;
  return sample;
}

}  // namespace tt
