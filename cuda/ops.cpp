// The only torch <-> kernel boundary: argument checks, current stream, output allocation, and the
// CPU references the [gpu] tests compare against.
#include "cuda/ops.h"

#include <torch/torch.h>

#ifdef TELETRON_WITH_CUDA
#include <c10/cuda/CUDAStream.h>

#include "cuda/flow_matching.cuh"
#endif

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
  TORCH_CHECK(sigmas.dim() == 1 && sigmas.size(0) == x0.size(0), "flow_matching_mix: sigmas must be (B), got ",
              sigmas.sizes());
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
                                                  a.data_ptr<float>(), e.data_ptr<float>(), s.data_ptr<float>(),
                                                  total, per_sample, stream.stream());
  TORCH_CHECK(status == cudaSuccess, "flow_matching_mix kernel launch failed: ", cudaGetErrorString(status));
  return {noisy, target};
#else
  TORCH_CHECK(false, "flow_matching_mix: teletron was built without CUDA kernels (TELETRON_CUDA=OFF)");
#endif
}

}  // namespace tt
