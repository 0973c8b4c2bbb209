// A small HunyuanVideo configuration, inputs for it and randomised weights, shared by the model
// tests (every block kind present, cheap on two CPU cores).
#pragma once

#include <torch/torch.h>

#include <algorithm>
#include <limits>
#include <map>
#include <string>

#include "model/transformer.h"

namespace tt::test {

/// hidden 32 (2 heads x 16), RoPE (4, 6, 6), 1 double + 1 single + 1 refiner block, text 12/8.
inline HunyuanVideoConfig small_model_config() {
  HunyuanVideoConfig c = hunyuan_preset("tiny");
  c.num_attention_heads = 2;
  c.attention_head_dim = 16;
  c.rope_axes_dim = {4, 6, 6};
  c.num_layers = 1;
  c.num_single_layers = 1;
  c.num_refiner_layers = 1;
  c.text_embed_dim = 12;
  c.pooled_projection_dim = 8;
  return c;
}

/// Latents (batch, C, 2, 4, 6), `length` text tokens with sample 0 right-padded to length / 2.
inline TransformerInputs small_model_inputs(const HunyuanVideoConfig& c, int64_t batch, int64_t length) {
  torch::manual_seed(7);
  TransformerInputs in;
  in.hidden_states = torch::randn({batch, c.in_channels, 2, 4, 6});
  in.timestep = torch::tensor({250.0f, 900.0f}).slice(0, 0, batch);
  in.encoder_hidden_states = torch::randn({batch, length, c.text_embed_dim});
  in.encoder_attention_mask = torch::ones({batch, length}, torch::kBool);
  in.encoder_attention_mask[0].slice(0, length / 2).fill_(false);  // right padding in sample 0
  in.pooled_projections = torch::randn({batch, c.pooled_projection_dim});
  in.guidance = torch::full({batch}, 1000.0f);
  return in;
}

/// Random values for every parameter (N(0, 0.2²) from `seed`), so the zero-initialised
/// modulations and final layer do not hide any path.
inline void randomise_weights(HunyuanVideoTransformer& model, uint64_t seed) {
  torch::NoGradGuard no_grad;
  torch::manual_seed(seed);
  for (auto& p : model->parameters()) p.copy_(torch::randn_like(p) * 0.2);
}

/// A model of `c` with randomise_weights(`seed`) on `device`, training, every block checkpointed:
/// what the recompute tests (LoRA's skipped GEMMs, kept attention) step.
inline HunyuanVideoTransformer checkpointed_model_on(const HunyuanVideoConfig& c, const torch::Device& device,
                                                    uint64_t seed) {
  HunyuanVideoTransformer model(c);
  randomise_weights(model, seed);
  model->to(device);
  model->train();
  model->set_activation_checkpointing(1);
  return model;
}

/// The inputs' tensors moved to `device`.
inline TransformerInputs inputs_on(TransformerInputs in, const torch::Device& device) {
  for (torch::Tensor* t : {&in.hidden_states, &in.timestep, &in.encoder_hidden_states, &in.encoder_attention_mask,
                           &in.pooled_projections, &in.guidance})
    if (t->defined()) *t = t->to(device);
  return in;
}

/// Per gradient of `want`, |got - want| against |want|, or against 1 % of the largest gradient norm
/// when that is larger: some gradients are 0 in exact arithmetic and only rounding noise (the token
/// refiner's to_k.bias: one vector added to every key shifts each query's logits by a constant,
/// which softmax ignores), and two noises differ by O(1) of themselves. A wrong computation still
/// moves any gradient above that floor by O(1). Keys missing from `got` map to infinity.
inline std::map<std::string, double> gradient_errors(const std::map<std::string, torch::Tensor>& got,
                                                     const std::map<std::string, torch::Tensor>& want) {
  double largest = 0;
  for (const auto& [key, grad] : want)
    if (grad.defined()) largest = std::max(largest, grad.to(torch::kFloat64).norm().item<double>());
  std::map<std::string, double> errors;
  for (const auto& [key, grad] : want) {
    if (!grad.defined()) continue;
    auto found = got.find(key);
    if (found == got.end() || !found->second.defined()) {
      errors[key] = std::numeric_limits<double>::infinity();
      continue;
    }
    const double norm = grad.to(torch::kFloat64).norm().item<double>();
    const double diff = (found->second.to(torch::kFloat64) - grad.to(torch::kFloat64)).norm().item<double>();
    errors[key] = diff / std::max({norm, 1e-2 * largest, 1e-30});
  }
  return errors;
}

}  // namespace tt::test
