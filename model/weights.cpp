// Strict name-based weight transfer (see weights.h).
#include "model/weights.h"

#include <torch/torch.h>


#include "core/errors.h"
#include "core/file_io.h"

namespace tt {

safetensors::TensorMap snapshot_weights(const std::map<std::string, torch::Tensor>& tensors) {
  safetensors::TensorMap weights;
  for (const auto& [name, tensor] : tensors) {
    // bf16 master weights stay bf16: exact, and half the file.
    const auto dtype = tensor.scalar_type() == torch::kBFloat16 ? torch::kBFloat16 : torch::kFloat32;
    weights[name] = tensor.detach().to(torch::kCPU, dtype).clone();
  }
  return weights;
}

std::string list_lines(const char* label, const std::vector<std::string>& lines) {
  std::string out;
  const size_t shown = std::min<size_t>(lines.size(), 20);
  for (size_t i = 0; i < shown; ++i) out += str_cat("\n  ", label, ": ", lines[i]);
  if (lines.size() > shown) out += str_cat("\n  ", label, ": ... and ", lines.size() - shown, " more");
  return out;
}

void throw_if_weights_mismatch(const std::string& source, const std::vector<std::string>& missing,
                               const std::vector<std::string>& unexpected,
                               const std::vector<std::string>& misshaped) {
  if (missing.empty() && unexpected.empty() && misshaped.empty()) return;
  throw Error(ErrorCode::kCheckpoint,
              str_cat(source, ": weights do not match the model (", missing.size(), " missing, ", unexpected.size(),
                      " unexpected, ", misshaped.size(), " mis-shaped)", list_lines("missing", missing),
                      list_lines("unexpected", unexpected), list_lines("mis-shaped", misshaped)),
              "the checkpoint was written for another model configuration: compare its config.json (or the "
              "run's config.resolved.yaml) with tele_tron.model");
}

void load_weights_into(const std::map<std::string, torch::Tensor>& destinations,
                       const safetensors::TensorMap& weights, const std::string& source) {
  std::vector<std::string> missing, unexpected, misshaped;
  for (const auto& [name, target] : destinations) {
    auto found = weights.find(name);
    if (found == weights.end()) {
      missing.push_back(name);
    } else if (found->second.sizes() != target.sizes()) {
      misshaped.push_back(str_cat(name, " is ", shape_string(found->second.sizes().vec()), " in the checkpoint, ",
                                  shape_string(target.sizes().vec()), " in the model"));
    }
  }
  for (const auto& [name, tensor] : weights) {
    if (destinations.count(name) == 0) unexpected.push_back(name);
  }
  throw_if_weights_mismatch(source, missing, unexpected, misshaped);
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : destinations) {
    const torch::Tensor& stored = weights.at(name);
    TT_CHECK_HINT(stored.is_floating_point() || !tensor.is_floating_point(), ErrorCode::kCheckpoint,
                  "use the model's own weights file (floating point)", source, ": ", name, " is ",
                  stored.scalar_type(), ", not floating point");
    torch::Tensor target = tensor;  // a handle: copy_ writes the parameter (or its view) in place
    target.copy_(stored);
    // A NaN in the weights would otherwise surface later as a non-finite loss or output.
    TT_CHECK_HINT(!target.is_floating_point() || torch::isfinite(target).all().item<bool>(), ErrorCode::kCheckpoint,
                  "the weights file is damaged or was saved from a diverged run: use another checkpoint", source,
                  ": ", name, " holds non-finite values (NaN or infinity)");
  }
}

}  // namespace tt
