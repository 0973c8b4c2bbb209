// Loading and saving HunyuanVideo Transformer weights in the layouts people have on disk:
//   - diffusers: one `diffusion_pytorch_model.safetensors`, or HF shards plus
//     `diffusion_pytorch_model.safetensors.index.json`, in a save_pretrained folder (with
//     config.json) or a pipeline folder's `transformer/` subfolder;
//   - the official release (`double_blocks.0.img_attn_qkv.weight`, ...) as safetensors or as the
//     torch.save file `mp_rank_00_model_states.pt` (state dict under "module").
// Loading streams: each file is memory-mapped, every tensor is viewed in place (fused official
// tensors as row slices) and copied into its destination (converting dtype and device), and its
// pages are released right after, so the transient memory is about one tensor, not one file.
// Loading is strict: missing, unexpected and mis-shaped keys are reported together, before any
// destination is written.
#pragma once

#include <torch/types.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "model/diffusers_config.h"

namespace tt {

enum class WeightLayout { kDiffusers, kOfficial };

/// One tensor in one file of a WeightSource, located but not read.
struct StoredTensor {
  int file = 0;  // index into WeightSource::files
  torch::Dtype dtype = torch::kFloat32;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // in elements
  int64_t offset = 0;            // bytes from the start of the file to element [0, ..., 0]
};

struct WeightSource {
  /// What was found, for messages: "sharded diffusers checkpoint /m/....index.json (3 shards)".
  std::string description;
  WeightLayout layout = WeightLayout::kDiffusers;
  /// The weight files (safetensors or torch.save zip archives), in load order.
  std::vector<std::string> files;
  /// Every tensor, under the file's own names (official or diffusers; a wrapper prefix such as
  /// "module." is already stripped).
  std::map<std::string, StoredTensor> tensors;
  /// config.json of a diffusers folder; empty when there is none.
  std::string config_path;
  /// Official layout: the model width (splits single blocks' linear1). 0 for diffusers.
  int64_t hidden_size = 0;
};

/// Finds and indexes the weights at `path` (a file, an index json or a folder; see the top of
/// this file), reading only headers. Throws kCheckpoint with what was found and a hint when the
/// path holds no weights, an index is corrupt (missing shard, a key its shard lacks), or the keys
/// fit neither layout; kIo when a file cannot be read.
WeightSource open_weights(const std::string& path);

/// The parsed config.json of a diffusers folder, if the source has one (kCheckpoint if invalid).
std::optional<nlohmann::json> diffusers_config_json(const WeightSource& source);

/// Copies every tensor of `source` into `destinations` (diffusers key -> tensor of any dtype and
/// device; views such as slices of a fused QKV weight are fine: they are written in place). Strict:
/// missing, unexpected and mis-shaped keys are listed together in one kCheckpoint error, thrown
/// before anything is written.
void load_weights(const WeightSource& source, const std::map<std::string, torch::Tensor>& destinations);

/// Every tensor of `source` under its diffusers name, as CPU copies in the file's dtype. This
/// materialises the whole checkpoint: for conversions and small models (load_weights streams).
std::map<std::string, torch::Tensor> read_weights(const WeightSource& source);

/// diffusers' default max_shard_size ("10GB").
inline constexpr int64_t kDefaultMaxShardBytes = 10'000'000'000;

/// Saves diffusers-format weights into `folder` (created if needed) as save_pretrained does: one
/// `diffusion_pytorch_model.safetensors` when the total is at most `max_shard_bytes`, else
/// `diffusion_pytorch_model-0000i-of-0000n.safetensors` shards plus the index json; config.json
/// too when `config` is given. Tensors keep their dtype (convert before calling to save bf16).
/// Every file is written to a temporary name, fsynced and renamed; weight files of an earlier
/// save that this one does not overwrite are removed afterwards. Throws kIo.
void save_diffusers_weights(const std::string& folder, const std::map<std::string, torch::Tensor>& tensors,
                            const nlohmann::json* config = nullptr,
                            int64_t max_shard_bytes = kDefaultMaxShardBytes);

/// Saves `tensors` (diffusers keys) as one official-layout safetensors file (fused tensors
/// concatenated, final-layer halves swapped), written atomically. For tests and for users of
/// the official code base.
void save_official_weights(const std::string& path, const std::map<std::string, torch::Tensor>& tensors);

}  // namespace tt
