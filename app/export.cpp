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
#include "model/transformer.h"

namespace tt {
namespace {

namespace fs = std::filesystem;

const char kLoraPrefix[] = "transformer.";

std::string checkpoint_folder(const std::string& source) {
  if (checkpoint::is_complete(source)) return source;
  const std::optional<std::string> latest =
      checkpoint::find_latest((fs::path(source) / "checkpoints").string());
  TT_CHECK_HINT(latest.has_value(), ErrorCode::kCheckpoint,
                "pass a checkpoint folder like runs/train/checkpoints/step_0000500, or a run folder", source,
                ": not a complete checkpoint folder and no complete checkpoint inside it");
  return *latest;
}

// The run's LoRA scale alpha / r, from the adapters file's metadata (teletron writes it).
double lora_scale(const checkpoint::Checkpoint& ckpt, const std::string& folder) {
  auto found = ckpt.model_metadata.find("lora_adapter_metadata");
  TT_CHECK(found != ckpt.model_metadata.end(), ErrorCode::kCheckpoint, folder,
           "/lora.safetensors has no lora_adapter_metadata (not written by teletron train)");
  const nlohmann::json adapter = nlohmann::json::parse(found->second, nullptr, false);
  TT_CHECK(adapter.is_object() && adapter.value("transformer.r", 0.0) > 0 &&
               adapter.contains("transformer.lora_alpha"),
           ErrorCode::kCheckpoint, folder, "/lora.safetensors: lora_adapter_metadata lacks r or lora_alpha");
  return adapter["transformer.lora_alpha"].get<double>() / adapter["transformer.r"].get<double>();
}

// "transformer.<module>.lora_A.weight" -> module; empty for other keys.
std::string lora_module(const std::string& key, const char* kind) {
  const std::string suffix = std::string(".") + kind + ".weight";
  if (key.rfind(kLoraPrefix, 0) != 0 || key.size() <= suffix.size() + 12 ||
      key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
    return "";
  return key.substr(12, key.size() - 12 - suffix.size());
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

}  // namespace

void run_export(const ExportOptions& options) {
  const std::string folder = checkpoint_folder(options.source);
  checkpoint::Checkpoint ckpt = checkpoint::load(folder);
  auto stored = ckpt.info.find("config");
  TT_CHECK(stored != ckpt.info.end() && stored->is_string(), ErrorCode::kCheckpoint, folder,
           ": state.json has no \"config\" (not written by teletron train)");
  const Config config = load_config_text(stored->get<std::string>(), folder + "/state.json");
  std::cout << "export: from " << folder << " (step " << ckpt.step << ")\n";

  if (ckpt.model_file != "lora.safetensors") {
    TT_CHECK_HINT(!options.merge_lora, ErrorCode::kConfig, "drop --merge-lora",
                  "export --merge-lora: ", folder, " holds a full model, no LoRA adapters to merge");
    const ModelChoice choice = choose_model(config.model, config.model.weights);
    write_model_folder(options, choice.config, ckpt.model);
    return;
  }

  const double scale = lora_scale(ckpt, folder);
  if (!options.merge_lora) {
    // B times alpha / r, and lora_alpha = r in the metadata: every diffusers version applies scale 1.
    const torch::ScalarType dtype = export_dtype(options.dtype);
    safetensors::TensorMap out;
    std::vector<std::string> modules;
    int64_t rank = 0;
    for (const auto& [key, tensor] : ckpt.model) {
      torch::Tensor value = tensor.to(torch::kFloat32);
      if (const std::string module = lora_module(key, "lora_B"); !module.empty()) value = value * scale;
      if (const std::string module = lora_module(key, "lora_A"); !module.empty()) {
        modules.push_back(module);
        rank = tensor.size(0);
      }
      out[key] = value.to(dtype).contiguous();
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
              << ", alpha/r = " << scale << " folded into lora_B, " << options.dtype
              << "; load it with pipe.load_lora_weights(\"" << options.output << "\")\n";
    return;
  }

  TT_CHECK_HINT(
      config.model.weights.has_value(), ErrorCode::kConfig,
      "merge into the base the run trained on: its config's model.weights names it",
      "export --merge-lora: the run's config has no model.weights (the base the adapters belong to)");
  const ModelChoice choice = choose_model(config.model, config.model.weights);
  HunyuanVideoTransformer model(choice.config);
  std::map<std::string, torch::Tensor> views = model->diffusers_parameters();
  load_weights(*choice.weights, views);
  torch::NoGradGuard no_grad;
  int64_t merged = 0;
  for (const auto& [key, a] : ckpt.model) {
    const std::string module = lora_module(key, "lora_A");
    if (module.empty()) continue;
    auto b = ckpt.model.find(std::string(kLoraPrefix) + module + ".lora_B.weight");
    auto weight = views.find(module + ".weight");
    TT_CHECK(b != ckpt.model.end() && weight != views.end(), ErrorCode::kCheckpoint, folder,
             "/lora.safetensors: ", key, " has no lora_B, or ", module, " is no module of the model");
    weight->second.add_(b->second.to(torch::kFloat32).matmul(a.to(torch::kFloat32)) * scale);
    ++merged;
  }
  std::cout << "export: merged " << merged << " LoRA modules (alpha/r = " << scale << ") into "
            << choice.weights->description << "\n";
  write_model_folder(options, choice.config, views);
}

}  // namespace tt
