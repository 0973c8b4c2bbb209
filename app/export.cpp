// `teletron export` (see export.h).
#include "app/export.h"

#include <spdlog/spdlog.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <iostream>

#include "app/config.h"
#include "app/model_setup.h"
#include "core/checkpoint.h"
#include "core/errors.h"
#include "core/file_io.h"
#include "core/safetensors.h"
#include "model/diffusers_config.h"
#include "model/lora_io.h"
#include "model/transformer.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

std::string checkpoint_folder(const std::string& source) {
  if (checkpoint::is_complete(source)) return source;
  const std::optional<std::string> latest =
      checkpoint::find_latest((fs::path(source) / "checkpoints").string());
  TT_CHECK_HINT(latest.has_value(), ErrorCode::kCheckpoint,
                "pass a checkpoint folder like runs/train/checkpoints/step_0000500, or a run folder", source,
                ": not a complete checkpoint folder and no complete checkpoint inside it");
  return *latest;
}

torch::ScalarType export_dtype(const std::string& dtype) {
  TT_CHECK_HINT(dtype == "bf16" || dtype == "fp32", ErrorCode::kConfig, "pass --dtype bf16 or --dtype fp32",
                "export --dtype: expected bf16 or fp32, got ", dtype);
  return dtype == "bf16" ? torch::kBFloat16 : torch::kFloat32;
}

void write_model_folder(const ExportOptions& options, const HunyuanVideoConfig& config,
                        const std::map<std::string, torch::Tensor>& tensors) {
  const torch::ScalarType dtype = export_dtype(options.dtype);
  std::map<std::string, torch::Tensor> converted;
  int64_t bytes = 0;
  for (const auto& [name, tensor] : tensors) {
    converted[name] = tensor.to(torch::kCPU, dtype).contiguous();
    bytes += converted[name].numel() * static_cast<int64_t>(converted[name].element_size());
  }
  const nlohmann::json json = hunyuan_config_to_diffusers_json(config);
  save_diffusers_weights(options.output, converted, &json, options.max_shard_bytes);
  std::cout << "export: " << options.output << ": HunyuanVideoTransformer3DModel, " << converted.size()
            << " tensors, " << bytes / 1e9 << " GB " << options.dtype << " (config.json, "
            << (bytes > options.max_shard_bytes
                    ? "sharded with diffusion_pytorch_model.safetensors.index.json"
                    : "diffusion_pytorch_model.safetensors")
            << "); load it with HunyuanVideoTransformer3DModel.from_pretrained(\"" << options.output
            << "\")\n";
}

/// --ema: the averages of a checkpoint's state ("ema.<key>", train.ema_decay) under their weights' keys.
safetensors::TensorMap load_ema(const std::string& folder) {
  const std::string state = folder + "/state.safetensors";
  std::vector<std::string> names;
  for (const auto& [key, entry] : safetensors::read_header(state).tensors)
    if (key.rfind("ema.", 0) == 0) names.push_back(key);
  TT_CHECK_HINT(!names.empty(), ErrorCode::kCheckpoint,
                "drop --ema, or train with train.ema_decay > 0 (e.g. 0.999) to keep an average",
                "export --ema: ", folder, " holds no EMA (the run's train.ema_decay was 0)");
  safetensors::TensorMap out;
  for (auto& [key, tensor] : safetensors::load(state, names)) out[key.substr(4)] = std::move(tensor);
  std::cout << "export: the EMA of " << out.size() << " tensors (not the trained weights themselves)\n";
  return out;
}

}  // namespace

void run_export(const ExportOptions& options) {
  const std::string folder = checkpoint_folder(options.source);
  // state.json and the weights only: the optimizer state (twice the weights) is not read.
  const nlohmann::json info = checkpoint::load_state_json(folder);
  auto stored = info.find("config");
  TT_CHECK(stored != info.end() && stored->is_string(), ErrorCode::kCheckpoint, folder,
           ": state.json has no \"config\" (not written by teletron train)");
  const Config config = load_config_text(stored->get<std::string>(), folder + "/state.json");
  const std::string model_file = info.value("model_file", std::string(checkpoint::kModelWeightsFile));
  std::cout << "export: from " << folder << " (step " << info.at("step").get<int64_t>() << ")\n";

  if (model_file != checkpoint::kLoraWeightsFile) {
    TT_CHECK_HINT(!options.merge_lora, ErrorCode::kConfig, "drop --merge-lora",
                  "export --merge-lora: ", folder, " holds a full model, no LoRA adapters to merge");
    const ModelChoice choice = choose_model(config.model, config.model.weights);
    write_model_folder(options, choice.config,
                       options.ema ? load_ema(folder) : safetensors::load(folder + "/" + checkpoint::kModelWeightsFile));
    return;
  }

  // The adapters as every LoRA reader sees them (model/lora_io.h), their scale from the metadata
  // (the trained file's, which the averages share).
  const std::string lora_path = folder + "/" + checkpoint::kLoraWeightsFile;
  const LoraFile file = [&] {
    try {
      return options.ema ? read_lora_tensors(load_ema(folder), safetensors::read_header(lora_path).metadata,
                                             folder + "/state.safetensors (EMA)")
                         : read_lora_file(lora_path);
    } catch (const Error& error) {
      // The LoRA reader's hint names the file a user gives (model.lora.weights, --lora): here the
      // file is the checkpoint's own, and the way out is another checkpoint.
      if (error.code() != ErrorCode::kCheckpoint) throw;
      fs::path checkpoint(folder);
      if (!checkpoint.has_filename()) checkpoint = checkpoint.parent_path();  // given as "step_0000500/"
      throw Error(error.code(), error.what(),
                  str_cat("this checkpoint's adapters are damaged: export another checkpoint of the run (",
                          checkpoint.parent_path().string(), "/step_*)"));
    }
  }();
  if (!options.merge_lora) {
    // B times alpha / r, and lora_alpha = r in the metadata: every diffusers version applies scale 1.
    const torch::ScalarType dtype = export_dtype(options.dtype);
    safetensors::TensorMap out;
    std::vector<std::string> modules;
    int64_t rank = 0;
    for (const auto& [module, pair] : file.modules) {
      out[kLoraKeyPrefix + module + ".lora_A.weight"] = pair.a.to(dtype).contiguous();
      out[kLoraKeyPrefix + module + ".lora_B.weight"] = (pair.b * pair.scale).to(dtype).contiguous();
      modules.push_back(module);
      rank = pair.a.size(0);
    }
    const nlohmann::json adapter = {{"transformer.r", rank},
                                    {"transformer.lora_alpha", static_cast<double>(rank)},
                                    {"transformer.target_modules", modules}};
    fs::create_directories(options.output);
    const std::string path = (fs::path(options.output) / "pytorch_lora_weights.safetensors").string();
    const std::string temp = path + ".tmp";
    safetensors::save(temp, out, {{"format", "pt"}, {"lora_adapter_metadata", adapter.dump()}});
    fsync_path(temp, false);
    fs::rename(temp, path);
    std::cout << "export: " << path << ": " << modules.size() << " LoRA modules, rank " << rank
              << ", alpha/r = " << file.modules.begin()->second.scale << " folded into lora_B, "
              << options.dtype << "; load it with pipe.load_lora_weights(\"" << options.output << "\")\n";
    return;
  }

  TT_CHECK_HINT(
      config.model.weights.has_value(), ErrorCode::kConfig,
      "merge into the base the run trained on: its config's model.weights names it",
      "export --merge-lora: the run's config has no model.weights (the base the adapters belong to)");
  const ModelChoice choice = choose_model(config.model, config.model.weights);
  // Held on the host in the export's dtype (the 13B: 26 GB in bf16 instead of 51 GB in fp32); each
  // merge adds in fp32 and rounds once, so a bf16 base exports the same bits as an fp32 detour would
  // (an fp32 base exported as bf16 is rounded at load and again after the merge).
  HunyuanVideoTransformer model(choice.config, torch::kCPU, export_dtype(options.dtype));
  std::map<std::string, torch::Tensor> views = model->diffusers_parameters();
  load_weights(*choice.weights, views);
  torch::NoGradGuard no_grad;
  for (const auto& [module, pair] : file.modules) {
    auto weight = views.find(module + ".weight");
    TT_CHECK(weight != views.end(), ErrorCode::kCheckpoint, folder, "/", checkpoint::kLoraWeightsFile, ": ",
             module, " is no module of the model");
    torch::Tensor& w = weight->second;
    w.copy_(w.to(torch::kFloat32) + pair.b.to(torch::kFloat32).matmul(pair.a.to(torch::kFloat32)) * pair.scale);
  }
  std::cout << "export: merged " << file.modules.size() << " LoRA modules into "
            << choice.weights->description << "\n";
  write_model_folder(options, choice.config, views);
}

}  // namespace tt
