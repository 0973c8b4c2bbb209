// LoRA files (see lora_io.h).
#include "model/lora_io.h"

#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <cmath>
#include <set>

#include "core/errors.h"
#include "model/key_map.h"

namespace tt {
namespace {

constexpr const char* kLoraFileHint =
    "check tele_tron.model.lora.weights (or --lora): a LoRA file as diffusers, ComfyUI or musubi-tuner write "
    "it, undamaged";

// A LoRA factor as stored: floating point, two dimensions, every value finite; fp32 here.
torch::Tensor lora_factor(const torch::Tensor& t, const std::string& key, const std::string& path) {
  TT_CHECK_HINT(t.is_floating_point(), ErrorCode::kCheckpoint, kLoraFileHint, path, ": ", key, " is ",
                t.scalar_type(), ", not floating point");
  const torch::Tensor f = t.to(torch::kFloat32);
  TT_CHECK_HINT(f.dim() != 2 || torch::isfinite(f).all().item<bool>(), ErrorCode::kCheckpoint, kLoraFileHint, path,
                ": ", key, " holds non-finite values (NaN or infinity)");
  return f;
}

// A module's `.alpha`: one finite number >= 0; 0 means alpha = rank, as kohya's scripts read it.
double lora_alpha(const torch::Tensor& t, const std::string& key, const std::string& path, int64_t rank) {
  TT_CHECK_HINT(t.numel() == 1 && !t.is_complex(), ErrorCode::kCheckpoint, kLoraFileHint,
                path, ": ", key, " must hold one number, got shape ", t.sizes(), " ", t.scalar_type());
  const double alpha = t.to(torch::kFloat64).item<double>();
  TT_CHECK_HINT(std::isfinite(alpha) && alpha >= 0, ErrorCode::kCheckpoint, kLoraFileHint, path, ": ", key,
                " is ", alpha, "; an alpha must be a finite number >= 0");
  return alpha == 0 ? static_cast<double>(rank) : alpha;
}

// The official modules of the double and single blocks that diffusers' modules with adapters come
// from (model/key_map.cpp holds the split of the fused ones).
const char* const kOfficialDouble[] = {"img_mod.linear", "txt_mod.linear", "img_attn_qkv", "img_attn_proj",
                                       "img_mlp.fc1",    "img_mlp.fc2",    "txt_attn_qkv", "txt_attn_proj",
                                       "txt_mlp.fc1",    "txt_mlp.fc2"};
const char* const kOfficialSingle[] = {"linear1", "linear2", "modulation.linear"};

bool starts_with(const std::string& text, const std::string& prefix) {
  return text.size() >= prefix.size() && text.compare(0, prefix.size(), prefix) == 0;
}
// `text` without `prefix` when it starts with it, else unchanged.
std::string without_prefix(const std::string& text, const std::string& prefix) {
  return starts_with(text, prefix) ? text.substr(prefix.size()) : text;
}
bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() &&
         text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string dots_to_underscores(std::string text) {
  for (char& c : text)
    if (c == '.') c = '_';
  return text;
}

// "double_blocks_3_img_attn_qkv" (kohya's flattened name) -> "double_blocks.3.img_attn_qkv".
std::optional<std::string> official_from_flat(const std::string& flat) {
  for (const auto& [scope, names, count] :
       {std::tuple{std::string("double_blocks_"), kOfficialDouble, std::size(kOfficialDouble)},
        std::tuple{std::string("single_blocks_"), kOfficialSingle, std::size(kOfficialSingle)}}) {
    if (!starts_with(flat, scope)) continue;
    size_t digits = scope.size();
    while (digits < flat.size() && std::isdigit(static_cast<unsigned char>(flat[digits]))) ++digits;
    if (digits == scope.size() || digits >= flat.size() || flat[digits] != '_') return std::nullopt;
    const std::string index = flat.substr(scope.size(), digits - scope.size());
    const std::string rest = flat.substr(digits + 1);
    for (size_t i = 0; i < count; ++i)
      if (rest == dots_to_underscores(names[i]))
        return scope.substr(0, scope.size() - 1) + "." + index + "." + names[i];
  }
  return std::nullopt;
}

// One adapter as stored: its module name in the file's naming, A, B and the file's scale.
struct StoredPair {
  torch::Tensor a, b;
  double scale = 1.0;
};

void add_official(LoraFile& file, const std::string& official, const StoredPair& pair, int64_t hidden_size,
                  const std::string& path) {
  const int64_t rows = pair.b.size(0);
  const std::vector<DiffusersPart> parts = official_to_diffusers_key(official + ".weight", rows, hidden_size);
  TT_CHECK_HINT(!parts.empty(), ErrorCode::kCheckpoint, kLoraFileHint, path, ": LoRA module ", official,
                " is not a module of HunyuanVideo's double or single blocks");
  for (const DiffusersPart& part : parts) {
    const std::string module = part.key.substr(0, part.key.size() - std::string(".weight").size());
    torch::Tensor b = pair.b;
    if (!part.rows.empty()) {
      std::vector<torch::Tensor> pieces;
      for (const RowRange& range : part.rows) pieces.push_back(pair.b.slice(0, range.begin, range.end));
      b = pieces.size() == 1 ? pieces[0] : torch::cat(pieces, 0);
    }
    file.modules[module] = {pair.a, b.contiguous(), pair.scale};
  }
}

}  // namespace

std::map<std::string, torch::Tensor> lora_file_tensors(const LoraSet& set) {
  std::map<std::string, torch::Tensor> tensors;
  for (const auto& [name, tensor] : set.named_parameters()) tensors[kLoraKeyPrefix + name] = tensor;
  return tensors;
}

std::map<std::string, std::string> lora_metadata(const LoraSet& set) {
  const LoraOptions& o = set.options;
  const double alpha = o.alpha > 0 ? o.alpha : static_cast<double>(o.rank);
  nlohmann::json adapter = {{"transformer.r", o.rank},
                            {"transformer.lora_alpha", alpha},
                            {"transformer.lora_dropout", o.dropout},
                            {"transformer.target_modules", set.modules()}};
  nlohmann::json ours = {
      {"rank", o.rank}, {"alpha", alpha}, {"dropout", o.dropout}, {"init", o.init}, {"targets", o.targets}};
  return {{"lora_adapter_metadata", adapter.dump()}, {"teletron_lora", ours.dump()}};
}

LoraFile read_lora_file(const std::string& path, int64_t hidden_size) {
  std::map<std::string, std::string> metadata;
  const safetensors::TensorMap tensors = safetensors::load(path, {}, &metadata);
  return read_lora_tensors(tensors, metadata, path, hidden_size);
}

LoraFile read_lora_tensors(const safetensors::TensorMap& tensors, const std::map<std::string, std::string>& metadata,
                           const std::string& path, int64_t hidden_size) {
  LoraFile file;
  // diffusers' own files carry their scale in the metadata; without it, alpha = r (scale 1).
  double diffusers_scale = 1.0;
  if (auto found = metadata.find("lora_adapter_metadata"); found != metadata.end()) {
    const nlohmann::json adapter = nlohmann::json::parse(found->second, nullptr, false);
    if (adapter.is_object() && adapter.contains("transformer.r") &&
        adapter.contains("transformer.lora_alpha") && adapter["transformer.r"].is_number() &&
        adapter["transformer.lora_alpha"].is_number()) {
      const double r = adapter["transformer.r"].get<double>();
      const double alpha = adapter["transformer.lora_alpha"].get<double>();
      TT_CHECK_HINT(r > 0 && std::isfinite(r) && alpha > 0 && std::isfinite(alpha), ErrorCode::kCheckpoint,
                    kLoraFileHint, path, ": lora_adapter_metadata gives r = ", r, ", lora_alpha = ", alpha,
                    "; both must be finite numbers > 0");
      diffusers_scale = alpha / r;
    }
  }
  std::vector<std::string> unplaced;
  std::set<std::string> used;
  for (const auto& [key, tensor] : tensors) {
    std::string module, which;
    for (const char* suffix : {".lora_A.weight", ".lora_down.weight"})
      if (ends_with(key, suffix)) {
        module = key.substr(0, key.size() - std::string(suffix).size());
        which = suffix;
      }
    if (module.empty()) continue;  // B and alpha are found from A
    const bool kohya = which == ".lora_down.weight";
    const std::string up_key = module + (kohya ? ".lora_up.weight" : ".lora_B.weight");
    auto up = tensors.find(up_key);
    TT_CHECK_HINT(up != tensors.end(), ErrorCode::kCheckpoint, kLoraFileHint, path, ": ", key, " has no ", up_key);
    StoredPair pair{lora_factor(tensor, key, path), lora_factor(up->second, up_key, path), 1.0};
    TT_CHECK_HINT(pair.a.dim() == 2 && pair.b.dim() == 2 && pair.a.size(0) > 0 && pair.b.size(1) == pair.a.size(0),
                  ErrorCode::kCheckpoint, kLoraFileHint, path, ": ", key, " ", pair.a.sizes(), " and ", up_key, " ",
                  pair.b.sizes(), " are not a LoRA pair (r, in) and (out, r)");
    used.insert(key);
    used.insert(up_key);
    if (auto alpha = tensors.find(module + ".alpha"); alpha != tensors.end()) {
      pair.scale = lora_alpha(alpha->second, alpha->first, path, pair.a.size(0)) / static_cast<double>(pair.a.size(0));
      used.insert(module + ".alpha");
    }
    if (kohya) {
      file.format = "musubi";
      const std::string flat = without_prefix(module, "lora_unet_");
      const std::optional<std::string> official = official_from_flat(flat);
      if (!official) {
        unplaced.push_back(key);
        continue;
      }
      add_official(file, *official, pair, hidden_size > 0 ? hidden_size : pair.a.size(1), path);
    } else if (starts_with(module, "diffusion_model.")) {
      file.format = "comfyui";
      add_official(file, without_prefix(module, "diffusion_model."), pair,
                   hidden_size > 0 ? hidden_size : pair.a.size(1), path);
    } else {
      file.format = "diffusers";
      if (!tensors.count(module + ".alpha")) pair.scale = diffusers_scale;
      module = without_prefix(module, kLoraKeyPrefix);
      file.modules[module] = {pair.a, pair.b, pair.scale};
    }
  }
  for (const auto& [key, tensor] : tensors)
    if (!used.count(key)) unplaced.push_back(key);
  TT_CHECK_HINT(
      unplaced.empty(), ErrorCode::kCheckpoint,
      "teletron reads LoRA files of the diffusers/PEFT layout (transformer.<module>.lora_A/B.weight), "
      "ComfyUI's (diffusion_model.<module>.lora_A/B.weight) and musubi-tuner's (lora_unet_<module>."
      "lora_down/lora_up.weight, .alpha)",
      path, ": ", unplaced.size(), " key(s) are no LoRA pair of the double or single blocks, the first ",
      unplaced.front());
  TT_CHECK_HINT(!file.modules.empty(), ErrorCode::kCheckpoint, kLoraFileHint, path,
                ": no LoRA pairs (lora_A/lora_B or lora_down/lora_up)");
  return file;
}

std::vector<std::string> load_lora_into(const LoraSet& set, const LoraFile& file, const std::string& source) {
  std::map<std::string, const LoraAdapterImpl::Pair*> pairs;
  for (const LoraAdapter& adapter : set.adapters)
    for (const auto& pair : adapter->pairs()) pairs[pair.module] = &pair;
  std::vector<std::string> problems;
  for (const auto& [module, stored] : file.modules) {
    auto found = pairs.find(module);
    if (found == pairs.end()) {
      problems.push_back(module + ": not adapted by this run's model.lora.targets");
    } else if (stored.a.sizes() != found->second->a.sizes() || stored.b.sizes() != found->second->b.sizes()) {
      problems.push_back(str_cat(module, ": A ", stored.a.sizes(), " B ", stored.b.sizes(),
                                 " in the file, A ", found->second->a.sizes(), " B ",
                                 found->second->b.sizes(), " here"));
    }
  }
  TT_CHECK_HINT(problems.empty(), ErrorCode::kCheckpoint,
                "match tele_tron.model.lora.rank and .targets to the file (its rank is its lora_A's rows)",
                source, ": ", problems.size(), " LoRA module(s) do not fit, the first: ", problems.front());
  const double scale = set.options.scale();
  std::vector<std::string> missing;
  torch::NoGradGuard no_grad;
  for (const auto& [module, pair] : pairs) {
    auto stored = file.modules.find(module);
    if (stored == file.modules.end()) {
      missing.push_back(module);
      continue;
    }
    pair->a.copy_(stored->second.a);
    const double factor = stored->second.scale / scale;
    pair->b.copy_(factor == 1.0 ? stored->second.b : stored->second.b * factor);
  }
  return missing;
}

}  // namespace tt
