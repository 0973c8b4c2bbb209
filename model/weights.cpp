// Strict name-based weight transfer (see weights.h).
#include "model/weights.h"

#include <torch/torch.h>

#include <sstream>

#include "core/errors.h"

namespace tt {

safetensors::TensorMap snapshot_weights(const std::map<std::string, torch::Tensor>& tensors) {
  safetensors::TensorMap weights;
  for (const auto& [name, tensor] : tensors) {
    weights[name] = tensor.detach().to(torch::kCPU, torch::kFloat32).clone();
  }
  return weights;
}

void load_weights_into(const std::map<std::string, torch::Tensor>& destinations,
                       const safetensors::TensorMap& weights, const std::string& source) {
  std::vector<std::string> missing, unexpected, misshaped;
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
  for (const auto& [name, tensor] : destinations) check(name, tensor);
  for (const auto& [name, tensor] : weights) {
    if (destinations.count(name) == 0) unexpected.push_back(name);
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
  for (const auto& [name, tensor] : destinations) {
    torch::Tensor target = tensor;  // a handle: copy_ writes the parameter (or its view) in place
    target.copy_(weights.at(name));
  }
}

}  // namespace tt
