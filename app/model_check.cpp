// One forward pass on named inputs (see model_check.h).
#include "app/model_check.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>

#include "core/autocast.h"
#include "app/model_setup.h"
#include "core/device.h"
#include "core/errors.h"
#include "core/safetensors.h"
#include "model/transformer.h"

namespace tt {
namespace {

torch::Tensor input(const safetensors::TensorMap& inputs, const std::string& name, const std::string& path,
                    bool required) {
  auto found = inputs.find(name);
  if (found == inputs.end()) {
    TT_CHECK_HINT(!required, ErrorCode::kData,
                  "the inputs follow diffusers' forward: hidden_states, timestep, encoder_hidden_states, "
                  "encoder_attention_mask, pooled_projections, guidance",
                  path, ": input `", name, "` missing");
    return torch::Tensor();
  }
  return found->second;
}

}  // namespace

void run_model_check(const ModelCheckOptions& o) {
  torch::NoGradGuard no_grad;
  TT_CHECK(o.dtype == "fp32" || o.dtype == "bf16", ErrorCode::kConfig, "--dtype: expected fp32 or bf16, got ", o.dtype);
  const torch::Device device = resolve_device(o.device, "--device");
  TT_CHECK(o.dtype == "fp32" || device.is_cuda(), ErrorCode::kConfig, "--dtype bf16 needs --device cuda");
  ModelChoice choice = choose_model(o.config.model, o.weights);
  HunyuanVideoTransformer model(choice.config, device, torch::kFloat32);
  model->eval();
  load_weights(*choice.weights, model->diffusers_parameters());
  spdlog::info("model-check: {} ({}), {:.1f} M parameters, weights {}", describe_hunyuan_config(choice.config),
               choice.origin, model->parameter_count() / 1e6, choice.weights->description);

  auto tensors = safetensors::load(o.inputs);
  auto as_float = [&](const std::string& name, bool required) {
    auto t = input(tensors, name, o.inputs, required);
    return t.defined() ? t.to(device, torch::kFloat32) : t;
  };
  TransformerInputs in;
  in.hidden_states = as_float("hidden_states", true);
  in.timestep = as_float("timestep", true);
  in.encoder_hidden_states = as_float("encoder_hidden_states", true);
  in.pooled_projections = as_float("pooled_projections", true);
  in.guidance = as_float("guidance", choice.config.guidance_embeds);
  auto mask = input(tensors, "encoder_attention_mask", o.inputs, false);
  if (!mask.defined()) mask = torch::ones({in.encoder_hidden_states.size(0), in.encoder_hidden_states.size(1)});
  in.encoder_attention_mask = (mask != 0).to(device);
  TT_CHECK(in.hidden_states.dim() == 5 && in.hidden_states.size(1) == choice.config.in_channels, ErrorCode::kData,
           o.inputs, ": hidden_states must be (B, ", choice.config.in_channels, ", T, H, W), got ",
           in.hidden_states.sizes());
  TT_CHECK(in.encoder_hidden_states.dim() == 3 && in.encoder_hidden_states.size(2) == choice.config.text_embed_dim,
           ErrorCode::kData, o.inputs, ": encoder_hidden_states must be (B, L, ", choice.config.text_embed_dim,
           "), got ", in.encoder_hidden_states.sizes());

  torch::Tensor sample;
  {
    AutocastScope autocast(o.dtype == "bf16");
    sample = model->forward(in);
  }
  safetensors::save(o.output, {{"sample", sample.to(torch::kFloat32).cpu()}},
                    {{"weights", o.weights}, {"inputs", o.inputs}, {"dtype", o.dtype}, {"device", device.str()}});
  spdlog::info("model-check: wrote sample {} to {}", str_cat(sample.sizes()), o.output);
}

}  // namespace tt
