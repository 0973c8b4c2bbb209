// Strict name-based weight transfer (see weights.h).
#include "model/weights.h"

#include <torch/torch.h>

#include <sstream>

#include "core/errors.h"

namespace tt {

safetensors::TensorMap module_weights(const torch::nn::Module& module) {
  safetensors::TensorMap weights;
  for (const auto& item : module.named_parameters(/*recurse=*/true)) {
    weights[item.key()] = item.value().detach().to(torch::kCPU, torch::kFloat32).clone();
  }
  for (const auto& item : module.named_buffers(/*recurse=*/true)) {
    weights[item.key()] = item.value().detach().to(torch::kCPU).clone();
  }
  return weights;
}

void load_module_weights(torch::nn::Module& module, const safetensors::TensorMap& weights,
                         const std::string& source) {
  std::vector<std::string> missing, unexpected, misshaped;
  auto params = module.named_parameters(/*recurse=*/true);
  auto buffers = module.named_buffers(/*recurse=*/true);
  auto check = [&](const std::string& name, const torch::Tensor& target) {
    auto found = weights.find(name);
    if (found == weights.end()) {
      missing.push_back(name);
    } else if (found->second.sizes() != target.sizes()) {
      std::ostringstream line;
      line << name << " " << found->second.sizes() << " (expected " << target.sizes() << ")";
      misshaped.push_back(line.str());
    }
  };
  for (const auto& item : params) check(item.key(), item.value());
  for (const auto& item : buffers) check(item.key(), item.value());
  for (const auto& [name, tensor] : weights) {
    if (params.find(name) == nullptr && buffers.find(name) == nullptr) unexpected.push_back(name);
  }
  if (!missing.empty() || !unexpected.empty() || !misshaped.empty()) {
    std::ostringstream message;
    message << source << ": weights do not match the model (" << missing.size() << " missing, "
            << unexpected.size() << " unexpected, " << misshaped.size() << " mis-shaped)";
    auto list = [&](const char* label, const std::vector<std::string>& names) {
      const size_t shown = std::min<size_t>(names.size(), 20);
      for (size_t i = 0; i < shown; ++i) message << "\n  " << label << ": " << names[i];
      if (names.size() > shown) message << "\n  " << label << ": ... and " << names.size() - shown << " more";
    };
    list("missing", missing);
    list("unexpected", unexpected);
    list("mis-shaped", misshaped);
    throw Error(ErrorCode::kCheckpoint, message.str(),
                "the checkpoint was written for another model configuration; check tele_tron.model");
  }
  torch::NoGradGuard no_grad;
  for (auto& item : params) item.value().copy_(weights.at(item.key()));
  for (auto& item : buffers) item.value().copy_(weights.at(item.key()));
}

}  // namespace tt
