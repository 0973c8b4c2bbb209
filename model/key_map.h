// Parameter names of the HunyuanVideo Transformer in the official release (Tencent's
// HYVideoDiffusionTransformer: `double_blocks.0.img_attn_qkv.weight`, ...) and in diffusers
// (`transformer_blocks.0.attn.to_q.weight`, ...), both directions, as diffusers'
// scripts/convert_hunyuan_video_to_diffusers.py converts them. Fused official tensors split along
// dim 0: img_attn_qkv / txt_attn_qkv / the refiner's self_attn_qkv into 3 equal parts, single
// blocks' linear1 into (hidden, hidden, hidden, mlp_hidden); the final layer's adaLN rows are
// [shift; scale] in the official file and [scale; shift] in diffusers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/safetensors.h"

namespace tt {

/// Rows [begin, end) of a tensor along dim 0.
struct RowRange {
  int64_t begin = 0;
  int64_t end = 0;
};

/// One diffusers tensor held by an official tensor: the concatenation along dim 0 of `rows` of
/// the official tensor (empty `rows`: the whole tensor, unchanged).
struct DiffusersPart {
  std::string key;
  std::vector<RowRange> rows;
};

/// The diffusers tensors that the official tensor `official_key` holds. `rows` is its size along
/// dim 0 and `hidden_size` the model width (splits single blocks' linear1; see
/// infer_official_hidden_size). Empty when the key has no diffusers counterpart. Throws
/// kCheckpoint when a fused tensor's rows cannot be split that way.
std::vector<DiffusersPart> official_to_diffusers_key(const std::string& official_key, int64_t rows,
                                                     int64_t hidden_size);

/// Where a diffusers tensor lives in the official layout: part `part` of `parts` of `key`
/// (parts > 1: fused along dim 0; swap_halves: the final layer's [scale; shift] <-> [shift; scale]).
struct OfficialSlot {
  std::string key;
  int part = 0;
  int parts = 1;
  bool swap_halves = false;
};

/// nullopt when the diffusers key has no official counterpart.
std::optional<OfficialSlot> diffusers_to_official_key(const std::string& diffusers_key);

/// The model width of an official checkpoint from its tensor shapes (img_in.proj.weight rows,
/// else a single block's linear1 columns); 0 when neither is present.
int64_t infer_official_hidden_size(const std::map<std::string, std::vector<int64_t>>& shapes);

/// Whole-map conversions. They copy (fused tensors are cut or concatenated), so they suit tests,
/// small models and converters; loading goes through weight_io, which never materialises a file.
/// Unknown keys and incomplete fused groups throw kCheckpoint, listing every offender.
/// `hidden_size` <= 0: inferred from the map.
safetensors::TensorMap official_to_diffusers(const safetensors::TensorMap& official, int64_t hidden_size = 0);
safetensors::TensorMap diffusers_to_official(const safetensors::TensorMap& diffusers);

}  // namespace tt
