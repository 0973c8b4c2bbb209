// Official <-> diffusers key names of the HunyuanVideo Transformer (see key_map.h). One table per
// scope (top level, refiner block, double block, single block) drives both directions, so they
// cannot drift apart.
#include "model/key_map.h"

#include <torch/torch.h>

#include <cctype>

#include "core/errors.h"

namespace tt {
namespace {

enum class Fuse {
  kNone,        // one tensor, same rows
  kThree,       // q, k, v stacked along dim 0, equal parts
  kQkvMlp,      // q, k, v (hidden rows each), then the MLP input (the rest)
  kSwapHalves,  // official [shift; scale] = diffusers [scale; shift]
};

struct ModuleRule {
  const char* official;
  Fuse fuse;
  const char* diffusers[4];  // 1, 3 or 4 names, in dim-0 order of the official tensor
};

struct Scope {
  const char* official_prefix;  // with the trailing dot; "" at the top level
  const char* diffusers_prefix;
  bool indexed;  // followed by "<block index>."
  const ModuleRule* rules;
  size_t rule_count;
};

const ModuleRule kTopRules[] = {
    {"img_in.proj", Fuse::kNone, {"x_embedder.proj"}},
    {"time_in.mlp.0", Fuse::kNone, {"time_text_embed.timestep_embedder.linear_1"}},
    {"time_in.mlp.2", Fuse::kNone, {"time_text_embed.timestep_embedder.linear_2"}},
    {"vector_in.in_layer", Fuse::kNone, {"time_text_embed.text_embedder.linear_1"}},
    {"vector_in.out_layer", Fuse::kNone, {"time_text_embed.text_embedder.linear_2"}},
    {"guidance_in.mlp.0", Fuse::kNone, {"time_text_embed.guidance_embedder.linear_1"}},
    {"guidance_in.mlp.2", Fuse::kNone, {"time_text_embed.guidance_embedder.linear_2"}},
    {"txt_in.input_embedder", Fuse::kNone, {"context_embedder.proj_in"}},
    {"txt_in.t_embedder.mlp.0", Fuse::kNone, {"context_embedder.time_text_embed.timestep_embedder.linear_1"}},
    {"txt_in.t_embedder.mlp.2", Fuse::kNone, {"context_embedder.time_text_embed.timestep_embedder.linear_2"}},
    {"txt_in.c_embedder.linear_1", Fuse::kNone, {"context_embedder.time_text_embed.text_embedder.linear_1"}},
    {"txt_in.c_embedder.linear_2", Fuse::kNone, {"context_embedder.time_text_embed.text_embedder.linear_2"}},
    {"final_layer.linear", Fuse::kNone, {"proj_out"}},
    {"final_layer.adaLN_modulation.1", Fuse::kSwapHalves, {"norm_out.linear"}},
};

const ModuleRule kRefinerRules[] = {
    {"norm1", Fuse::kNone, {"norm1"}},
    {"norm2", Fuse::kNone, {"norm2"}},
    {"self_attn_qkv", Fuse::kThree, {"attn.to_q", "attn.to_k", "attn.to_v"}},
    {"self_attn_proj", Fuse::kNone, {"attn.to_out.0"}},
    {"mlp.fc1", Fuse::kNone, {"ff.net.0.proj"}},
    {"mlp.fc2", Fuse::kNone, {"ff.net.2"}},
    {"adaLN_modulation.1", Fuse::kNone, {"norm_out.linear"}},
};

const ModuleRule kDoubleRules[] = {
    {"img_mod.linear", Fuse::kNone, {"norm1.linear"}},
    {"txt_mod.linear", Fuse::kNone, {"norm1_context.linear"}},
    {"img_attn_qkv", Fuse::kThree, {"attn.to_q", "attn.to_k", "attn.to_v"}},
    {"img_attn_q_norm", Fuse::kNone, {"attn.norm_q"}},
    {"img_attn_k_norm", Fuse::kNone, {"attn.norm_k"}},
    {"img_attn_proj", Fuse::kNone, {"attn.to_out.0"}},
    {"img_mlp.fc1", Fuse::kNone, {"ff.net.0.proj"}},
    {"img_mlp.fc2", Fuse::kNone, {"ff.net.2"}},
    {"txt_attn_qkv", Fuse::kThree, {"attn.add_q_proj", "attn.add_k_proj", "attn.add_v_proj"}},
    {"txt_attn_q_norm", Fuse::kNone, {"attn.norm_added_q"}},
    {"txt_attn_k_norm", Fuse::kNone, {"attn.norm_added_k"}},
    {"txt_attn_proj", Fuse::kNone, {"attn.to_add_out"}},
    {"txt_mlp.fc1", Fuse::kNone, {"ff_context.net.0.proj"}},
    {"txt_mlp.fc2", Fuse::kNone, {"ff_context.net.2"}},
};

const ModuleRule kSingleRules[] = {
    {"linear1", Fuse::kQkvMlp, {"attn.to_q", "attn.to_k", "attn.to_v", "proj_mlp"}},
    {"linear2", Fuse::kNone, {"proj_out"}},
    {"q_norm", Fuse::kNone, {"attn.norm_q"}},
    {"k_norm", Fuse::kNone, {"attn.norm_k"}},
    {"modulation.linear", Fuse::kNone, {"norm.linear"}},
};

// Indexed scopes first: "txt_in.individual_token_refiner.blocks." also starts with "txt_in.".
const Scope kScopes[] = {
    {"txt_in.individual_token_refiner.blocks.", "context_embedder.token_refiner.refiner_blocks.", true,
     kRefinerRules, std::size(kRefinerRules)},
    {"double_blocks.", "transformer_blocks.", true, kDoubleRules, std::size(kDoubleRules)},
    {"single_blocks.", "single_transformer_blocks.", true, kSingleRules, std::size(kSingleRules)},
    {"", "", false, kTopRules, std::size(kTopRules)},
};

int part_count(const ModuleRule& rule) {
  int count = 0;
  while (count < 4 && rule.diffusers[count] != nullptr) ++count;
  return count;
}

// A key split as <scope prefix><index.><module>.<param>.
struct SplitKey {
  const Scope* scope = nullptr;
  std::string index;  // "3." for indexed scopes, "" otherwise
  std::string module;
  std::string param;  // "weight", "bias"
};

// Matches `key` against the official (official = true) or diffusers prefixes of each scope and
// returns the scope whose rule table holds the module.
std::optional<std::pair<SplitKey, const ModuleRule*>> match(const std::string& key, bool official) {
  size_t last_dot = key.rfind('.');
  if (last_dot == std::string::npos) return std::nullopt;
  for (const Scope& scope : kScopes) {
    std::string prefix = official ? scope.official_prefix : scope.diffusers_prefix;
    if (key.compare(0, prefix.size(), prefix) != 0) continue;
    size_t start = prefix.size();
    SplitKey split;
    split.scope = &scope;
    if (scope.indexed) {
      size_t digits = start;
      while (digits < key.size() && std::isdigit(static_cast<unsigned char>(key[digits]))) ++digits;
      if (digits == start || digits >= key.size() || key[digits] != '.') continue;
      split.index = key.substr(start, digits + 1 - start);
      start = digits + 1;
    }
    if (last_dot <= start) continue;
    split.module = key.substr(start, last_dot - start);
    split.param = key.substr(last_dot + 1);
    for (size_t r = 0; r < scope.rule_count; ++r) {
      const ModuleRule& rule = scope.rules[r];
      if (official) {
        if (split.module == rule.official) return std::make_pair(split, &rule);
      } else {
        for (int p = 0; p < part_count(rule); ++p)
          if (split.module == rule.diffusers[p]) return std::make_pair(split, &rule);
      }
    }
  }
  return std::nullopt;
}

std::string diffusers_name(const SplitKey& split, const char* module) {
  return str_cat(split.scope->diffusers_prefix, split.index, module, ".", split.param);
}

std::string list_lines(const std::vector<std::string>& lines) {
  std::string out;
  size_t shown = std::min<size_t>(lines.size(), 20);
  for (size_t i = 0; i < shown; ++i) out += "\n  " + lines[i];
  if (lines.size() > shown) out += str_cat("\n  ... and ", lines.size() - shown, " more");
  return out;
}

}  // namespace

std::vector<DiffusersPart> official_to_diffusers_key(const std::string& official_key, int64_t rows,
                                                     int64_t hidden_size) {
  auto matched = match(official_key, /*official=*/true);
  if (!matched) return {};
  const SplitKey& split = matched->first;
  const ModuleRule& rule = *matched->second;
  std::vector<DiffusersPart> parts;
  switch (rule.fuse) {
    case Fuse::kNone:
      parts.push_back({diffusers_name(split, rule.diffusers[0]), {}});
      break;
    case Fuse::kThree: {
      TT_CHECK(rows % 3 == 0, ErrorCode::kCheckpoint, official_key, " has ", rows,
               " rows, which do not split into q, k, v of equal size");
      int64_t n = rows / 3;
      for (int p = 0; p < 3; ++p)
        parts.push_back({diffusers_name(split, rule.diffusers[p]), {{p * n, (p + 1) * n}}});
    } break;
    case Fuse::kQkvMlp: {
      int64_t h = hidden_size;
      TT_CHECK(h > 0 && rows > 3 * h, ErrorCode::kCheckpoint, official_key, " has ", rows,
               " rows, which do not split into q, k, v of ", h, " rows each plus the MLP input");
      for (int p = 0; p < 3; ++p)
        parts.push_back({diffusers_name(split, rule.diffusers[p]), {{p * h, (p + 1) * h}}});
      parts.push_back({diffusers_name(split, rule.diffusers[3]), {{3 * h, rows}}});
    } break;
    case Fuse::kSwapHalves: {
      TT_CHECK(rows % 2 == 0, ErrorCode::kCheckpoint, official_key, " has ", rows,
               " rows, which do not split into shift and scale halves");
      int64_t h = rows / 2;
      parts.push_back({diffusers_name(split, rule.diffusers[0]), {{h, rows}, {0, h}}});
    } break;
  }
  return parts;
}

std::optional<OfficialSlot> diffusers_to_official_key(const std::string& diffusers_key) {
  auto matched = match(diffusers_key, /*official=*/false);
  if (!matched) return std::nullopt;
  const SplitKey& split = matched->first;
  const ModuleRule& rule = *matched->second;
  OfficialSlot slot;
  slot.key = str_cat(split.scope->official_prefix, split.index, rule.official, ".", split.param);
  slot.parts = part_count(rule);
  for (int p = 0; p < slot.parts; ++p)
    if (split.module == rule.diffusers[p]) slot.part = p;
  slot.swap_halves = rule.fuse == Fuse::kSwapHalves;
  return slot;
}

int64_t infer_official_hidden_size(const std::map<std::string, std::vector<int64_t>>& shapes) {
  auto img_in = shapes.find("img_in.proj.weight");
  if (img_in != shapes.end() && !img_in->second.empty()) return img_in->second[0];
  for (const auto& [key, shape] : shapes) {
    bool linear1 = key.starts_with("single_blocks.") && key.ends_with(".linear1.weight");
    if (linear1 && shape.size() == 2) return shape[1];
  }
  return 0;
}

safetensors::TensorMap official_to_diffusers(const safetensors::TensorMap& official, int64_t hidden_size) {
  if (hidden_size <= 0) {
    std::map<std::string, std::vector<int64_t>> shapes;
    for (const auto& [key, tensor] : official) shapes[key] = tensor.sizes().vec();
    hidden_size = infer_official_hidden_size(shapes);
  }
  safetensors::TensorMap out;
  std::vector<std::string> unknown;
  for (const auto& [key, tensor] : official) {
    int64_t rows = tensor.dim() > 0 ? tensor.size(0) : 0;
    std::vector<DiffusersPart> parts = official_to_diffusers_key(key, rows, hidden_size);
    if (parts.empty()) unknown.push_back(key);
    for (const DiffusersPart& part : parts) {
      if (part.rows.empty()) {
        out[part.key] = tensor.clone();
        continue;
      }
      std::vector<torch::Tensor> pieces;
      for (const RowRange& range : part.rows) pieces.push_back(tensor.slice(0, range.begin, range.end));
      out[part.key] = torch::cat(pieces, 0);
    }
  }
  TT_CHECK(unknown.empty(), ErrorCode::kCheckpoint, unknown.size(),
           " official keys have no diffusers counterpart:", list_lines(unknown));
  return out;
}

safetensors::TensorMap diffusers_to_official(const safetensors::TensorMap& diffusers) {
  struct Group {
    std::vector<torch::Tensor> parts;
    bool swap_halves = false;
  };
  std::map<std::string, Group> groups;
  std::vector<std::string> unknown;
  for (const auto& [key, tensor] : diffusers) {
    std::optional<OfficialSlot> slot = diffusers_to_official_key(key);
    if (!slot) {
      unknown.push_back(key);
      continue;
    }
    Group& group = groups[slot->key];
    group.parts.resize(slot->parts);
    group.parts[slot->part] = tensor;
    group.swap_halves = slot->swap_halves;
  }
  TT_CHECK(unknown.empty(), ErrorCode::kCheckpoint, unknown.size(),
           " diffusers keys have no official counterpart:", list_lines(unknown));

  safetensors::TensorMap out;
  std::vector<std::string> incomplete;
  for (auto& [key, group] : groups) {
    bool complete = true;
    for (const torch::Tensor& part : group.parts) complete = complete && part.defined();
    if (!complete) {
      incomplete.push_back(key);
      continue;
    }
    torch::Tensor tensor = group.parts.size() == 1 ? group.parts[0].clone() : torch::cat(group.parts, 0);
    if (group.swap_halves) {
      int64_t h = tensor.size(0) / 2;
      tensor = torch::cat({tensor.slice(0, h), tensor.slice(0, 0, h)}, 0);
    }
    out[key] = tensor;
  }
  TT_CHECK(incomplete.empty(), ErrorCode::kCheckpoint, incomplete.size(),
           " fused official tensors lack some of their diffusers parts:", list_lines(incomplete));
  return out;
}

}  // namespace tt
