// Flow-matching sigma sampling and noising (see flow_matching.h).
#include "model/flow_matching.h"

#include <torch/torch.h>

#include "cuda/ops.h"

namespace tt {

torch::Tensor shift_sigmas(const torch::Tensor& sigmas, double shift) {
  return shift * sigmas / (1.0 + (shift - 1.0) * sigmas);
}

torch::Tensor sample_sigmas(int64_t batch, const FlowMatchingOptions& options, at::Generator& generator) {
  auto tensor_options = torch::TensorOptions().dtype(torch::kFloat32).device(generator.device());
  torch::Tensor sigmas;
  if (options.sampling == TimestepSampling::kLogitNormal) {
    auto normal = at::normal(options.logit_mean, options.logit_std, {batch}, generator, tensor_options);
    sigmas = torch::sigmoid(normal);
  } else {
    sigmas = at::rand({batch}, generator, tensor_options);
  }
  return shift_sigmas(sigmas, options.shift);
}

FlowMatchingSample make_flow_matching_sample(const torch::Tensor& x0, const FlowMatchingOptions& options,
                                             at::Generator& generator) {
  FlowMatchingSample sample;
  sample.sigmas = sample_sigmas(x0.size(0), options, generator);
  auto noise = at::randn(x0.sizes(), generator, x0.options().dtype(torch::kFloat32));
  auto mixed = flow_matching_mix(x0.to(torch::kFloat32), noise, sample.sigmas);
  sample.noisy = mixed.first;
  sample.target = mixed.second;
  return sample;
}

}  // namespace tt
