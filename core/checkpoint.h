// Crash-safe checkpoint folders: run_dir/checkpoints/step_NNNNNNN/{model.safetensors (or
// lora.safetensors: a LoRA run's adapters), state.safetensors, state.json}. A checkpoint is written into a temporary sibling folder, every
// file fsynced, then renamed into place, so a kill at any moment leaves earlier checkpoints intact
// and never a folder that looks complete but is not.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/safetensors.h"

namespace tt::checkpoint {

/// The weights file of a full-model checkpoint, and of a LoRA run's (its adapters alone).
inline constexpr char kModelWeightsFile[] = "model.safetensors";
inline constexpr char kLoraWeightsFile[] = "lora.safetensors";

struct Checkpoint {
  int64_t step = 0;
  safetensors::TensorMap model;   // weights, diffusers key names
  /// The weights' file in the folder (state.json records it): "model.safetensors", or
  /// "lora.safetensors" for the adapters of a LoRA run.
  std::string model_file = kModelWeightsFile;
  /// The weights file's safetensors metadata ({"format": "pt"} is always added).
  std::map<std::string, std::string> model_metadata;
  safetensors::TensorMap state;   // optimizer moments, RNG states, scaler, ... (tensors)
  nlohmann::json info;            // state.json: step, data position, schedule, config digest, ...
};

/// "step_0000500"
std::string folder_name(int64_t step);

/// Writes `ckpt` as checkpoints_dir/step_NNNNNNN atomically (temp folder + fsync + rename) and
/// returns the final path. Replaces an existing complete folder of the same step. Throws kIo
/// (disk full, permissions) after removing its temporary folder.
std::string save(const std::string& checkpoints_dir, const Checkpoint& ckpt);

/// Loads a checkpoint folder. Throws kCheckpoint naming the folder and the missing/bad file.
Checkpoint load(const std::string& folder);

/// state.json of a checkpoint folder alone (step, data position, config, ...; "step" and
/// "complete" included), without reading the tensors: what a resume checks before it builds
/// anything. Throws kCheckpoint as load() does.
nlohmann::json load_state_json(const std::string& folder);

/// "step_0000500" -> 500; nullopt for any other folder name (temporary folders start with '.').
std::optional<int64_t> parse_folder_step(const std::string& name);

/// True when `folder` holds all three files and state.json parses with "complete": true.
bool is_complete(const std::string& folder);

/// Why `folder` is not a complete checkpoint ("state.json is missing", "model.safetensors is
/// unreadable: ...", ...); empty when it is one.
std::string damage_of(const std::string& folder);

/// step_NNNNNNN folders under checkpoints_dir that are not complete checkpoints, oldest step first,
/// each with damage_of's reason. The writer only ever renames a complete folder to that name, so
/// each is damage (a copy cut short, a file edited or removed), never a write in progress.
std::vector<std::pair<std::string, std::string>> list_damaged(const std::string& checkpoints_dir);

/// Complete checkpoint folders under checkpoints_dir, oldest step first. Temporary or damaged
/// folders are skipped.
std::vector<std::string> list_complete(const std::string& checkpoints_dir);

/// The newest complete checkpoint folder, if any.
std::optional<std::string> find_latest(const std::string& checkpoints_dir);

/// Deletes the oldest complete checkpoints so that at most `keep` remain (keep <= 0: keep all),
/// plus leftover temporary folders from killed writes.
void prune(const std::string& checkpoints_dir, int64_t keep);

}  // namespace tt::checkpoint
